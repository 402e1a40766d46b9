"""Speculative Jacobi decoding's drafts: no trained drafter, the target's own guesses.

The target's distributions at draft positions it has already seen (but not accepted) are sampled
again for the next window; positions never seen start as uniformly random tokens.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.drafters.base import DecodeState, Drafter
from engine.sampling import pick
from engine.tree import DraftTree


class JacobiDrafter(Drafter):
    def __init__(self, window: int):
        self.window = window

    def reset(self, state: DecodeState, prefix_hidden: torch.Tensor) -> None:
        self.dists: list[np.ndarray] = []  # target distributions for the positions after the root

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        size = min(self.window, max_depth)
        vocab = state.target.cfg.vocab_size
        dists = self.dists[:size]
        dists += [np.full(vocab, 1.0 / vocab)] * (size - len(dists))
        uniforms = torch.rand(size, generator=state.generator, dtype=torch.float64).numpy()
        tokens = [pick(d, u, state.sampling.greedy) for d, u in zip(dists, uniforms)]
        q_dists = np.stack([np.full(vocab, 1.0 / vocab)] + dists)  # (1 + size, V), row 0 unused
        q = [1.0] + [float(d[t]) for d, t in zip(dists, tokens)]
        return DraftTree.chain(torch.tensor([root] + tokens), torch.tensor(q, dtype=torch.float64),
                               torch.from_numpy(q_dists))

    def observe(self, state: DecodeState, tree: DraftTree, kept: list[int], hidden: torch.Tensor,
                probs: np.ndarray) -> None:
        # Node i's distribution is for the position after it; the bonus took the one at the last
        # kept node, the nodes after the first rejected draft give the next window's drafts.
        self.dists = [row / row.sum() for row in probs[len(kept):]]
