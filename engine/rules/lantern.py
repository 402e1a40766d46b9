"""LANTERN's relaxed acceptance: a drafted token x also earns the target mass of its latent neighbours.

The neighbours n_1 .. n_k of x are its k nearest VQ codes, nearest first (a (V, >= k) table). With
s_j = p(n_1) + ... + p(n_j), the set A = {n_1 .. n_j*} takes the longest prefix whose mass stays
within the bound: s_j <= delta (LANTERN, `DeltaBound`), or s_j <= (lambda - 1) p(x) (LANTERN++,
`RatioBound`). x is then judged with p~(x) = p(x) + s_j*. `NeighbourCredit` computes this; two rules
differ in everything else:

`OfficialLantern` follows `evaluate_posterior` of LANTERN's official code (jadohu/LANTERN,
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
`PaperLantern` is the relaxed distribution of the paper's presentation: the mass of A moves onto x,
A is emptied, and the exact rule runs on that distribution (u < p~(x) / q(x), residual
norm(max(0, p~ - q)), siblings in turn under greedy too). Its total-variation distance to p is exactly
s_j* <= delta, and delta = 0 moves no mass: the exact rule's decisions.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.trace import Verdict
from engine.core.tree import DraftTree
from engine.rules.acceptance import BoundRule, Greedy, Rule, Sampling, normalised, unfiltered
from engine.rules.walks import WalkResult, longest_path


@dataclasses.dataclass(frozen=True)
class DeltaBound:
    """LANTERN: the credited mass stays within delta, whatever x's own probability."""

    delta: float

    def __call__(self, p_token: float | torch.Tensor) -> float:
        return self.delta

    @property
    def credits_nothing(self) -> bool:
        return self.delta <= 0.0


@dataclasses.dataclass(frozen=True)
class RatioBound:
    """LANTERN++: the credited mass stays within (lambda - 1) p(x), so a likely draft may borrow more."""

    lam: float

    def __call__(self, p_token: float | torch.Tensor) -> float | torch.Tensor:
        return (self.lam - 1.0) * p_token

    @property
    def credits_nothing(self) -> bool:
        return self.lam <= 1.0


Bound = DeltaBound | RatioBound


class Credit(NamedTuple):
    size: int  # |A|: A is the first `size` neighbours
    credited: float  # p~(x) = p(x) + the mass of A
    seen: dict  # what the trace shows: A, its mass, p on all k neighbours


class NeighbourCredit:
    """The set A each draft earns. table (V, >= k) int64 lists each code's nearest other codes,
    nearest first; the official rule zeroes the first k + 1 columns on a rejection, so give it k + 1
    columns where the codebook allows."""

    def __init__(self, table: np.ndarray, bound: Bound, k: int | None = None):
        self.table, self.bound = table, bound
        self.k = table.shape[1] if k is None else k
        # columns -> the table's first columns, contiguous on the drafter's device, made when first used
        self._table_tensors: dict[int, torch.Tensor] = {}

    def of(self, p: np.ndarray, token: int) -> Credit:
        """A for draft `token` under the target's p (V,)."""
        neighbours = self.table[token, : self.k]  # (k,)
        mass = p[neighbours]  # (k,)
        size = int(np.searchsorted(np.cumsum(mass), self.bound(float(p[token])), side="right"))
        seen = dict(neighbours=neighbours[:size], neighbour_mass=mass[:size], latent_probs=mass)
        return Credit(size, float(p[token] + mass[:size].sum()), seen)

    def on_drafts(self, q: torch.Tensor, candidates: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        """The mass s_j* each candidate (F, C) would earn with q (F, V) standing in for p: (F, C).
        own (F, C) is q at the candidates."""
        cumulative = gathered(q, self.neighbours_on(candidates)).cumsum(-1)  # (F, C, k)
        return cumulative.masked_fill(cumulative > self.bound_on(own), 0.0).amax(-1)

    def bound_on(self, own: torch.Tensor) -> float | torch.Tensor:
        """The bound for candidates with draft probability own (F, C), shaped to compare with their
        neighbours' (F, C, k) cumulative mass."""
        bound = self.bound(own)
        return bound[..., None] if isinstance(bound, torch.Tensor) else bound

    def neighbours_on(self, candidates: torch.Tensor, columns: int | None = None) -> torch.Tensor:
        """The first `columns` (default k) neighbours of each candidate (F, C): (F, C, columns)."""
        columns = self.k if columns is None else columns
        table = self._table_tensors.get(columns)
        if table is None or table.device != candidates.device:
            columns_first = np.ascontiguousarray(self.table[:, :columns])  # (V, columns)
            table = torch.from_numpy(columns_first).to(candidates.device)
            self._table_tensors[columns] = table
        return table.index_select(0, candidates.flatten()).view(*candidates.shape, columns)


def gathered(q: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """q (F, V) at codes (F, C, k) -> (F, C, k)."""
    return q.gather(1, codes.flatten(1)).view(codes.shape)


def ruled_out(candidates: torch.Tensor, zeroed: torch.Tensor, covers: torch.Tensor, vocab: int) -> torch.Tensor:
    """Rejecting candidate i (of F, C) zeroes its codes `zeroed` (F, C, Z) where `covers` (F, C, Z)
    holds: the (F, C, C) mask of the candidates that rules out, each candidate ruling out itself."""
    covered = torch.zeros(*candidates.shape, vocab, dtype=torch.bool, device=candidates.device)  # (F, C, V)
    covered.scatter_(2, zeroed, covers)
    others = candidates[:, None, :].expand(-1, candidates.shape[1], -1)  # (F, C, C)
    itself = candidates[:, :, None] == candidates[:, None, :]  # (F, C, C)
    return covered.gather(2, others) | itself


class _Lantern(BoundRule):
    """What every bound LANTERN rule shares: the credit, and the chance a draft is the one kept."""

    def __init__(self, credit: NeighbourCredit):
        self.credit = credit

    def draft_confidence(self, q: torch.Tensor, candidates: torch.Tensor,
                         own: torch.Tensor | None = None) -> torch.Tensor:
        """The chance that each candidate (F, C), siblings in the given order, is the one the walk
        takes, with q standing in for p: it is reached when every earlier sibling fails, and then
        passes with `_passes`."""
        own = q.gather(1, candidates) if own is None else own  # (F, C)
        relaxed = (own + self.credit.on_drafts(q, candidates, own)).clamp(max=1.0)  # (F, C): q~(x)
        # A row holds a handful of candidates: on Python floats, which cost less than tensor calls.
        chances = []
        for passes in self._passes(q, own, relaxed).tolist():
            reached, row = 1.0, []  # reached: every sibling before this one fails
            for chance in passes:
                row.append(max(chance * reached, 1e-6))
                reached *= 1.0 - chance
            chances.append(row)
        return torch.tensor(chances, dtype=own.dtype, device=own.device)  # (F, C)

    def _passes(self, q: torch.Tensor, own: torch.Tensor, relaxed: torch.Tensor) -> torch.Tensor:
        """A reached candidate passes with q~(x)."""
        return relaxed


class OfficialGreedy(_Lantern, Greedy):
    def judged(self, p: np.ndarray, token: int) -> tuple[np.ndarray, dict]:
        credit = self.credit.of(p, token)
        g = p.copy()
        g[token] = credit.credited  # the neighbours keep their mass
        return g, credit.seen

    def walk(self, tree: DraftTree, probs: np.ndarray, uniforms: np.ndarray) -> WalkResult:
        return longest_path(tree, probs, self)

    def _passes(self, q: torch.Tensor, own: torch.Tensor, relaxed: torch.Tensor) -> torch.Tensor:
        """A reached candidate passes when q~(x) beats every other token's q, softened to the ratio."""
        best_two = q.topk(2, dim=-1).values  # (F, 2)
        rival = torch.where(own >= best_two[:, :1], best_two[:, 1:], best_two[:, :1])  # (F, C)
        return (relaxed / rival.clamp(min=1e-12)).clamp(max=1.0)


class OfficialSampling(_Lantern, Sampling):
    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, uniform: float) -> Verdict:
        p = normalised(p)
        credit = self.credit.of(p, token)
        q_token = 1.0 if q_dist is None else float(q_dist[token])
        ratio = credit.credited / q_token if q_token > 0 else 0.0
        accepted = q_token > 0 and uniform <= ratio
        residual = p if accepted else self._residual(p, token, q_dist, credit.size)
        return Verdict(token, min(1.0, ratio), accepted, token_prob=float(p[token]), residual=residual,
                       **credit.seen)

    def _residual(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, size: int) -> np.ndarray:
        zeroed = self.credit.table[token, : self.credit.k + 1] if size > 0 else np.zeros(0, np.int64)
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

    def rules_out(self, q: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        zeroed = self.credit.neighbours_on(candidates, self.credit.k + 1)  # (F, C, k + 1)
        nearest_mass = gathered(q, zeroed[..., :1])  # (F, C, 1)
        a_nonempty = nearest_mass <= self.credit.bound_on(q.gather(1, candidates))  # (F, C, 1)
        return ruled_out(candidates, zeroed, a_nonempty.expand(zeroed.shape), q.shape[-1])


class _Paper(_Lantern):
    def judged(self, p: np.ndarray, token: int) -> tuple[np.ndarray, dict]:
        credit = self.credit.of(p, token)
        relaxed = p.copy()
        relaxed[self.credit.table[token, : credit.size]] = 0.0
        relaxed[token] = credit.credited
        return relaxed, credit.seen

    def rules_out(self, q: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor | None:
        if self.credit.bound.credits_nothing:  # only codes of no mass could join A: p~ = p
            return None
        neighbours = self.credit.neighbours_on(candidates)  # (F, C, k)
        in_a = gathered(q, neighbours).cumsum(-1) <= self.credit.bound_on(q.gather(1, candidates))  # (F, C, k)
        return ruled_out(candidates, neighbours, in_a, q.shape[-1])


class PaperGreedy(_Paper, Greedy):
    pass


class PaperSampling(_Paper, Sampling):
    pass


class OfficialLantern(Rule):
    name = "lantern"

    def __init__(self, credit: NeighbourCredit):
        self.credit = credit

    def target_sampling(self, sampling: SamplingConfig) -> SamplingConfig:
        return unfiltered(sampling) if sampling.greedy else dataclasses.replace(sampling, top_p_first=True)

    def bind(self, sampling: SamplingConfig) -> BoundRule:
        return OfficialGreedy(self.credit) if sampling.greedy else OfficialSampling(self.credit)


class PaperLantern(Rule):
    name = "lantern"

    def __init__(self, credit: NeighbourCredit):
        self.credit = credit

    def bind(self, sampling: SamplingConfig) -> BoundRule:
        return PaperGreedy(self.credit) if sampling.greedy else PaperSampling(self.credit)


VARIANTS: dict[str, type[OfficialLantern] | type[PaperLantern]] = {"official": OfficialLantern, "paper": PaperLantern}


def lantern_rule(table: np.ndarray, bound: Bound, variant: str = "official", k: int | None = None) -> Rule:
    """LANTERN (DeltaBound) or LANTERN++ (RatioBound) over neighbour `table`, as `variant` judges."""
    return VARIANTS[variant](NeighbourCredit(table, bound, k))
