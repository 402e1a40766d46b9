"""Medusa: extra heads on the target's last feature, each guessing one token further ahead, and a
static candidate tree over their top choices."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from engine.core.sampling import combine_cfg, distribution
from engine.core.tree import DraftTree
from engine.drafters.base import DecodeState, Drafter

# Each path lists, per depth, which of that head's ranked guesses to take: (0, 1) is the best
# guess of head 0 followed by the second-best guess of head 1. 15 nodes over 3 heads.
STATIC_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0),
    (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0),
    (0, 0, 0, 0),
)


@dataclass(frozen=True)
class MedusaConfig:
    dim: int
    vocab_size: int
    num_heads: int = 4


class ResBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """Head i maps the feature that predicted token t + 1 to logits for token t + 2 + i."""

    def __init__(self, cfg: MedusaConfig):
        super().__init__()
        self.cfg = cfg
        self.heads = nn.ModuleList(
            nn.Sequential(ResBlock(cfg.dim), nn.Linear(cfg.dim, cfg.vocab_size, bias=False))
            for _ in range(cfg.num_heads))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.stack([head(features) for head in self.heads], dim=-2).float()  # (..., H, V)


class MedusaDrafter(Drafter):
    def __init__(self, heads: MedusaHeads, paths: tuple[tuple[int, ...], ...] = STATIC_TREE):
        usable = heads.cfg.num_heads
        self.heads = heads
        self.paths = [p for p in paths if len(p) <= usable]
        self.ranks_needed = max(max(p) for p in self.paths) + 1

    def largest_tree(self) -> int:
        return len(self.paths) + 1

    def reset(self, state: DecodeState, prefix_hidden: torch.Tensor) -> None:
        self.feature = prefix_hidden[:, -1]  # (R, D): the feature that predicted the root

    def observe(self, state: DecodeState, tree: DraftTree, kept: list[int], hidden: torch.Tensor,
                probs: np.ndarray) -> None:
        self.feature = hidden[:, kept[-1]]  # (R, D)

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        logits = combine_cfg(self.heads(self.feature)[:, None], state.sampling.cfg_scale)  # (1, H, V)
        q = distribution(logits[0], state.sampling).cpu()  # (H, V)
        top_q, top_tokens = q.topk(self.ranks_needed, dim=-1)  # (H, r)
        node_of: dict[tuple[int, ...], int] = {(): 0}
        tokens, parents, qs = [root], [-1], [1.0]
        for path in self.paths:  # listed parents first
            if len(path) > max_depth:
                continue
            depth, rank = len(path) - 1, path[-1]
            node_of[path] = len(tokens)
            tokens.append(int(top_tokens[depth, rank]))
            parents.append(node_of[path[:-1]])
            qs.append(float(top_q[depth, rank]))
        return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(qs, dtype=torch.float64))
