"""An independent LlamaGen reference for tests: a forward pass straight from a state dict in the
official layout, written from LlamaGen's conventions (FoundationVision/LlamaGen,
autoregressive/models/gpt.py) without the engine's modules, and random weight files in the official
layouts."""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file


def ffn_dim(dim: int) -> int:
    hidden = int(2 * 4 * dim / 3)
    return hidden + (-hidden) % 256


def c2i_state(dim: int, n_layer: int, vocab: int, num_classes: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under LlamaGen's key names; the class table has LlamaGen's extra null row."""
    g = torch.Generator().manual_seed(seed)
    ffn = ffn_dim(dim)

    def rand(*shape, scale=0.1):
        return torch.randn(*shape, generator=g) * scale

    state = {"tok_embeddings.weight": rand(vocab, dim, scale=1.0),
             "cls_embedding.embedding_table.weight": rand(num_classes + 1, dim, scale=1.0),
             "norm.weight": 1 + rand(dim), "output.weight": rand(vocab, dim, scale=0.5)}
    for i in range(n_layer):
        p = f"layers.{i}."
        state.update({p + "attention.wqkv.weight": rand(3 * dim, dim), p + "attention.wo.weight": rand(dim, dim),
                      p + "feed_forward.w1.weight": rand(ffn, dim), p + "feed_forward.w3.weight": rand(ffn, dim),
                      p + "feed_forward.w2.weight": rand(dim, ffn), p + "attention_norm.weight": 1 + rand(dim),
                      p + "ffn_norm.weight": 1 + rand(dim)})
    return state


def t2i_state(dim: int, n_layer: int, vocab: int, caption_dim: int, tokens: int, seed: int = 0) -> dict:
    state = {k: v for k, v in c2i_state(dim, n_layer, vocab, 1, seed).items() if "embedding_table" not in k}
    g = torch.Generator().manual_seed(seed + 1)
    state["cls_embedding.cap_proj.fc1.weight"] = torch.randn(dim, caption_dim, generator=g) * 0.3
    state["cls_embedding.cap_proj.fc2.weight"] = torch.randn(dim, dim, generator=g) * 0.3
    state["cls_embedding.uncond_embedding"] = torch.randn(tokens, caption_dim, generator=g)
    return state


def to_hf_llama(state: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """LlamaGen names -> LANTERN's LlamaForCausalLM names (wqkv split into q, k, v)."""
    out = {"model.embed_tokens.weight": state["tok_embeddings.weight"], "model.norm.weight": state["norm.weight"],
           "lm_head.weight": state["output.weight"]}
    for key, value in state.items():
        if key.startswith("cls_embedding."):
            out["model." + key] = value
    names = {"attention.wo": "self_attn.o_proj", "feed_forward.w1": "mlp.gate_proj",
             "feed_forward.w3": "mlp.up_proj", "feed_forward.w2": "mlp.down_proj",
             "attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    for i in range(n_layer):
        q, k, v = state[f"layers.{i}.attention.wqkv.weight"].chunk(3)
        for name, tensor in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
            out[f"model.layers.{i}.self_attn.{name}.weight"] = tensor.contiguous()
        for ours, theirs in names.items():
            out[f"model.layers.{i}.{theirs}.weight"] = state[f"layers.{i}.{ours}.weight"]
    return out


def write_hf_folder(folder: Path, tensors: dict[str, torch.Tensor], config: dict, shards: int = 1) -> None:
    """config.json plus model.safetensors, or `shards` files with a model.safetensors.index.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    keys = sorted(tensors)
    if shards == 1:
        save_file({k: tensors[k].contiguous() for k in keys}, str(folder / "model.safetensors"))
        return
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = keys[s::shards]
        save_file({k: tensors[k].contiguous() for k in part}, str(folder / name))
        weight_map.update({k: name for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def _rope(x: torch.Tensor, grid: int, prefix: int) -> torch.Tensor:
    """x (T, H, hd): prefix rows get cos = sin = 0; image token i turns its first half of pairs by
    row i // grid and its second half by column i % grid, pairs interleaved."""
    T, H, hd = x.shape
    quarter = hd // 4
    freqs = 1.0 / (10000 ** (torch.arange(quarter).float() * 2 / (hd // 2)))  # (hd/4,)
    angles = torch.zeros(T, hd // 2)
    for t in range(prefix, T):
        cell = t - prefix
        angles[t, :quarter] = (cell // grid) * freqs
        angles[t, quarter:] = (cell % grid) * freqs
    cos, sin = angles.cos(), angles.sin()
    cos[:prefix], sin[:prefix] = 0, 0
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * cos[:, None] - b * sin[:, None]
    out[..., 1::2] = b * cos[:, None] + a * sin[:, None]
    return out


def forward(state: dict, h: torch.Tensor, n_head: int, grid: int, prefix: int,
            key_ok: torch.Tensor | None = None) -> torch.Tensor:
    """One sequence h (T, D) of embeddings -> logits (T, V), full causal attention recomputed.

    key_ok (T,) bool hides keys (LlamaGen's caption padding) from every query but their own.
    """
    T, D = h.shape
    hd = D // n_head
    allowed = torch.ones(T, T).tril().bool()
    if key_ok is not None:
        allowed = (allowed & key_ok[None, :]) | torch.eye(T, dtype=torch.bool)
    i = 0
    while f"layers.{i}.attention.wqkv.weight" in state:
        p = f"layers.{i}."
        x = _rms(h, state[p + "attention_norm.weight"])
        q, k, v = (x @ state[p + "attention.wqkv.weight"].T).split(D, dim=-1)
        q, k = _rope(q.view(T, n_head, hd), grid, prefix), _rope(k.view(T, n_head, hd), grid, prefix)
        scores = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        attn = torch.einsum("hts,shd->thd", weights, v.view(T, n_head, hd)).reshape(T, D)
        h = h + attn @ state[p + "attention.wo.weight"].T
        x = _rms(h, state[p + "ffn_norm.weight"])
        gate = F.silu(x @ state[p + "feed_forward.w1.weight"].T) * (x @ state[p + "feed_forward.w3.weight"].T)
        h = h + gate @ state[p + "feed_forward.w2.weight"].T
        i += 1
    return _rms(h, state["norm.weight"]) @ state["output.weight"].T


def greedy_c2i(state: dict, class_id: int, num_classes: int, n_head: int, grid: int, cfg: float) -> list[int]:
    """LlamaGen's greedy CFG decoding, uncond + (cond - uncond) * cfg, recomputing everything."""
    table, emb = state["cls_embedding.embedding_table.weight"], state["tok_embeddings.weight"]
    tokens: list[int] = []
    for _ in range(grid * grid):
        rows = []
        for c in (class_id, num_classes):
            h = torch.cat([table[c][None], emb[torch.tensor(tokens, dtype=torch.long)]])
            rows.append(forward(state, h, n_head, grid, prefix=1)[-1])
        cond, uncond = rows
        tokens.append(int((uncond + (cond - uncond) * cfg).argmax()))
    return tokens
