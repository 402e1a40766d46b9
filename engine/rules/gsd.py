"""GSD's grouped acceptance (Grouped Speculative Decoding, So et al., ICCV 2025), for Jacobi drafts.

A drafted token x is judged together with a group G of tokens the target finds about as likely and
that look alike: with the target's p sorted ascending and x at rank r, the candidates are the ranks
r - w .. r + w - 1; a candidate y joins when |p(y) - p(x)| < p_gap and its input embedding lies within
`distance` of x's (squared l2); x is always in G. x is accepted with probability
min(1, sum_G p / sum_G q); on rejection the next token is drawn from SJD's residual norm(max(0, p - q)).
The rule is lossy: the acceptance credits the group but the residual is the plain one.

The published defaults (junhyukso/GSD, Lumina-mGPT's 8,192 image codes): w = 7, p_gap = 0.15,
distance 0.5 on the language model's input embeddings. Here w scales with the vocabulary
(7 * V / 8192, at least 1) and the distance is a fraction of the mean squared distance between two
embeddings (0.25: for embeddings of norm about 1, 0.5 is a quarter of the mean distance of 2).
"""
from __future__ import annotations

import numpy as np

from engine.core.config import SamplingConfig
from engine.core.trace import Verdict
from engine.rules.acceptance import BoundRule, Greedy, Rule, Sampling, exact_residual, normalised

PUBLISHED_VOCAB, PUBLISHED_WINDOW = 8192, 7


def scaled_window(vocab: int) -> int:
    return max(1, round(PUBLISHED_WINDOW * vocab / PUBLISHED_VOCAB))


def mean_squared_distance(embeddings: np.ndarray) -> float:
    """Mean of ||e_a - e_b||^2 over all pairs (a, b) of rows of embeddings (V, D), without the (V, V)
    matrix: 2 (mean ||e||^2 - ||mean e||^2)."""
    e = embeddings.astype(np.float64)
    return float(2.0 * ((e ** 2).sum(-1).mean() - (e.mean(0) ** 2).sum()))


class GroupedRule(Rule):
    name = "gsd"

    def __init__(self, embeddings: np.ndarray, window: int, p_gap: float, distance: float):
        """embeddings (V, D): the target's input embeddings; distance: the squared-distance threshold
        as a fraction of their mean squared distance."""
        self.embeddings = embeddings.astype(np.float64)  # (V, D)
        self.window, self.p_gap = window, p_gap
        self.max_distance = distance * mean_squared_distance(embeddings)

    def group(self, p: np.ndarray, token: int) -> np.ndarray:
        """The tokens judged together with `token` (itself first)."""
        order = np.argsort(p, kind="stable")  # (V,) ascending
        rank = int(np.nonzero(order == token)[0][0])
        candidates = order[max(0, rank - self.window): rank + self.window]  # (<= 2w,)
        candidates = candidates[candidates != token]
        close_p = np.abs(p[candidates] - p[token]) < self.p_gap
        gaps = self.embeddings[candidates] - self.embeddings[token]  # (C, D)
        close_e = (gaps ** 2).sum(-1) < self.max_distance
        return np.concatenate([[token], candidates[close_p & close_e]]).astype(np.int64)

    def bind(self, sampling: SamplingConfig) -> BoundRule:
        # Under greedy decoding a group changes nothing about the argmax: the exact rule.
        return Greedy() if sampling.greedy else GroupedSampling(self)


class GroupedSampling(Sampling):
    def __init__(self, rule: GroupedRule):
        self.rule = rule

    def test(self, p: np.ndarray, token: int, q_dist: np.ndarray | None, uniform: float) -> Verdict:
        p = normalised(p)
        members = self.rule.group(p, token)
        q_mass = 1.0 if q_dist is None else float(q_dist[members].sum())
        p_mass = float(p[members].sum())
        prob = min(1.0, p_mass / q_mass) if q_mass > 0 else 0.0
        accepted = uniform < prob
        residual = p if accepted else exact_residual(p, token, q_dist)
        others = members[1:]
        return Verdict(token, prob, accepted, neighbours=others, neighbour_mass=p[others],
                       token_prob=float(p[token]), residual=residual)
