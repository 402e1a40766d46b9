"""LlamaGen-architecture GPT: Llama blocks, 2D RoPE, class condition as a prefix token.

Parameter names follow LlamaGen's `gpt.py` so that official checkpoints load strictly.
`forward` has one behaviour: embeddings in, hidden states out, written to the cache slots it is
given and attending where the mask allows. Training, prefill, decoding and tree verification differ
only in the positions, slots and mask they pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.tree import causal_mask
from engine.model.attention import attend, row_exact_mask
from engine.model.kv_cache import KVCache
from engine.model.matmul import linear, weight_state


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - (n % k)


@dataclass(frozen=True)
class GPTConfig:
    dim: int = 768
    n_layer: int = 12
    n_head: int = 12
    vocab_size: int = 16384
    num_classes: int = 1000
    cls_token_num: int = 1
    grid_size: int = 16
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    multiple_of: int = 256

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def ffn_dim(self) -> int:
        return find_multiple(int(2 * 4 * self.dim / 3), self.multiple_of)

    @property
    def num_image_tokens(self) -> int:
        return self.grid_size * self.grid_size

    @property
    def block_size(self) -> int:
        return self.cls_token_num + self.num_image_tokens


# Official class-conditional presets (layers / heads / dim), LlamaGen's GPT_B ... GPT_3B.
PRESETS = {
    "B": dict(n_layer=12, n_head=12, dim=768),
    "L": dict(n_layer=24, n_head=16, dim=1024),
    "XL": dict(n_layer=36, n_head=20, dim=1280),
    "XXL": dict(n_layer=48, n_head=24, dim=1536),
    "3B": dict(n_layer=24, n_head=32, dim=3200),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # the fused kernel: one call, bit for bit the lines below
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Computed in fp32 as LlamaGen does, so bf16 runs normalise like fp32 ones.
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_table_2d(grid_size: int, head_dim: int, base: float, cls_token_num: int) -> torch.Tensor:
    """(cls_token_num + grid^2, head_dim // 2, 2) cos/sin table.

    The first cls_token_num rows are zero: LlamaGen rotates condition tokens by cos = sin = 0, which
    zeroes their queries and keys. Of the head_dim // 2 rotary pairs, the first half turns with the
    token's row and the second half with its column; grid cells are in raster order.
    """
    half = head_dim // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))  # (hd/4,)
    angles = torch.outer(torch.arange(grid_size).float(), inv_freq)  # (G, hd/4)
    by_row = angles[:, None, :].expand(-1, grid_size, -1)  # (G, G, hd/4)
    by_col = angles[None, :, :].expand(grid_size, -1, -1)  # (G, G, hd/4)
    grid_angles = torch.cat([by_row, by_col], dim=-1).flatten(0, 1)  # (G*G, hd/2)
    table = torch.stack([grid_angles.cos(), grid_angles.sin()], dim=-1)  # (G*G, hd/2, 2)
    return torch.cat([torch.zeros(cls_token_num, half, 2), table])


class Rotation(NamedTuple):
    """A rope table laid out for a rotation in three elementwise kernels (see apply_rope)."""

    cos: torch.Tensor  # (T, 1, hd): cos of each pair's angle, on both members of the pair
    sin: torch.Tensor  # (T, 1, hd): -sin on a pair's first member, +sin on its second


def rotation(table: torch.Tensor) -> Rotation:
    """table (T, hd/2, 2) cos/sin -> the Rotation that apply_rope uses; built once per forward."""
    cos, sin = table[..., 0], table[..., 1]  # (T, hd/2) each
    return Rotation(torch.stack([cos, cos], -1).flatten(1)[:, None],  # (T, 1, hd)
                    torch.stack([-sin, sin], -1).flatten(1)[:, None])  # (T, 1, hd)


def apply_rope(x: torch.Tensor, rope: torch.Tensor | Rotation) -> torch.Tensor:
    """x (B, T, H, hd), rope a table (T, hd/2, 2) or its Rotation: rotate interleaved pairs
    (x0, x1) = (x[..., 0::2], x[..., 1::2]) to (x0 cos - x1 sin, x1 cos + x0 sin).

    As x * cos + swap(x) * sin with the signs folded into the sin table, which gives the same bits
    (a - b equals a + (-b) in floating point) with about half the kernel launches.
    """
    rot = rope if isinstance(rope, Rotation) else rotation(rope)
    xf = x.float()  # (B, T, H, hd)
    swapped = xf.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (B, T, H, hd): (x1, x0) pairs
    return (xf * rot.cos + swapped * rot.sin).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.wqkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, rope, layer: int, cache: KVCache | None, slots, mask) -> torch.Tensor:
        B, T, D = x.shape
        H = self.n_head
        # Weights are used through linear(): a module call costs more than the product at T = 1.
        qkv = linear(x, self.wqkv.weight).view(B, T, 3 * H, self.head_dim)  # (B, T, 3H, hd): q, k, v heads
        # Queries and keys rotate together: one rotation call instead of two per layer.
        qk = apply_rope(qkv[:, :, : 2 * H], rope).transpose(1, 2)  # (B, 2H, T, hd)
        q, k = qk[:, :H], qk[:, H:]  # (B, H, T, hd) each
        v = qkv[:, :, 2 * H :].transpose(1, 2)  # (B, H, T, hd)
        if cache is not None:
            k, v = cache.write(layer, slots, k, v, visible=mask.shape[-1])  # (B, H, S, hd)
        y = attend(q, k, v, mask, cache is not None and cache.row_exact)  # (B, H, T, hd)
        return linear(y.transpose(1, 2).reshape(B, T, D), self.wo.weight)


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = F.silu(linear(x, self.w1.weight)) * linear(x, self.w3.weight)  # (B, T, ffn)
        return linear(gated, self.w2.weight)


class TransformerBlock(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm: nn.Module = RMSNorm(cfg.dim, cfg.norm_eps)  # EAGLE's block replaces it
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, rope, layer, cache, slots, mask) -> torch.Tensor:
        # Submodules are called through .forward: nn.Module.__call__'s bookkeeping, times the
        # modules of every layer, is a measurable share of a one-token step. None has hooks.
        h = x + self.attention.forward(self.attention_norm.forward(x), rope, layer, cache, slots, mask)
        return h + self.feed_forward.forward(self.ffn_norm.forward(h))


class ClassEmbedder(nn.Module):
    """One row per class plus a last row, index num_classes, for the null class used by CFG."""

    def __init__(self, num_classes: int, dim: int):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + 1, dim)

    def forward(self, class_ids: torch.Tensor) -> torch.Tensor:
        return self.embedding_table(class_ids).unsqueeze(1)  # (B, 1, D)


class GPT(nn.Module):
    rope: torch.Tensor  # a buffer: (cls_token_num + grid^2, head_dim // 2, 2) cos/sin by sequence position
    # rotation(rope) at every position, and the weight_state of the table it was made from
    _rotations: Rotation | None
    _rotations_key: tuple[int, int] | None

    def __init__(self, cfg: GPTConfig, condition: nn.Module | None = None):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        # Class-conditional models embed class ids; text-to-image ones pass their caption embedder.
        self.cls_embedding = condition if condition is not None else ClassEmbedder(cfg.num_classes, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        table = rope_table_2d(cfg.grid_size, cfg.head_dim, cfg.rope_base, cfg.cls_token_num)
        self.register_buffer("rope", table, persistent=False)
        self._rotations, self._rotations_key = None, None  # rotation(rope) at every position, and its source

    @property
    def null_class(self) -> int:
        return self.cfg.num_classes

    def rotation_at(self, positions: torch.Tensor) -> Rotation:
        """The Rotation at sequence `positions` (T,), cut from one made for every position: equal to
        rotation(self.rope[positions]), without rebuilding it on every call (remade when the table is
        replaced or moved)."""
        key = weight_state(self.rope)
        rotations = self._rotations
        if rotations is None or self._rotations_key != key:
            rotations, self._rotations_key = rotation(self.rope), key
            self._rotations = rotations
        return Rotation(rotations.cos[positions], rotations.sin[positions])  # (T, 1, hd) x 2

    def embed_condition(self, class_ids: torch.Tensor) -> torch.Tensor:
        return self.cls_embedding(class_ids)  # (B, cls_token_num, D)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok_embeddings(tokens)  # (B, T, D)

    def forward(
        self,
        h: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache | None = None,
        slots: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """h (B, T, D) embeddings at sequence `positions` (T,) -> final-normed hidden (B, T, D).

        With a cache, keys and values go to cache `slots` (T,) and `mask` (T, S) says which slots
        each query sees; without one, `mask` (T, T) applies to the T inputs alone.
        """
        rope = self.rotation_at(positions)  # (T, 1, hd) x 2, shared by every layer
        if cache is not None and cache.row_exact and mask is not None:
            mask = row_exact_mask(mask, cache.capacity)  # (T, S')
        if mask is not None and mask.dtype == torch.bool:
            # Attention would turn a bool mask into an additive one in every layer; do it once.
            mask = torch.zeros(mask.shape, dtype=h.dtype, device=h.device).masked_fill_(~mask, float("-inf"))
        for i, layer in enumerate(self.layers):
            h = layer.forward(h, rope, i, cache, slots, mask)
        return self.norm(h)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return linear(hidden, self.output.weight).float()  # (B, T, V)

    def training_logits(self, class_ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, N, V) for N image tokens: row i predicts tokens[:, i]."""
        h = torch.cat([self.embed_condition(class_ids), self.embed_tokens(tokens[:, :-1])], dim=1)
        T = h.shape[1]
        causal = causal_mask(T, h.device)
        hidden = self.forward(h, torch.arange(T, device=h.device), mask=causal)
        return self.logits(hidden[:, self.cfg.cls_token_num - 1 :])
