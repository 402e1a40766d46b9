"""Acceptance rules: the rule types, the exact rule and Medusa's typical acceptance.

p is the target's distribution at a node's parent, q the drafter's. A method chooses a `Rule`; once
per decode, `rule.bind(sampling)` gives the `BoundRule` for the decoding mode, greedy or sampling. A
bound rule answers one question per drafted token: accept it, and if not, what residual distribution
the next sibling (or the next token) is drawn from. It walks the draft tree with those answers and
tells the drafters what it is likely to accept. The exact rule keeps the output distribution equal to
p. LANTERN's relaxed rules live in `engine/rules/lantern.py`, GSD's grouped rule in `engine/rules/gsd.py`.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import draw
from engine.core.trace import Verdict
from engine.core.tree import DraftTree
from engine.rules.walks import WalkResult, siblings_in_turn


def normalised(dist: np.ndarray) -> np.ndarray:
    total = dist.sum()
    return dist / total if total > 0 else dist


def argmax_is(dist: np.ndarray, token: int) -> bool:
    """True when `token` is the argmax of dist, the first index winning ties (numpy's and torch's)."""
    return int(np.argmax(dist)) == token


def unfiltered(sampling: SamplingConfig) -> SamplingConfig:
    """The same setup with top-k and top-p switched off."""
    return dataclasses.replace(sampling, top_k=0, top_p=1.0)


def exact_residual(p: np.ndarray, token: int, q_dist: np.ndarray | None) -> np.ndarray:
    """norm(max(0, p - q)) unnormalised; for a point mass on x, p with x removed."""
    if q_dist is None:
        residual = p.copy()
        residual[token] = 0.0
        return residual
    residual = np.maximum(p - q_dist, 0.0)
    return residual if residual.sum() > 0 else p.copy()  # p == q to rounding: any draw from p is right


class BoundRule:
    """A rule for one decoding mode: what the walk and the drafters ask of it.

    By default a draft is judged exactly: `decide` (the mode's test) on the distribution `judged`
    gives, and a rejection leaves norm(max(0, judged - q)). `Greedy` and `Sampling` give the two
    modes; a rule that judges another distribution refines `judged`.
    """

    def decide(self, judged: np.ndarray, token: int, q_dist: np.ndarray | None,
               uniform: float) -> tuple[float, bool]:
        """(the chance of accepting `token`, whether it is accepted) when judged against `judged`."""
        raise NotImplementedError

    def next_token(self, p: np.ndarray, residual: np.ndarray, uniform: float) -> int:
        """The token drawn where the walk stops: p is the target's distribution there, residual what
        the rejected drafts left of it."""
        raise NotImplementedError

    def judged(self, p: np.ndarray, token: int) -> tuple[np.ndarray, dict]:
        """The distribution draft `token` is judged on, and what the trace should show of it."""
        return p, {}

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, uniform: float) -> Verdict:
        """Judge drafted `token` against p (V,). q_dist is the distribution it was sampled from, or
        None for a deterministic draft, whose proposal is a point mass on it (q(x) = 1)."""
        p = normalised(p)
        judged, seen = self.judged(p, token)
        prob, accepted = self.decide(judged, token, q_dist, uniform)
        residual = p if accepted else exact_residual(judged, token, q_dist)
        return Verdict(token, prob, accepted, token_prob=float(p[token]), residual=residual, **seen)

    def at_depth(self, depth: int) -> BoundRule:
        """The rule that judges drafts at `depth` (1: the root's children). Most rules judge every
        depth alike; an annealed one (COOL-SD) relaxes early depths more than late ones."""
        return self

    def walk(self, tree: DraftTree, probs: np.ndarray, uniforms: np.ndarray) -> WalkResult:
        """Decide the tree: the accepted path, then the next token where it ends. By default each
        node's children are tried in turn, each on what the earlier ones' rejections left."""
        return siblings_in_turn(tree, probs, self, uniforms)

    def rules_out(self, q: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor | None:
        """Which drafts a rejection would rule out for later siblings (their residual mass becomes
        zero), estimated with the draft distribution q (F, V) in place of p: for candidate tokens
        (F, C), a (F, C, C) mask whose [f, i, j] says rejecting candidate i rules out candidate j.
        None, the default, when a rejection rules out the rejected token alone: the drafter then
        need not look."""
        return None

    def draft_confidence(self, q: torch.Tensor, candidates: torch.Tensor,
                         own: torch.Tensor | None = None) -> torch.Tensor:
        """How likely each candidate (F, C) is to be accepted, estimated with the draft distribution
        q (F, V) in place of p: (F, C). `own`, where the caller has it, is q at the candidates. For a
        rule that judges x on p(x) alone, that is q(x) itself."""
        return q.gather(1, candidates) if own is None else own


class Greedy(BoundRule):
    """Greedy decoding: a draft passes when it is the argmax of what is judged, and the walk ends on
    the target's own argmax, as vanilla greedy decoding would. As it stands, the exact greedy rule."""

    def decide(self, judged: np.ndarray, token: int, q_dist: np.ndarray | None,
               uniform: float) -> tuple[float, bool]:
        accepted = argmax_is(judged, token)
        return float(accepted), accepted

    def next_token(self, p: np.ndarray, residual: np.ndarray, uniform: float) -> int:
        return int(np.argmax(p))


class Sampling(BoundRule):
    """Sampling: a draft x from q passes with min(1, judged(x) / q(x)), and the walk ends on a draw
    from the residual. As it stands, the exact rule, whose output is distributed as p."""

    def decide(self, judged: np.ndarray, token: int, q_dist: np.ndarray | None,
               uniform: float) -> tuple[float, bool]:
        q_token = 1.0 if q_dist is None else float(q_dist[token])
        prob = min(1.0, float(judged[token]) / q_token) if q_token > 0 else 0.0
        return prob, uniform < prob

    def next_token(self, p: np.ndarray, residual: np.ndarray, uniform: float) -> int:
        return draw(residual, uniform)


class Rule:
    """An acceptance rule as a method chooses it, before the decoding mode is known."""

    name = "rule"

    def target_sampling(self, sampling: SamplingConfig) -> SamplingConfig:
        """The sampling setup that turns the target's logits into the p this rule judges against."""
        return sampling

    def bind(self, sampling: SamplingConfig) -> BoundRule:
        """The rule for `sampling`'s mode."""
        raise NotImplementedError


class ExactRule(Rule):
    """Lossless: accept x with min(1, p(x)/q(x)); on rejection draw from norm(max(0, p - q))."""

    name = "exact"

    def bind(self, sampling: SamplingConfig) -> BoundRule:
        return Greedy() if sampling.greedy else Sampling()


class TypicalSampling(Sampling):
    """Medusa's typical acceptance (lossy): accept x if p(x) > min(eps, alpha * exp(-H(p)))."""

    def __init__(self, eps: float, alpha: float):
        self.eps, self.alpha = eps, alpha

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, uniform: float) -> Verdict:
        p = normalised(p)
        safe = np.where(p > 0, p, 1.0)
        entropy = float(-(p * np.log(safe)).sum())
        accepted = p[token] > min(self.eps, self.alpha * np.exp(-entropy))
        residual = p.copy()
        if not accepted:
            residual[token] = 0.0
        return Verdict(token, float(accepted), bool(accepted), token_prob=float(p[token]), residual=residual)


class TypicalRule(Rule):
    """Medusa's typical acceptance when sampling; the exact rule under greedy decoding."""

    name = "typical"

    def __init__(self, eps: float = 0.09, alpha: float = 0.3):
        self.eps, self.alpha = eps, alpha

    def bind(self, sampling: SamplingConfig) -> BoundRule:
        return Greedy() if sampling.greedy else TypicalSampling(self.eps, self.alpha)
