"""The page built without launching it: the `compare` API's names, defaults and outputs, and ZeroGPU."""
import subprocess
import sys
import types
from pathlib import Path

import pytest

from app.backend.request import CompareRequest, api_parameters
from app.backend.runtime import Runtime
from app.page import ui

PUBLISHED = ["class_name", "seed", "temperature", "cfg_scale", "top_k", "delta", "k", "tree_depth", "tree_top_k",
             "tree_total", "method_1", "method_2", "method_3", "model", "prompt"]  # as README documents
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def endpoint():
    demo = ui.build_demo(Runtime(loader=lambda name: pytest.fail(f"building the page loaded {name}")))
    return demo.get_api_info()["named_endpoints"]["/compare"]


def test_published_parameters_keep_their_names_and_order(endpoint):
    names = [parameter["parameter_name"] for parameter in endpoint["parameters"]]
    assert names[:len(PUBLISHED)] == PUBLISHED
    assert names == [parameter.name for parameter in api_parameters()]
    assert {"lantern_variant", "lantern_lambda", "static_tree", "sjd_init", "gsd_window", "gsd_p_gap",
            "gsd_distance", "tree_score", "tree_min_score", "cool_w", "draft_top_p"} <= set(names)


def test_every_input_is_optional_with_the_pages_default(endpoint):
    defaults = {parameter.name: parameter.default for parameter in api_parameters()}
    for parameter in endpoint["parameters"]:
        assert parameter["parameter_has_default"], parameter["parameter_name"]
        assert parameter["parameter_default"] == defaults[parameter["parameter_name"]], parameter["parameter_name"]
    request = CompareRequest.from_api(**defaults)
    assert request == CompareRequest()


def test_statistics_stay_where_readme_says(endpoint):
    returns = [value["label"] for value in endpoint["returns"]]
    assert len(returns) == 18 and returns[15] == "statistics"  # new outputs go after it


def test_every_output_has_a_name_of_its_own_as_readme_lists_them(endpoint):
    returns = [value["label"] for value in endpoint["returns"]]
    assert len(set(returns)) == len(returns) and not any(name.startswith("value_") for name in returns)
    readme = (ROOT / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in returns), [n for n in returns if f"`{n}`" not in readme]


def test_spaces_is_applied_only_where_it_is_installed(monkeypatch):
    def endpoint():
        yield 1

    monkeypatch.setitem(sys.modules, "spaces", None)  # import spaces raises ImportError
    assert ui.on_zero_gpu(endpoint) is endpoint
    asked = []
    fake = types.SimpleNamespace(GPU=lambda duration: lambda fn: asked.append(duration) or ("on GPU", fn))
    monkeypatch.setitem(sys.modules, "spaces", fake)
    assert ui.on_zero_gpu(endpoint) == ("on GPU", endpoint) and asked == [60]


def test_importing_the_app_does_not_import_spaces(tmp_path):
    (tmp_path / "spaces.py").write_text("raise RuntimeError('spaces imported at import time')\n")
    code = "import app.page.handlers, app.page.ui, app.page.main"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_header_describes_the_shipped_model_from_its_metadata(tmp_path):
    import shutil

    from app.views import text
    from engine.loading.embedded import ASSETS, TARGET_FILE, embedded_metadata
    from engine.model.weights import update_metadata

    shipped = embedded_metadata()
    header = text.intro_markdown(shipped)
    assert f"{len(shipped['class_names'])} emoji categories" in header
    assert all(name in header for name in shipped["class_names"] + shipped["image_sets"])
    assert f"{shipped['config']['n_layer']} layers" in header
    shutil.copy(ASSETS / TARGET_FILE, tmp_path / TARGET_FILE)
    update_metadata(tmp_path / TARGET_FILE, {"class_names": ["cat", "dog", "owl"], "image_sets": ["Sketches"]})
    changed = text.intro_markdown(embedded_metadata(tmp_path))
    assert "3 emoji categories (cat, dog, owl)" in changed and "learnt from Sketches" in changed
    assert "Twemoji" not in changed
    assert "LANTERN Explorer" in text.intro_markdown(embedded_metadata(tmp_path / "missing"))
