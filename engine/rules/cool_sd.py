"""COOL-SD's annealed relaxation (Li, Zhang, Du, Ji, AAAI 2026): relax the ratio, not the token.

A draft x at depth i of the draft (1: the first drafted token) is accepted with min(1, w_i p(x) / q(x)),
w_i >= 1. After a rejection the next try (or the next token) draws from norm(max(0, p - q f)), f(y) =
min(1, w_i p(y) / q(y)) the acceptance just used; with every w_i >= 1 that is norm(max(0, p - q)), the
exact rule's residual, so only the test changes. w = 1 everywhere is the exact rule. Unlike LANTERN's
neighbour credit, a token the target gives p(x) = 0 is never accepted, and one it gives little earns
little: the relaxation scales what the target already believes.

Annealing: early depths are relaxed more than late ones, w_i decaying as exp(-nu i) (the paper's
nu = 0.7). The paper leaves the schedule's constant unstated; here the excess over 1 is normalised so
that the schedule's mean over the draft's `horizon` depths is the knob `strength`:
    w_i = 1 + (strength - 1) * horizon * exp(-nu i) / sum_{j=1..horizon} exp(-nu j),
which keeps every w_i >= 1 and makes strength 1 the exact rule.

Greedy decoding (on which the paper is silent): x passes when w_i p(x) reaches the largest p, i.e. x is
within a factor w_i of the argmax; the walk ends on the target's argmax. strength 1 is exact greedy.
"""
from __future__ import annotations

from typing import Self

import numpy as np

from engine.core.config import SamplingConfig
from engine.rules.acceptance import BoundRule, Greedy, Rule, Sampling, argmax_is

NU = 0.7  # the paper's decay of the relaxation over the draft's depth


def annealed_weights(strength: float, horizon: int, nu: float = NU) -> np.ndarray:
    """w_1 .. w_horizon (horizon,): every w >= 1, their mean `strength`, decaying by exp(-nu) a depth."""
    if strength < 1:
        raise ValueError(f"COOL-SD strength {strength} must be at least 1")
    decay = np.exp(-nu * np.arange(1, horizon + 1))  # (horizon,)
    return 1.0 + (strength - 1.0) * horizon * decay / decay.sum()


class _AtDepth:
    """A bound rule judging with one depth's weight w, which hands on the weight of any other depth."""

    def __init__(self, weights: np.ndarray, weight: float):
        self.weights, self.weight = weights, weight

    def at_depth(self, depth: int) -> Self:
        return type(self)(self.weights, float(self.weights[min(depth, len(self.weights)) - 1]))


class _CoolSampling(_AtDepth, Sampling):
    """min(1, w p(x) / q(x)) at one depth's weight w."""

    def decide(self, judged: np.ndarray, token: int, q_dist: np.ndarray | None,
               uniform: float) -> tuple[float, bool]:
        q_token = 1.0 if q_dist is None else float(q_dist[token])
        prob = min(1.0, self.weight * float(judged[token]) / q_token) if q_token > 0 else 0.0
        return prob, uniform < prob


class _CoolGreedy(_AtDepth, Greedy):
    """x passes when w p(x) reaches the largest p (exact greedy at w = 1)."""

    def decide(self, judged: np.ndarray, token: int, q_dist: np.ndarray | None,
               uniform: float) -> tuple[float, bool]:
        accepted = argmax_is(judged, token) or self.weight * float(judged[token]) >= float(judged.max())
        return float(accepted), bool(accepted)


class AnnealedRule(Rule):
    """COOL-SD's rule with mean relaxation `strength` over a draft of `horizon` depths."""

    name = "cool_sd"

    def __init__(self, strength: float, horizon: int):
        self.weights = annealed_weights(strength, horizon)

    def bind(self, sampling: SamplingConfig) -> BoundRule:
        # Before the walk picks a depth, the rule stands at the first one (the drafters' estimates).
        first = float(self.weights[0])
        return _CoolGreedy(self.weights, first) if sampling.greedy else _CoolSampling(self.weights, first)


def one_step_output(p: np.ndarray, q: np.ndarray, weight: float) -> np.ndarray:
    """The distribution (V,) of one COOL-SD step's token: a draft from q accepted with
    min(1, w p / q), else a draw from norm(max(0, p - q)). It is p at w = 1; its total-variation
    distance to p grows with w (the tests measure both)."""
    accepted = np.minimum(q, weight * p)  # (V,) the mass that leaves as an accepted draft
    residual = np.maximum(p - q, 0.0)  # (V,)
    rest = 1.0 - accepted.sum()
    return accepted + (rest * residual / residual.sum() if residual.sum() > 0 else rest * p)
