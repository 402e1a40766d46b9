"""Verification: one target pass over the draft trees of every lane deciding (engine/drafters/wavefront.py);
the bound rule then walks each tree (engine/rules/walks.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg, distribution
from engine.core.tree import DraftTree
from engine.drafters.wavefront import Root
from engine.model.kv_cache import KVCache
from engine.model.target import Target

PREFIX = -1  # the raster index the cache records for condition slots: every image position sees them


@dataclass
class Forest:
    """The trees of one pass, laid out one after another: tree t's nodes start at offsets[t]."""

    trees: list[DraftTree]
    roots: list[Root]

    def __post_init__(self) -> None:
        sizes = [tree.size for tree in self.trees]
        self.offsets = [sum(sizes[:t]) for t in range(len(sizes))]
        self.size = sum(sizes)
        # A node's input sits `depth` positions after its tree's root.
        self.positions = torch.cat([root.position + tree.depths
                                    for tree, root in zip(self.trees, self.roots)])  # (N,)

    def mask(self, slot_positions: torch.Tensor) -> torch.Tensor:
        """(N, committed + N) bool: a node sees the cached tokens before its position, its own tree's
        ancestors, and the other trees' kept roots before its position (tokens decided already; a
        drafted token or a stand-in is seen only from its own tree)."""
        before = self.positions[:, None] > slot_positions[None, :]  # (N, committed)
        own = torch.zeros(self.size, self.size, dtype=torch.bool)  # (N, N)
        for tree, start in zip(self.trees, self.offsets):
            own[start:start + tree.size, start:start + tree.size] = tree.ancestor_mask()
        kept_roots = torch.tensor([start for start, root in zip(self.offsets, self.roots) if root.kept],
                                  dtype=torch.long)  # (K,)
        own[:, kept_roots] |= self.positions[:, None] > self.positions[kept_roots][None, :]
        return torch.cat([before, own], dim=1)

    def split(self, values):
        """Per tree, the rows of `values` (N, ...) that belong to it."""
        return [values[start:start + tree.size] for tree, start in zip(self.trees, self.offsets)]


@dataclass
class TargetPass:
    probs: np.ndarray  # (N, V) target distribution after each node
    hidden: torch.Tensor  # (R, N, D) target features of each node, rows (cond, null)


def target_pass(target: Target, cache: KVCache, slot_positions: torch.Tensor, forest: Forest,
                sampling: SamplingConfig, rows: int, prefix: int) -> TargetPass:
    """Feed every node at sequence position `prefix` + its raster index, into the cache slots after
    the `slot_positions` (committed,) already there (each slot's raster index, PREFIX for the
    condition's)."""
    device = cache.k.device
    committed, n = len(slot_positions), forest.size
    mask = forest.mask(slot_positions).to(device)  # (N, committed + N)
    positions = (prefix + forest.positions).to(device)  # (N,)
    slots = torch.arange(committed, committed + n, device=device)  # (N,)
    tokens = torch.cat([tree.tokens for tree in forest.trees])  # (N,)
    h = target.embed_tokens(tokens.to(device).expand(rows, n))  # (R, N, D)
    hidden = target(h, positions, cache, slots, mask)  # (R, N, D)
    logits = combine_cfg(target.logits(hidden), sampling.cfg_scale)  # (N, V)
    return TargetPass(distribution(logits, sampling).cpu().numpy(), hidden)
