"""Acceptance rules and the walk that applies them to a verified draft tree.

p is the target's distribution at a node's parent, q the drafter's. Every rule answers one question
per drafted token: accept it, and if not, what residual distribution the next sibling (or the bonus
token) is drawn from. The exact rule keeps the output distribution equal to p; LANTERN first moves
the target mass of the token's latent neighbours onto it (at most delta in total variation) and then
applies the exact rule to that relaxed distribution.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Decision:
    accept_prob: float
    accepted: bool
    residual: np.ndarray  # (V,) unnormalised distribution for the next try at this position
    neighbours: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # tokens in A \ {x}
    neighbour_mass: np.ndarray = field(default_factory=lambda: np.zeros(0))  # their target mass
    token_prob: float = 0.0  # the target's p(x) before any relaxation
    latent_probs: np.ndarray = field(default_factory=lambda: np.zeros(0))  # p on all k neighbours of x


def _normalised(dist: np.ndarray) -> np.ndarray:
    total = dist.sum()
    return dist / total if total > 0 else dist


class ExactRule:
    """Lossless: accept x with min(1, p(x)/q(x)); on rejection draw from norm(max(0, p - q))."""

    name = "exact"

    def relax(self, p: np.ndarray, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distribution x is judged against, with the neighbours whose mass moved onto x."""
        return p, np.zeros(0, np.int64), np.zeros(0)

    def latent_probs(self, p: np.ndarray, token: int) -> np.ndarray:
        """p on the latent neighbours of x that the rule looks at (none for the exact rule)."""
        return np.zeros(0)

    def rules_out(self, q: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """Which drafts a rejection would rule out for later siblings (their residual mass becomes
        zero), estimated with the draft distribution q (F, V) in place of p: for candidate tokens
        (F, C), a (F, C, C) mask whose [f, i, j] says rejecting candidate i rules out candidate j.
        The exact rule rules out the rejected token alone."""
        return candidates[:, :, None] == candidates[:, None, :]

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, greedy: bool,
             uniform: float) -> Decision:
        """q_dist is the distribution x was sampled from, or None for a deterministic draft, whose
        proposal is a point mass on x (q(x) = 1)."""
        p = _normalised(p)
        relaxed, neighbours, mass = self.relax(p, token)
        seen = dict(token_prob=float(p[token]), latent_probs=self.latent_probs(p, token))
        if greedy:
            accepted = int(np.argmax(relaxed)) == token
            prob = 1.0 if accepted else 0.0
        else:
            q_token = 1.0 if q_dist is None else q_dist[token]
            prob = min(1.0, relaxed[token] / q_token) if q_token > 0 else 0.0
            accepted = uniform < prob
        if accepted:
            return Decision(prob, True, p, neighbours, mass, **seen)
        if q_dist is None:  # a deterministic draft is a point mass on x
            residual = relaxed.copy()
            residual[token] = 0.0
        else:
            residual = np.maximum(relaxed - q_dist, 0.0)
            if residual.sum() <= 0:  # p == q to rounding: any draw from p is right
                residual = relaxed.copy()
        return Decision(prob, False, residual, neighbours, mass, **seen)


class LanternRule(ExactRule):
    """LANTERN(delta, k): credit x with the mass of its nearest latent neighbours, at most delta.

    neighbour_table (V, k) int64 lists each code's k nearest codebook entries, nearest first. The
    relaxed distribution moves the mass s of A = {x, n_1 .. n_j*} onto x (s <= delta is the total
    variation distance moved) and zeroes the rest of A, so on rejection the residual has no mass on
    A: the whole neighbourhood counts as tried, as LANTERN's own code does.
    """

    name = "lantern"

    def __init__(self, neighbour_table: np.ndarray, delta: float):
        self.table = neighbour_table
        self.delta = delta

    def latent_probs(self, p: np.ndarray, token: int) -> np.ndarray:
        return p[self.table[token]]  # (k,)

    def rules_out(self, q: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        # Rejecting x zeroes all of its set A, so a sibling drafted inside A could never be accepted.
        if self.delta <= 0.0:  # no set A, as in relax: exactly the exact rule's choice
            return super().rules_out(q, candidates)
        table = torch.from_numpy(self.table).to(candidates.device)
        neighbours = table[candidates]  # (F, C, k)
        mass = q.gather(1, neighbours.flatten(1)).view(neighbours.shape)  # (F, C, k)
        in_a = mass.cumsum(-1) <= self.delta  # (F, C, k): the prefix A takes
        covered = torch.zeros(*candidates.shape, q.shape[-1], dtype=torch.bool)  # (F, C, V)
        covered.scatter_(2, neighbours, in_a)
        others = candidates[:, None, :].expand(-1, candidates.shape[1], -1)  # (F, C, C)
        return covered.gather(2, others) | super().rules_out(q, candidates)

    def relax(self, p: np.ndarray, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.delta <= 0.0:
            return p, np.zeros(0, np.int64), np.zeros(0)
        neighbours = self.table[token]  # (k,)
        mass = p[neighbours]  # (k,)
        count = int(np.searchsorted(np.cumsum(mass), self.delta, side="right"))
        used, used_mass = neighbours[:count], mass[:count]
        relaxed = p.copy()
        relaxed[token] += used_mass.sum()
        relaxed[used] = 0.0
        return relaxed, used, used_mass


class TypicalRule(ExactRule):
    """Medusa's typical acceptance (lossy): accept x if p(x) > min(eps, alpha * exp(-H(p)))."""

    name = "typical"

    def __init__(self, eps: float = 0.09, alpha: float = 0.3):
        self.eps, self.alpha = eps, alpha

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, greedy: bool,
             uniform: float) -> Decision:
        p = _normalised(p)
        if greedy:
            return super().test(p, token, q_dist, greedy, uniform)
        safe = np.where(p > 0, p, 1.0)
        entropy = float(-(p * np.log(safe)).sum())
        accepted = p[token] > min(self.eps, self.alpha * np.exp(-entropy))
        residual = p.copy()
        if not accepted:
            residual[token] = 0.0
        return Decision(float(accepted), bool(accepted), residual, token_prob=float(p[token]))
