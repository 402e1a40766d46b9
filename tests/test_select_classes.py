import pytest
import torch

from engine.model.gpt import GPT, GPTConfig
from engine.model.weights import WeightsError, load_module, read_metadata, save_model
from engine.train.select_classes import select_classes
from tests.conftest import TINY_GPT, tiny_gpt

NAMES = ("red", "green", "blue")


def test_narrowed_model_gives_the_source_logits_for_the_classes_kept_and_for_the_null_class(tmp_path):
    model = tiny_gpt()
    source, out = tmp_path / "source.safetensors", tmp_path / "out.safetensors"
    save_model(model, source, config=TINY_GPT, extra={"class_names": NAMES, "trained_steps": 7})
    select_classes(source, out, keep=("blue", "red"))
    narrowed = load_module(out, GPTConfig, GPT)
    assert narrowed.cfg.num_classes == 2 and read_metadata(out)["trained_steps"] == 7
    assert read_metadata(out)["class_names"] == ["blue", "red"]
    tokens = torch.randint(0, TINY_GPT.vocab_size, (3, 16))  # (B, grid^2)
    with torch.no_grad():
        expected = model.training_logits(torch.tensor([2, 0, model.null_class]), tokens)
        got = narrowed.training_logits(torch.tensor([0, 1, narrowed.null_class]), tokens)
    assert torch.equal(got, expected)


def test_source_without_class_names_needs_them_given_and_a_missing_class_is_named(tmp_path):
    source = tmp_path / "source.safetensors"
    save_model(tiny_gpt(), source, config=TINY_GPT)
    with pytest.raises(WeightsError, match="--source-classes"):
        select_classes(source, tmp_path / "out.safetensors", keep=("red",))
    with pytest.raises(WeightsError, match="no class purple"):
        select_classes(source, tmp_path / "out.safetensors", source_classes=NAMES, keep=("red", "purple"))
    select_classes(source, tmp_path / "out.safetensors", source_classes=NAMES, keep=("green",))
    assert load_module(tmp_path / "out.safetensors", GPTConfig, GPT).cfg.num_classes == 1
