"""Static key/value cache written by slot.

Rejected draft tokens cost nothing to undo: their slots are simply overwritten later. Keeping an
accepted tree path means copying its entries to the contiguous slots after the committed prefix.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


class KVCache:
    def __init__(self, n_layer: int, batch: int, n_head: int, capacity: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 row_exact: bool = False):
        shape = (n_layer, batch, n_head, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H, S, hd)
        # Row-exact attention (engine.model.attention) sums the softmax's weights as a product with
        # a column of ones after the values, in float64: both are kept here rather than made in
        # every layer.
        v_dtype = torch.float64 if row_exact else dtype
        self.v = torch.ones(*shape[:-1], head_dim + row_exact, dtype=v_dtype, device=device)  # (L, B, H, S, hd [+ 1])
        self.capacity = capacity
        self.row_exact = row_exact

    @classmethod
    def for_model(cls, cfg, batch: int, capacity: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu", row_exact: bool = False) -> KVCache:
        """A cache for every layer of a model with GPTConfig-style `cfg` (n_layer, n_head, head_dim)."""
        return cls(cfg.n_layer, batch, cfg.n_head, capacity, cfg.head_dim, dtype=dtype, device=device,
                   row_exact=row_exact)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              visible: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, H, T, hd) at `slots` (T,); return the first `visible` slots of the layer
        (values with their column of ones where the cache is row-exact)."""
        self.k[layer].index_copy_(2, slots, k.to(self.k.dtype))
        self.v[layer, ..., :v.shape[-1]].index_copy_(2, slots, v.to(self.v.dtype))
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
