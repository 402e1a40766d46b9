"""Acceptance rules: the rule base type, the exact rule and Medusa's typical acceptance.

p is the target's distribution at a node's parent, q the drafter's. Every rule answers one question
per drafted token: accept it, and if not, what residual distribution the next sibling (or the bonus
token) is drawn from. The exact rule keeps the output distribution equal to p. LANTERN's relaxed
rules live in `engine/rules/lantern.py`, GSD's grouped rule in `engine/rules/gsd.py`.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.trace import Verdict


def normalised(dist: np.ndarray) -> np.ndarray:
    total = dist.sum()
    return dist / total if total > 0 else dist


def argmax_is(dist: np.ndarray, token: int) -> bool:
    """True when `token` is the argmax of dist, the first index winning ties (numpy's and torch's)."""
    return int(np.argmax(dist)) == token


class Rule:
    """What every acceptance rule provides to the walk and to the drafters.

    `judges_paths`: under greedy decoding, judge every tree node on its parent's own distribution and
    keep the first longest accepted root-to-leaf path (LANTERN's official code); otherwise siblings are
    tried in turn, each on what the earlier ones' rejections left.
    """

    name = "rule"
    judges_paths = False

    def target_sampling(self, sampling: SamplingConfig) -> SamplingConfig:
        """The sampling setup that turns the target's logits into the p this rule judges against."""
        return sampling

    def rules_out(self, q: torch.Tensor, candidates: torch.Tensor, greedy: bool = False) -> torch.Tensor | None:
        """Which drafts a rejection would rule out for later siblings (their residual mass becomes
        zero), estimated with the draft distribution q (F, V) in place of p: for candidate tokens
        (F, C), a (F, C, C) mask whose [f, i, j] says rejecting candidate i rules out candidate j.
        None, the default, when a rejection rules out the rejected token alone: the drafter then
        need not look."""
        return None

    def draft_confidence(self, q: torch.Tensor, candidates: torch.Tensor, greedy: bool = False) -> torch.Tensor:
        """How likely each candidate (F, C) is to be accepted, estimated with the draft distribution
        q (F, V) in place of p: (F, C). For a rule that judges x on p(x) alone, that is q(x)."""
        return q.gather(1, candidates)

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, greedy: bool,
             uniform: float) -> Verdict:
        """Judge drafted `token` against p (V,). q_dist is the distribution it was sampled from, or
        None for a deterministic draft, whose proposal is a point mass on it (q(x) = 1)."""
        raise NotImplementedError


def exact_residual(p: np.ndarray, token: int, q_dist: np.ndarray | None) -> np.ndarray:
    """norm(max(0, p - q)) unnormalised; for a point mass on x, p with x removed."""
    if q_dist is None:
        residual = p.copy()
        residual[token] = 0.0
        return residual
    residual = np.maximum(p - q_dist, 0.0)
    return residual if residual.sum() > 0 else p.copy()  # p == q to rounding: any draw from p is right


class ExactRule(Rule):
    """Lossless: accept x with min(1, p(x)/q(x)); on rejection draw from norm(max(0, p - q))."""

    name = "exact"

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, greedy: bool,
             uniform: float) -> Verdict:
        p = normalised(p)
        if greedy:
            accepted = argmax_is(p, token)
            prob = 1.0 if accepted else 0.0
        else:
            q_token = 1.0 if q_dist is None else q_dist[token]
            prob = min(1.0, p[token] / q_token) if q_token > 0 else 0.0
            accepted = uniform < prob
        residual = p if accepted else exact_residual(p, token, q_dist)
        return Verdict(token, prob, accepted, token_prob=float(p[token]), residual=residual)


class TypicalRule(Rule):
    """Medusa's typical acceptance (lossy): accept x if p(x) > min(eps, alpha * exp(-H(p)))."""

    name = "typical"

    def __init__(self, eps: float = 0.09, alpha: float = 0.3):
        self.eps, self.alpha = eps, alpha

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, greedy: bool,
             uniform: float) -> Verdict:
        p = normalised(p)
        if greedy:
            return ExactRule().test(p, token, q_dist, greedy, uniform)
        safe = np.where(p > 0, p, 1.0)
        entropy = float(-(p * np.log(safe)).sum())
        accepted = p[token] > min(self.eps, self.alpha * np.exp(-entropy))
        residual = p.copy()
        if not accepted:
            residual[token] = 0.0
        return Verdict(token, float(accepted), bool(accepted), token_prob=float(p[token]), residual=residual)


def unfiltered(sampling: SamplingConfig) -> SamplingConfig:
    """The same setup with top-k and top-p switched off."""
    return dataclasses.replace(sampling, top_k=0, top_p=1.0)
