"""Static key/value cache written by slot.

Rejected draft tokens cost nothing to undo: their slots are simply overwritten later. Keeping an
accepted tree path means copying its entries to the contiguous slots after the committed prefix.
"""
from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layer: int, batch: int, n_head: int, capacity: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        shape = (n_layer, batch, n_head, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H, S, hd)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H, S, hd)
        self.capacity = capacity

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              visible: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, H, T, hd) at `slots` (T,); return the first `visible` slots of the layer."""
        self.k[layer].index_copy_(2, slots, k.to(self.k.dtype))
        self.v[layer].index_copy_(2, slots, v.to(self.v.dtype))
        return self.k[layer, :, :, :visible], self.v[layer, :, :, :visible]

    def keep(self, source_slots: torch.Tensor, start: int) -> None:
        """Copy entries at `source_slots` (n,) to slots start .. start + n - 1, in order."""
        n = source_slots.numel()
        destination = torch.arange(start, start + n, device=self.k.device)
        if torch.equal(source_slots, destination):
            return
        self.k[:, :, :, start:start + n] = self.k[:, :, :, source_slots]
        self.v[:, :, :, start:start + n] = self.v[:, :, :, source_slots]
