"""Static key/value cache written by slot.

Rejected draft tokens cost nothing to undo: their slots are simply overwritten later. Keeping an
accepted tree path means copying its entries to the contiguous slots after the committed prefix.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.model.matmul import product_dtype


def attention_dtype(weight: torch.Tensor, greedy: bool) -> torch.dtype:
    """The dtype of a target's cache, in which its attention runs, for a model whose output weight is
    `weight`: its own, except for greedy decoding with float32 models whose products round to
    bfloat16, which attend in float64. Their attention's sums are ordered by the number of query rows
    and visible slots, so a one-token pass and a verified tree's batched pass differ in the last bits,
    and the next product's rounding to bfloat16 makes those bits visible (greedy speculative decoding
    then parts from vanilla at the first near-tie). In float64 the two differ about 2^29 times more
    rarely once rounded to float32, and greedy decoding stays token for token. Sampling claims the
    target's distribution, not its bits, and keeps float32's cheaper attention."""
    if greedy and weight.dtype == torch.float32 and product_dtype(weight) == torch.bfloat16:
        return torch.float64
    return weight.dtype


class KVCache:
    def __init__(self, n_layer: int, batch: int, n_head: int, capacity: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        shape = (n_layer, batch, n_head, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H, S, hd)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H, S, hd)
        self.capacity = capacity

    @classmethod
    def for_model(cls, cfg, batch: int, capacity: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> KVCache:
        """A cache for every layer of a model with GPTConfig-style `cfg` (n_layer, n_head, head_dim)."""
        return cls(cfg.n_layer, batch, cfg.n_head, capacity, cfg.head_dim, dtype=dtype, device=device)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              visible: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, H, T, hd) at `slots` (T,); return the first `visible` slots of the layer."""
        self.k[layer].index_copy_(2, slots, k.to(self.k.dtype))
        self.v[layer].index_copy_(2, slots, v.to(self.v.dtype))
        return self.k[layer, :, :, :visible], self.v[layer, :, :, :visible]

    def keep(self, source_slots: Sequence[int] | torch.Tensor, start: int) -> None:
        """Copy entries at `source_slots` (n,) to slots start .. start + n - 1, in order."""
        sources = source_slots.tolist() if isinstance(source_slots, torch.Tensor) else list(source_slots)
        # A kept path usually begins with entries already in place (the root, a first child):
        # only the rest moves.
        skip = 0
        while skip < len(sources) and sources[skip] == start + skip:
            skip += 1
        moved = sources[skip:]
        if not moved:
            return
        first, n = start + skip, len(moved)
        index = torch.tensor(moved, device=self.k.device)  # (m,)
        self.k[:, :, :, first:first + n] = self.k.index_select(3, index)
        self.v[:, :, :, first:first + n] = self.v.index_select(3, index)
