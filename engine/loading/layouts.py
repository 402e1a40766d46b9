"""Reading official checkpoint files and renaming their tensors to this engine's module names.

LlamaGen saves `torch.save({"model": state_dict})` (FSDP-trained XXL/3B: a bare state dict); LANTERN
publishes its LlamaGen target and its EAGLE drafter in Hugging Face Llama layout (safetensors or
`pytorch_model.bin`, possibly sharded). Everything is read without unpickling code
(`weights_only=True` or safetensors). Renaming never drops an unknown key: whatever it does not
recognise is passed on unchanged, so that the strict loader lists it as unexpected.
"""
from __future__ import annotations

import argparse
import json
import pickle
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from engine.model.weights import WeightsError

# Buffers that some LlamaGen versions saved (the rotary table and the inference cache) but that are
# recomputed here.
IGNORED_PARTS = ("freqs_cis", "kv_cache")


def read_torch_file(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a `torch.save` file: `{"model": sd}` or a bare `sd`."""
    if not path.is_file():
        raise WeightsError(f"checkpoint {path} not found")
    try:
        # LlamaGen's training scripts store their argparse options under "args"; a Namespace holds
        # plain values, so allowing it keeps the load free of code execution.
        with torch.serialization.safe_globals([argparse.Namespace]):
            # mmap keeps multi-GB checkpoints out of memory until a tensor is copied into the model.
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as err:
        raise WeightsError(f"{path} is not a readable PyTorch checkpoint ({str(err).splitlines()[0]}); "
                           "download it again") from err
    if isinstance(obj, dict) and isinstance(obj.get("model"), dict):
        obj = obj["model"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise WeightsError(f"{path} holds no state dict (expected a dict of tensors, or one under 'model')")
    return obj


def read_state_file(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors file or a `torch.save` file, by extension."""
    if path.suffix != ".safetensors":
        return read_torch_file(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise WeightsError(f"{path} is not a readable safetensors file ({err}); download it again") from err


HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")


def read_hf_folder(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a Hugging Face model folder: one weights file or the shards of an index."""
    for name in HF_WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return read_state_file(path)
        try:
            shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError) as err:
            raise WeightsError(f"{path} is not a shard index ({err})") from err
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(read_state_file(folder / shard))
        return state
    raise WeightsError(f"{folder} has no weights; expected one of {', '.join(HF_WEIGHT_FILES)}")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise WeightsError(f"{path} is not a readable JSON file ({err})") from err


def drop_ignored(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if not any(p in k.split(".") for p in IGNORED_PARTS)}


# Hugging Face Llama names -> LlamaGen names, per decoder layer.
_LAYER_RENAMES = {
    "self_attn.o_proj.weight": "attention.wo.weight",
    "mlp.gate_proj.weight": "feed_forward.w1.weight",
    "mlp.up_proj.weight": "feed_forward.w3.weight",
    "mlp.down_proj.weight": "feed_forward.w2.weight",
    "input_layernorm.weight": "attention_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}
_QKV = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")


def _rename_layer(prefix: str, out_prefix: str, state: dict, out: dict) -> None:
    """Move one decoder layer's tensors from `prefix` (HF) to `out_prefix` (LlamaGen) names.

    q, k and v are stacked into LlamaGen's wqkv. LANTERN's conversion rotates q and k with LlamaGen's
    interleaved 2D RoPE directly, so no row permutation is involved (unlike Meta -> HF Llama).
    """
    if all(prefix + name in state for name in _QKV):
        out[out_prefix + "attention.wqkv.weight"] = torch.cat([state.pop(prefix + n) for n in _QKV])
    for hf_name, name in _LAYER_RENAMES.items():
        if prefix + hf_name in state:
            out[out_prefix + name] = state.pop(prefix + hf_name)


def hf_llama_to_llamagen(state: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """LANTERN's `LlamaForCausalLM` layout of a LlamaGen GPT -> LlamaGen's own names."""
    state = drop_ignored(state)
    out: dict[str, torch.Tensor] = {}
    for i in range(n_layer):
        _rename_layer(f"model.layers.{i}.", f"layers.{i}.", state, out)
    renames = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
               "lm_head.weight": "output.weight"}
    for key in list(state):
        if key in renames:
            out[renames[key]] = state.pop(key)
        elif key.startswith("model.cls_embedding."):
            out[key[len("model."):]] = state.pop(key)
    out.update(state)  # left-overs surface as unexpected keys in the strict load
    return out


def eagle_to_engine(state: dict[str, torch.Tensor], vocab_size: int, dim: int) -> dict[str, torch.Tensor]:
    """EAGLE/LANTERN drafter layout (`fc`, `layers.0.*`, `embed_tokens`) -> EagleNet names.

    The drafter file carries a copy of the target's token embedding; EagleNet reads the target's own,
    so the copy is only checked for shape and then left out.
    """
    state = drop_ignored(state)
    emb = state.pop("embed_tokens.weight", None)
    if emb is not None and tuple(emb.shape) != (vocab_size, dim):
        raise WeightsError(f"drafter embed_tokens has shape {tuple(emb.shape)}, but the target's token "
                           f"embedding is {(vocab_size, dim)}: the drafter belongs to another target")
    out: dict[str, torch.Tensor] = {}
    _rename_layer("layers.0.", "layer.", state, out)
    for key in ("fc.weight", "fc.bias"):
        if key in state:
            out[key] = state.pop(key)
    out.update(state)
    return out
