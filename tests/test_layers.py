"""The engine's packages form layers: a module imports only from its own layer or those below it."""
from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
# Bottom to top, as docs/architecture.md lists them.
LAYERS = ["core", "model", "data", "rules", "drafters", "loop", "loading", "methods", "generation", "evaluation",
          "commands", "train", "__main__"]


def layer_of(module: str) -> str:
    """engine.rules.lantern -> rules; engine.methods -> methods."""
    return module.split(".")[1]


def engine_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("engine."))
    return found


def test_every_engine_module_sits_in_a_named_layer():
    for path in ENGINE.rglob("*.py"):
        relative = path.relative_to(ENGINE)
        if relative.name == "__init__.py" and len(relative.parts) == 1:
            continue
        assert relative.parts[0].removesuffix(".py") in LAYERS, f"{relative} is in no layer"


def test_imports_flow_down_the_layers_only():
    upward = []
    for path in ENGINE.rglob("*.py"):
        relative = path.relative_to(ENGINE)
        if len(relative.parts) == 1 and relative.name == "__init__.py":
            continue
        own = LAYERS.index(relative.parts[0].removesuffix(".py"))
        for module in engine_imports(path):
            if LAYERS.index(layer_of(module)) > own:
                upward.append(f"{relative} imports {module}")
    assert not upward, "imports running up the layers:\n" + "\n".join(sorted(upward))


APP = ENGINE.parent / "app"
# The explorer's layers, bottom to top: the runtime (no Gradio), the views (pure functions from traces
# to figures and HTML), the page (the Gradio wiring).
APP_LAYERS = ["backend", "views", "page"]


def app_imports(path: Path) -> set[str]:
    """The app modules a file imports, `from app.views import text` counted as app.views.text."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "app":
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "app")
    return {module for module in found if len(module.split(".")) >= 2 and module.split(".")[1] in APP_LAYERS}


def _imports_gradio_at_load(path: Path) -> bool:
    """A module-level import of gradio (app.backend.imagenet may read a data file Gradio installs, when asked)."""
    for node in ast.parse(path.read_text()).body:
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(name.split(".")[0] == "gradio" for name in names):
            return True
    return False


def test_every_app_module_sits_in_a_layer():
    loose = [str(path.relative_to(APP)) for path in APP.rglob("*.py")
             if path.relative_to(APP).parts[0] not in APP_LAYERS and path.name != "__init__.py"]
    assert not loose, f"app modules in no layer: {loose}"


def test_app_imports_flow_down_its_layers_and_never_into_the_command_layer():
    wrong = []
    for path in APP.rglob("*.py"):
        relative = path.relative_to(APP)
        if relative.parts[0] not in APP_LAYERS:
            continue
        own = APP_LAYERS.index(relative.parts[0])
        for module in app_imports(path):
            if APP_LAYERS.index(module.split(".")[1]) > own:
                wrong.append(f"{relative} imports {module}")
        wrong += [f"{relative} imports {module}" for module in engine_imports(path) if layer_of(module) == "commands"]
        if relative.parts[0] != "page" and _imports_gradio_at_load(path):
            wrong.append(f"{relative} imports gradio: only the page does")
    assert not wrong, "\n".join(sorted(wrong))
