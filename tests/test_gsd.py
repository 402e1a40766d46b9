"""GSD's grouped acceptance on hand-worked cases: which tokens join a draft's group, with each
threshold met with equality, and the acceptance probability and verdict a group gives.

The case: p = (1, 1, 2, 2, 3, 3, 2, 2) / 16, so that the ascending order with ties kept in index order
(GSD's rank) is 0, 1, 2, 3, 6, 7, 4, 5, and one-dimensional embeddings 0 or 1 (1 at codes 3, 5, 6, 7),
whose mean squared distance between two codes is 2 * 4 * 4 / 64 = 0.5.
"""
import numpy as np
import pytest

from engine.core.config import SamplingConfig
from engine.rules.acceptance import exact_residual
from engine.rules.gsd import GroupedRule, mean_squared_distance

P = np.array([1, 1, 2, 2, 3, 3, 2, 2]) / 16
EMBEDDINGS = np.array([[0.0], [0.0], [0.0], [1.0], [0.0], [1.0], [1.0], [1.0]])  # (8, 1)
TOKEN = 6  # rank 4 of the order above
SAMPLING, GREEDY = SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.0)


def test_the_mean_squared_distance_is_the_mean_over_every_pair():
    embeddings = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    pairs = embeddings[:, None, :].astype(np.float64) - embeddings[None, :, :]  # (40, 40, 3)
    assert mean_squared_distance(embeddings) == pytest.approx((pairs ** 2).sum(-1).mean(), rel=1e-12)
    assert mean_squared_distance(EMBEDDINGS) == 0.5


def test_the_distance_threshold_is_a_fraction_of_the_mean_squared_distance():
    assert GroupedRule(EMBEDDINGS, 3, 1.0, 2.0).max_distance == 1.0  # 2 x 0.5


def test_candidates_are_the_ranks_around_the_draft_in_index_order_of_ties():
    # Window 1: the ranks 3 and 4, i.e. codes 3 and the draft itself; the code ranked just after it (7)
    # is not a candidate. Loose thresholds: every candidate joins.
    assert GroupedRule(EMBEDDINGS, 1, 1.0, 10.0).group(P, TOKEN).tolist() == [6, 3]
    # Window 3: ranks 1 to 6, i.e. codes 1, 2, 3, 7, 4 (order kept).
    assert GroupedRule(EMBEDDINGS, 3, 1.0, 10.0).group(P, TOKEN).tolist() == [6, 1, 2, 3, 7, 4]


def test_a_candidate_joins_only_when_p_is_strictly_closer_than_the_gap():
    # Codes 1 and 4 are exactly 1/16 from p(6) = 2/16: not closer than a gap of 1/16.
    assert GroupedRule(EMBEDDINGS, 3, 1 / 16, 10.0).group(P, TOKEN).tolist() == [6, 2, 3, 7]


def test_a_candidate_joins_only_when_its_embedding_is_strictly_closer_than_the_threshold():
    # Threshold 1.0: codes at squared distance 0 (3 and 7) join; those at exactly 1 (1, 2, 4) do not.
    assert GroupedRule(EMBEDDINGS, 3, 1.0, 2.0).group(P, TOKEN).tolist() == [6, 3, 7]


def test_a_group_is_accepted_with_its_p_mass_over_its_q_mass():
    rule = GroupedRule(EMBEDDINGS, 3, 1.0, 2.0).bind(SAMPLING)  # the group of 6: 6, 3, 7
    q = np.array([0.25, 0, 0, 0.25, 0, 0, 0.25, 0.25])  # q mass of the group 0.75, p mass 6/16
    rejected = rule.test(P, TOKEN, q, 0.5)  # accepted with probability exactly 0.5: a uniform of 0.5 fails
    assert rejected.accept_prob == 0.5 and not rejected.accepted
    assert rejected.token == TOKEN and rejected.token_prob == 2 / 16
    assert rejected.neighbours.tolist() == [3, 7] and rejected.neighbour_mass.tolist() == [2 / 16, 2 / 16]
    np.testing.assert_array_equal(rejected.residual, exact_residual(P, TOKEN, q))
    accepted = rule.test(P, TOKEN, q, 0.4999)
    assert accepted.accepted and accepted.residual is not None and accepted.residual.tolist() == P.tolist()
    # A group the drafter gave no mass is never accepted.
    never = rule.test(P, TOKEN, np.array([0.5, 0.5, 0, 0, 0, 0, 0, 0]), 0.0)
    assert never.accept_prob == 0.0 and not never.accepted


def test_greedy_decoding_ignores_the_group():
    rule = GroupedRule(EMBEDDINGS, 3, 1.0, 10.0).bind(GREEDY)
    verdict = rule.test(P, TOKEN, None, 0.0)  # 6 is not p's argmax (4 is), whatever its group holds
    assert not verdict.accepted and verdict.accept_prob == 0.0
    assert rule.test(P, 4, None, 0.0).accepted
