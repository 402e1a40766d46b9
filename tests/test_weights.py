import pytest
import torch
from safetensors.torch import load_file

from engine.model.gpt import GPT, GPTConfig
from engine.model.weights import WeightsError, load_module, save_model
from tests.conftest import TINY_GPT, tiny_gpt


def test_round_trip_through_safetensors(tmp_path):
    model = tiny_gpt()
    path = tmp_path / "m.safetensors"
    save_model(model, path, config=TINY_GPT)
    loaded = load_module(path, GPTConfig, GPT)
    assert loaded.cfg == TINY_GPT
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key])


def test_parameters_stored_in_bfloat16_load_back_as_float32_rounded_and_buffers_exact(tmp_path):
    model = tiny_gpt()
    path = tmp_path / "m.safetensors"
    save_model(model, path, config=TINY_GPT, param_dtype=torch.bfloat16)
    stored = load_file(str(path))
    params = {name for name, _ in model.named_parameters()}
    loaded = load_module(path, GPTConfig, GPT)
    for key, value in model.state_dict().items():
        kept = loaded.state_dict()[key]
        assert kept.dtype == value.dtype
        if key in params:
            assert stored[key].dtype == torch.bfloat16 and torch.equal(kept, value.to(torch.bfloat16).to(value.dtype))
        else:  # buffers such as the rotary table keep their precision
            assert stored[key].dtype == value.dtype and torch.equal(kept, value)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(WeightsError, match="not found"):
        load_module(tmp_path / "absent.safetensors", GPTConfig, GPT)


def test_corrupt_file_is_a_clear_error(tmp_path):
    path = tmp_path / "corrupt.safetensors"
    path.write_bytes(b"\x00\x01 this is not a weight file")
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        load_module(path, GPTConfig, GPT)


def test_truncated_file_is_a_clear_error(tmp_path):
    path = tmp_path / "m.safetensors"
    save_model(tiny_gpt(), path, config=TINY_GPT)
    path.write_bytes(path.read_bytes()[:-500])
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        load_module(path, GPTConfig, GPT)


def test_wrong_layout_lists_missing_and_unexpected_keys(tmp_path):
    model = tiny_gpt()
    path = tmp_path / "m.safetensors"
    save_model(model, path, config=TINY_GPT)
    from safetensors.torch import load_file, save_file

    state = load_file(str(path))
    state["extra.weight"] = state.pop("norm.weight")
    save_file(state, str(path), metadata={"config": __import__("json").dumps(TINY_GPT.__dict__)})
    with pytest.raises(WeightsError, match=r"missing keys \[norm.weight\].*unexpected keys \[extra.weight\]"):
        load_module(path, GPTConfig, GPT)
