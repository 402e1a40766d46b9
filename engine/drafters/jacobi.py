"""Speculative Jacobi decoding's drafts: no trained drafter, the target's own guesses.

The target's distributions at draft positions it has already seen (but not accepted) are sampled
again for the next window. Positions never seen start from `init`:
  - random: a uniformly random token, drawn from the uniform distribution (q = 1 / V);
  - left: a copy of the token to its left in the image (random in the first column);
  - above: a copy of the token above it (random in the first row).
Copies are deterministic drafts, point masses for the acceptance rule.

Coupled drafting (MC-SJD / speculative coupled decoding) draws a seen position's new draft by maximal
coupling with its previous one y ~ q: keep y with probability min(1, p(y) / q(y)), else draw from
norm(max(0, p - q)). The new draft is still distributed as p, so verification stays exact, but it
equals the old draft as often as any draw from p can (1 - TV(p, q)); a draft that stays put keeps the
drafts after it meaningful, so later positions are accepted more often.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.core.sampling import draw, pick
from engine.core.tree import DraftTree
from engine.drafters.base import DecodeState, Drafter

INITS = ("random", "left", "above")


class JacobiDrafter(Drafter):
    def __init__(self, window: int, init: str = "random", coupled: bool = False,
                 fresh_point_mass: bool = False):
        """fresh_point_mass: count a random fresh draft as a point mass (q(x) = 1), as GSD's code
        does, instead of as a draw from the uniform distribution."""
        self.window, self.init, self.coupled = window, init, coupled
        self.fresh_point_mass = fresh_point_mass

    def largest_tree(self) -> int:
        return self.window + 1

    def reset(self, state: DecodeState, prefix_hidden: torch.Tensor) -> None:
        self.dists: list[np.ndarray] = []  # target distributions for the positions after the root
        self.previous: list[tuple[int, np.ndarray]] = []  # the last drafts there: (token, its q)

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        size = min(self.window, max_depth)
        vocab = state.target.cfg.vocab_size
        # Coupling needs a second uniform per position, for the residual draw.
        draws = 2 * size if self.coupled else size
        uniforms = torch.rand(draws, generator=state.generator, dtype=torch.float64).numpy()
        greedy = state.sampling.greedy
        tokens: list[int] = []
        q_dists: list[np.ndarray] = []
        for i in range(size):
            u, u_residual = uniforms[i], uniforms[(size + i) % draws]
            if i < len(self.dists):
                p = self.dists[i]
                if self.coupled and not greedy and i < len(self.previous):
                    token = self._coupled(p, *self.previous[i], u, u_residual)
                else:
                    token = pick(p, u, greedy)
                tokens.append(token)
                q_dists.append(p)
            else:
                token, q = self._fresh(state, tokens, vocab, u, greedy)
                tokens.append(token)
                q_dists.append(q)
        q_chain = [1.0] + [float(d[t]) for d, t in zip(q_dists, tokens)]
        rows = np.stack([np.full(vocab, 1.0 / vocab)] + q_dists)  # (1 + size, V), row 0 unused
        return DraftTree.chain(torch.tensor([root] + tokens), torch.tensor(q_chain, dtype=torch.float64),
                               torch.from_numpy(rows))

    @staticmethod
    def _coupled(p: np.ndarray, old: int, q_old: np.ndarray, u: float, u_residual: float) -> int:
        if q_old[old] > 0 and u < min(1.0, p[old] / q_old[old]):
            return old
        residual = np.maximum(p - q_old, 0.0)
        return draw(residual if residual.sum() > 0 else p, u_residual)

    def _fresh(self, state: DecodeState, drafted: list[int], vocab: int, u: float,
               greedy: bool) -> tuple[int, np.ndarray]:
        """A draft for a position no target pass has seen: (token, the distribution it counts as)."""
        position = len(state.tokens) + len(drafted)  # raster index of the new draft
        grid = state.target.cfg.grid_size
        known = state.tokens + drafted
        source = {"left": position - 1 if position % grid else -1,
                  "above": position - grid}.get(self.init, -1)
        if source >= 0:
            return known[source], _point_mass(known[source], vocab)
        uniform = np.full(vocab, 1.0 / vocab)
        token = pick(uniform, u, greedy)
        return token, (_point_mass(token, vocab) if self.fresh_point_mass else uniform)

    def observe(self, state: DecodeState, tree: DraftTree, kept: list[int], hidden: torch.Tensor,
                probs: np.ndarray) -> None:
        # Node i's distribution is for the position after it; the bonus took the one at the last
        # kept node, the nodes after the first rejected draft give the next window's drafts.
        self.dists = [row / row.sum() for row in probs[len(kept):]]
        tokens = tree.tokens.tolist()
        rows = tree.q_dists.numpy() if tree.q_dists is not None else None
        self.previous = ([(tokens[n], rows[n]) for n in range(len(kept) + 1, len(tokens))]
                         if rows is not None else [])


def _point_mass(token: int, vocab: int) -> np.ndarray:
    mass = np.zeros(vocab)
    mass[token] = 1.0
    return mass
