"""LANTERN's relaxed acceptance: a drafted token x also earns the target mass of its latent neighbours.

The neighbours n_1 .. n_k of x are its k nearest VQ codes, nearest first (a (V, >= k) table). With
s_j = p(n_1) + ... + p(n_j), the set A = {n_1 .. n_j*} takes the longest prefix whose mass stays
within the bound: s_j <= delta (LANTERN), or s_j <= (lambda - 1) p(x) (LANTERN++, lambda given).
x is then judged with p~(x) = p(x) + s_j*. Two variants differ in everything else:

`official` follows `evaluate_posterior` of LANTERN's official code (jadohu/LANTERN,
models/ea_model_llamagen.py):
  - sampling: accept when u <= p~(x) / q(x). On rejection p(x) = 0 and, whenever A is not empty,
    p = 0 on the k + 1 nearest codes of x; the rest is renormalised (uniform if nothing is left) and
    is what the next sibling and the bonus token see. A sampled draft (q given, as LANTERN++'s static
    tree under sampling) instead leaves norm(max(0, p - q')), where q' is q with those k + 1 codes
    zeroed (the official `evaluate_posterior_v1`).
  - greedy: every tree node is judged on its parent's own p, unfiltered (no top-k/top-p), with
    g = p except g(x) = p~(x) (the neighbours keep their mass); x passes when it is the argmax of g,
    the first index winning ties. The walk keeps the first longest path of passing nodes.
  - the target's top-p applies before its top-k, as Hugging Face's warpers do.
`paper` is the relaxed distribution of the paper's presentation: the mass of A moves onto x, A is
emptied, and the exact rule runs on that distribution (u < p~(x) / q(x), residual norm(max(0, p~ - q)),
siblings in turn under greedy too). Its total-variation distance to p is exactly s_j* <= delta, and
delta = 0 gives the exact rule's decisions.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from engine.core.config import InvalidInput, SamplingConfig
from engine.core.trace import Verdict
from engine.rules.acceptance import Rule, argmax_is, exact_residual, normalised, unfiltered

VARIANTS = ("official", "paper")


class LanternRule(Rule):
    """LANTERN(delta, k), or LANTERN++(lambda, k) when `lam` is given.

    table (V, >= k) int64 lists each code's nearest other codes, nearest first; the official variant
    zeroes its first k + 1 columns on a rejection, so give it k + 1 columns where the codebook allows.
    """

    name = "lantern"

    def __init__(self, table: np.ndarray, delta: float, variant: str = "official",
                 lam: float | None = None, k: int | None = None):
        if variant not in VARIANTS:
            raise InvalidInput(f"unknown LANTERN variant {variant!r}; allowed: {', '.join(VARIANTS)}")
        self.table, self.delta, self.variant, self.lam = table, delta, variant, lam
        self.k = table.shape[1] if k is None else k
        self.judges_paths = variant == "official"
        self._table_tensor: torch.Tensor | None = None  # the table on the drafter's device, made when first used

    # --- the neighbour set A -------------------------------------------------------------------

    def _bound(self, p_token: float | torch.Tensor):
        return self.delta if self.lam is None else (self.lam - 1.0) * p_token

    @property
    def _never_credits(self) -> bool:
        """The paper variant at delta 0 forms no set A whatever p is (see _credit): the exact rule."""
        return self.variant == "paper" and self.lam is None and self.delta <= 0.0

    def _credit(self, p: np.ndarray, token: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(|A|, the k neighbours of x, p on them): A is the first |A| of them."""
        neighbours = self.table[token, : self.k]  # (k,)
        mass = p[neighbours]  # (k,)
        bound = self._bound(float(p[token]))
        if self.variant == "paper" and bound <= 0.0:  # no set A: exactly the exact rule
            return 0, neighbours, mass
        return int(np.searchsorted(np.cumsum(mass), bound, side="right")), neighbours, mass

    def target_sampling(self, sampling: SamplingConfig) -> SamplingConfig:
        if self.variant == "paper":
            return sampling
        if sampling.greedy:
            return unfiltered(sampling)
        return dataclasses.replace(sampling, top_p_first=True)

    # --- the test ------------------------------------------------------------------------------

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, greedy: bool,
             uniform: float) -> Verdict:
        p = normalised(p)
        count, neighbours, mass = self._credit(p, token)
        credited = float(p[token] + mass[:count].sum())  # p~(x)
        seen = dict(token=token, neighbours=neighbours[:count], neighbour_mass=mass[:count],
                    token_prob=float(p[token]), latent_probs=mass)
        if self.variant == "paper":
            return self._paper(p, token, q_dist, greedy, uniform, count, credited, seen)
        if greedy:
            judged = p.copy()
            judged[token] = credited
            accepted = argmax_is(judged, token)
            return Verdict(accept_prob=float(accepted), accepted=accepted, residual=p, **seen)
        q_token = 1.0 if q_dist is None else float(q_dist[token])
        ratio = credited / q_token if q_token > 0 else 0.0
        accepted = q_token > 0 and uniform <= ratio
        residual = p if accepted else self._official_residual(p, token, q_dist, count)
        return Verdict(accept_prob=min(1.0, ratio), accepted=accepted, residual=residual, **seen)

    def _official_residual(self, p: np.ndarray, token: int, q_dist: np.ndarray | None,
                           count: int) -> np.ndarray:
        zeroed = self.table[token, : self.k + 1] if count > 0 else np.zeros(0, np.int64)
        if q_dist is None:
            residual = p.copy()
            residual[token] = 0.0
            residual[zeroed] = 0.0
        else:
            q_kept = q_dist.copy()
            q_kept[zeroed] = 0.0
            residual = np.maximum(p - q_kept, 0.0)
        if residual.sum() <= 0.0:
            residual = np.ones_like(p)
        return residual / residual.sum()

    def _paper(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, greedy: bool,
               uniform: float, count: int, credited: float, seen: dict) -> Verdict:
        relaxed = p.copy()
        relaxed[self.table[token, :count]] = 0.0
        relaxed[token] = credited
        if greedy:
            accepted = argmax_is(relaxed, token)
            prob = float(accepted)
        else:
            q_token = 1.0 if q_dist is None else float(q_dist[token])
            prob = min(1.0, credited / q_token) if q_token > 0 else 0.0
            accepted = uniform < prob
        residual = p if accepted else exact_residual(relaxed, token, q_dist)
        return Verdict(accept_prob=prob, accepted=accepted, residual=residual, **seen)

    # --- what the drafter may expect ----------------------------------------------------------

    def draft_confidence(self, q: torch.Tensor, candidates: torch.Tensor, greedy: bool = False) -> torch.Tensor:
        """The chance that each candidate (F, C), siblings in the given order, is the one the walk
        takes, with q standing in for p: it is reached when every earlier sibling fails, and then
        passes with q~(x) (sampling) or when q~(x) beats every other token's q (greedy, judged on
        the parent's p), softened to the ratio of the two."""
        own = q.gather(1, candidates)  # (F, C)
        relaxed = (own + self._credit_on(q, candidates, own)).clamp(max=1.0)  # (F, C): q~(x)
        if greedy and self.judges_paths:
            best_two = q.topk(2, dim=-1).values  # (F, 2)
            rival = torch.where(own >= best_two[:, :1], best_two[:, 1:], best_two[:, :1])  # (F, C)
            passes = (relaxed / rival.clamp(min=1e-12)).clamp(max=1.0)
        else:
            passes = relaxed
        fail = torch.cumprod(1.0 - passes, dim=-1)  # (F, C): every sibling up to this one fails
        earlier_fail = F.pad(fail[:, :-1], (1, 0), value=1.0)  # (F, C): every sibling before it fails
        return (passes * earlier_fail).clamp(min=1e-6)

    def _credit_on(self, q: torch.Tensor, candidates: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        """The neighbour credit s_j* each candidate would earn on q: (F, C)."""
        if self._never_credits:
            return torch.zeros_like(own)
        bound = self._bound_on(own)
        neighbours = self._table_on(candidates.device)[candidates][..., : self.k]  # (F, C, k)
        cumulative = _gathered(q, neighbours).cumsum(-1)  # (F, C, k)
        return cumulative.masked_fill(cumulative > bound, 0.0).amax(-1)

    def _bound_on(self, own: torch.Tensor) -> float | torch.Tensor:
        """The bound on the credited mass for candidates with draft probability own (F, C), shaped
        to compare with their neighbours' (F, C, k) cumulative mass: delta itself, or LANTERN++'s
        bound per candidate."""
        return self.delta if self.lam is None else self._bound(own)[..., None]

    def _table_on(self, device: torch.device) -> torch.Tensor:
        """The neighbour table as a tensor on `device`, converted once."""
        if self._table_tensor is None or self._table_tensor.device != device:
            self._table_tensor = torch.from_numpy(np.ascontiguousarray(self.table)).to(device)
        return self._table_tensor

    # --- what the drafter may skip -------------------------------------------------------------

    def rules_out(self, q: torch.Tensor, candidates: torch.Tensor, greedy: bool = False) -> torch.Tensor | None:
        if greedy and self.judges_paths:  # every node is judged on its parent's own p
            return None
        if self._never_credits:  # no set A, as in the test
            return None
        nearest = self._table_on(candidates.device)[candidates]  # (F, C, >= k)
        neighbours = nearest[..., : self.k]  # (F, C, k)
        mass = _gathered(q, neighbours)  # (F, C, k)
        bound = self._bound_on(q.gather(1, candidates))
        if self.variant == "paper":
            in_a = mass.cumsum(-1) <= bound  # (F, C, k): the prefix A takes
            zeroed, covers = neighbours, in_a
        else:
            zeroed = nearest[..., : self.k + 1]  # (F, C, k + 1)
            a_nonempty = mass[..., :1] <= bound  # (F, C, 1): A holds at least the nearest code
            covers = a_nonempty.expand(zeroed.shape)
        covered = torch.zeros(*candidates.shape, q.shape[-1], dtype=torch.bool,
                              device=candidates.device)  # (F, C, V)
        covered.scatter_(2, zeroed, covers)
        others = candidates[:, None, :].expand(-1, candidates.shape[1], -1)  # (F, C, C)
        itself = candidates[:, :, None] == candidates[:, None, :]  # (F, C, C)
        return covered.gather(2, others) | itself


def _gathered(q: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """q (F, V) at codes (F, C, k) -> (F, C, k)."""
    return q.gather(1, codes.flatten(1)).view(codes.shape)
