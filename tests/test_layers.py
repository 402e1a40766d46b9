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
