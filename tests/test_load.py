"""Loading by name: the device and precision policy, binding a condition, and an engine without import
cycles."""
import ast
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.core.config import InvalidInput
from engine.loading.load import load_model, resolve_device, resolve_dtype
from engine.loading.t2i import TextImageModel, text_gpt
from engine.model import matmul
from engine.model.tokenizer import VQModel
from tests.conftest import TINY_GPT, TINY_VQ

ROOT = Path(__file__).resolve().parent.parent


class FakeEncoder:
    def encode(self, prompt: str) -> torch.Tensor:
        return torch.randn(3, 24, generator=torch.Generator().manual_seed(len(prompt)))  # (n, C)

    def to(self, device):
        return self


def _text_model() -> TextImageModel:
    cfg = replace(TINY_GPT, num_classes=0, cls_token_num=6)
    return TextImageModel(text_gpt(cfg, caption_dim=24).eval(), VQModel(TINY_VQ).eval(), FakeEncoder(), name="t2i")


def test_the_policy_is_bfloat16_on_cuda_and_float32_on_the_cpu():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    bf16, f32 = torch.bfloat16, torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == (bf16, bf16)
    assert resolve_dtype(None, torch.device("cpu")) == (f32, f32)
    assert resolve_dtype("bfloat16", torch.device("cpu")) == (bf16, bf16)
    assert resolve_dtype("bfloat16-matmul", torch.device("cpu")) == (f32, bf16)
    with pytest.raises(InvalidInput, match="unknown dtype 'float8'; allowed: auto, float32, bfloat16, bfloat16-matmul"):
        resolve_dtype("float8", torch.device("cpu"))
    with pytest.raises(InvalidInput, match="unknown device"):
        resolve_device("gpu")


def test_the_embedded_model_loads_in_the_precision_asked_for():
    model = load_model("embedded", dtype="bfloat16")
    assert model.target.output.weight.dtype == torch.bfloat16 and model.target.rope.dtype == torch.float32
    assert next(model.tokenizer.parameters()).dtype == torch.float32
    assert all(next(net.parameters()).dtype == torch.bfloat16 for net in model.drafters.values())
    mixed = load_model("embedded", dtype="bfloat16-matmul")
    weight = mixed.target.layers[0].feed_forward.w2.weight
    assert weight.dtype == torch.float32 and matmul.product_dtype(weight) == torch.bfloat16
    assert matmul.product_dtype(load_model("embedded", dtype="float32").target.output.weight) is None
    with pytest.raises(InvalidInput, match="--weights-dir is for official models"):
        load_model("embedded", Path("elsewhere"))


def test_a_class_conditional_model_binds_to_itself_and_checks_the_class_it_decodes(tiny_model):
    assert not tiny_model.needs_prompt
    assert tiny_model.bind("green") is tiny_model and tiny_model.bind(None) is tiny_model
    assert tiny_model.unbound() is tiny_model
    assert tiny_model.class_id("green") == tiny_model.class_names.index("green") and tiny_model.class_id("1") == 1
    with pytest.raises(InvalidInput, match="unknown class 'purple'"):
        tiny_model.class_id("purple")


def test_a_text_model_binds_a_prompt_as_its_one_class():
    model = _text_model()
    assert model.needs_prompt
    bound = model.bind("  a red cube ")
    assert bound.class_names == ("a red cube",) and bound.class_id("a red cube") == 0
    assert bound.target.cfg.num_classes == 1 and bound.drafters is model.drafters
    assert model.unbound().target is model.target
    with pytest.raises(InvalidInput, match="'t2i' draws from a caption; write a prompt"):
        model.bind("   ")


def _module_imports(path: Path, modules: set[str]) -> set[str]:
    """The engine and app modules `path` imports outside any function."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                 if isinstance(node, ast.ImportFrom) and node.module else [])
        found |= {name for name in names if name in modules}
    return found


def test_no_module_level_import_cycle():
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for package in ("engine", "app") for p in (ROOT / package).rglob("*.py")}
    graph = {name: _module_imports(path, set(files)) - {name} for name, path in files.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        for dep in graph[name]:
            assert dep not in path, f"import cycle: {' -> '.join(path[path.index(dep):] + [dep])}"
            if dep not in done:
                visit(dep, path + [dep])
        done.add(name)

    for name in graph:
        visit(name, [name])
