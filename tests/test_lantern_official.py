"""LANTERN's official variant: hand-computed cases for each branch, and agreement with an independent
re-implementation of the official `evaluate_posterior` (tests/official_lantern_reference.py) on
random trees and distributions."""
import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import draw
from engine.core.tree import DraftTree
from engine.rules.acceptance import ExactRule, Rule
from engine.rules.lantern import DeltaBound, RatioBound, lantern_rule
from tests import official_lantern_reference as reference

P = np.array([0.30, 0.22, 0.18, 0.12, 0.08, 0.06, 0.03, 0.01])
V = len(P)
NEXT_CODES = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])  # neighbours: next codes


GREEDY, SAMPLING = SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0)  # the two modes a rule binds to


def rule(delta: float, k: int = 2, variant: str = "official", lam: float | None = None) -> Rule:
    return lantern_rule(NEXT_CODES, DeltaBound(delta) if lam is None else RatioBound(lam), variant, k)


def test_a_rejection_zeroes_x_and_its_k_plus_1_nearest_codes_when_a_is_not_empty():
    # x = 2: A within 0.25 is {3, 4} (0.12 + 0.08); with k = 2 the k + 1 = 3 nearest are 3, 4, 5.
    decision = rule(0.25).bind(SAMPLING).test(P, 2, None, 0.999)
    assert not decision.accepted
    assert decision.accept_prob == pytest.approx(0.18 + 0.12 + 0.08)
    expected = P.copy()
    expected[[2, 3, 4, 5]] = 0.0
    np.testing.assert_allclose(decision.residual, expected / expected.sum())


def test_a_rejection_with_an_empty_set_a_zeroes_x_alone():
    decision = rule(0.05).bind(SAMPLING).test(P, 2, None, 0.999)  # p(3) = 0.12 > 0.05
    assert decision.accept_prob == pytest.approx(0.18) and len(decision.neighbours) == 0
    expected = P.copy()
    expected[2] = 0.0
    np.testing.assert_allclose(decision.residual, expected / expected.sum())


def test_nothing_left_after_a_rejection_gives_the_uniform_distribution():
    p = np.zeros(V)
    p[[2, 3]] = [0.5, 0.5]
    decision = rule(0.6, k=1).bind(SAMPLING).test(p, 2, None, 1.5)
    np.testing.assert_allclose(decision.residual, np.full(V, 1.0 / V))


def test_acceptance_at_equality_follows_each_variant():
    credited = 0.18 + 0.12 + 0.08
    assert rule(0.25).bind(SAMPLING).test(P, 2, None, credited).accepted  # u <= p~(x)
    assert not rule(0.25, variant="paper").bind(SAMPLING).test(P, 2, None, credited).accepted


def test_lambda_bounds_the_credited_mass_by_a_multiple_of_p_x():
    # lambda = 2: at most 1 * p(2) = 0.18 of neighbour mass: 3 (0.12) fits, 3 + 4 (0.20) does not.
    decision = rule(0.0, k=4, lam=2.0).bind(SAMPLING).test(P, 2, None, 0.0)
    assert decision.neighbours.tolist() == [3]
    assert decision.accept_prob == pytest.approx(0.30)


def test_delta_zero_decides_as_the_exact_rule_where_every_neighbour_has_mass():
    exact, official = ExactRule(), rule(0.0, k=3)
    rng = np.random.default_rng(1)
    for _ in range(200):
        p = rng.dirichlet(np.ones(V))
        token, u = int(rng.integers(V)), float(rng.random())
        a = exact.bind(SAMPLING).test(p, token, None, u)
        b = official.bind(SAMPLING).test(p, token, None, u)
        assert (a.accepted, a.accept_prob) == (b.accepted, pytest.approx(b.accept_prob))
        np.testing.assert_allclose(a.residual / a.residual.sum(), b.residual)


def test_delta_zero_still_zeroes_k_plus_1_codes_behind_a_massless_nearest_neighbour():
    p = P.copy()
    p[3] = 0.0  # the nearest code of 2 has no mass: A = {3} fits in delta = 0
    p /= p.sum()
    decision = rule(0.0, k=2).bind(SAMPLING).test(p, 2, None, 0.999)
    assert decision.accept_prob == pytest.approx(p[2])
    expected = p.copy()
    expected[[2, 3, 4, 5]] = 0.0
    np.testing.assert_allclose(decision.residual, expected / expected.sum())


def _two_branch_tree() -> tuple[DraftTree, np.ndarray]:
    # Root children 1 and 2 both pass greedy LANTERN at delta 0.2 (0.22 + 0.18 and 0.18 + 0.12 + 0.08
    # beat p(0) = 0.30); node 3 (token 7 under 1) fails, node 4 (token 0 under 2) passes.
    tree = DraftTree(torch.tensor([5, 1, 2, 7, 0]), torch.tensor([-1, 0, 0, 1, 2]),
                     torch.ones(5, dtype=torch.float64))
    return tree, np.stack([P] * 5)


def test_greedy_keeps_the_longest_path_of_passing_nodes():
    tree, probs = _two_branch_tree()
    result = rule(0.2).bind(GREEDY).walk(tree, probs, np.zeros(6))
    assert result.accepted_nodes == [2, 4]
    assert result.next_token == 0  # the argmax of the original p where the path ends
    assert [v.accepted for v in result.verdicts] == [True, True, False, True]
    # The paper variant tries siblings in turn and stops below the first one accepted.
    assert rule(0.2, variant="paper").bind(GREEDY).walk(tree, probs, np.zeros(6)).accepted_nodes == [1]


def test_greedy_ties_go_to_the_first_path_in_leaf_order():
    tree, probs = _two_branch_tree()
    tree.tokens[4] = 7  # node 4 now fails too: two paths of one passing node
    assert rule(0.2).bind(GREEDY).walk(tree, probs, np.zeros(6)).accepted_nodes == [1]


def test_greedy_uses_the_unfiltered_distribution_and_sampling_filters_top_p_first():
    sampling = SamplingConfig(temperature=0.0, top_k=10, top_p=0.9)
    judged = rule(0.2).target_sampling(sampling)
    assert (judged.top_k, judged.top_p) == (0, 1.0)
    sampled = rule(0.2).target_sampling(SamplingConfig(temperature=1.0, top_k=10, top_p=0.9))
    assert sampled.top_p_first and (sampled.top_k, sampled.top_p) == (10, 0.9)
    assert rule(0.2, variant="paper").target_sampling(sampling) == sampling


def test_a_rejection_rules_out_the_k_plus_1_codes_it_zeroes_except_under_greedy():
    q = torch.from_numpy(P[None]).float()
    candidates = torch.tensor([[2, 3, 5, 6]])
    rules_out = rule(0.25).bind(SAMPLING).rules_out(q, candidates)[0]
    assert rules_out[0].tolist() == [True, True, True, False]  # 3, 4, 5 zeroed with 2
    assert rule(0.25).bind(GREEDY).rules_out(q, candidates) is None  # each node judged on its own


# --- agreement with the independent re-implementation ---------------------------------------------

VOCAB, K = 12, 3


def _random_case(rng: np.random.Generator):
    n = int(rng.integers(2, 10))
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    probs = rng.dirichlet(np.full(VOCAB, 0.4), size=n)  # (N, V)
    tokens = [int(rng.integers(VOCAB))] + [0] * (n - 1)
    for node in range(n):
        kids = [c for c in range(n) if parents[c] == node]
        if kids:  # distinct children, drawn like a drafter's best guesses
            picks = rng.choice(VOCAB, size=len(kids), replace=False, p=probs[node])
            for child, token in zip(kids, picks):
                tokens[child] = int(token)
    return parents, tokens, probs


def _official_rule(rng: np.random.Generator, delta: float) -> tuple[torch.Tensor, Rule]:
    """A random neighbour order and the official rule over it; a delta above 1 is lambda, as in
    the official code."""
    nearest = reference.random_nearest(VOCAB, rng)
    bound = DeltaBound(delta) if delta <= 1.0 else RatioBound(delta)
    return nearest, lantern_rule(nearest.numpy(), bound, "official", K)


def _tree(tokens: list[int], parents: list[int], q_dists: np.ndarray | None = None) -> DraftTree:
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.ones(len(tokens), dtype=torch.float64),
                     None if q_dists is None else torch.from_numpy(q_dists))


def _inverse_cdf(weights: np.ndarray, uniform: float) -> int:
    """The first token whose running total of `weights` passes uniform times their sum, token by token."""
    goal, total = uniform * float(weights.sum()), 0.0
    for token, weight in enumerate(weights):
        total += float(weight)
        if weight > 0 and total > goal:
            return token
    return int(np.flatnonzero(weights > 0)[-1])


def test_the_reference_draw_inverts_the_cdf_of_a_known_distribution():
    weights = np.array([0.2, 0.0, 0.5, 0.3])  # cumulative 0.2, 0.2, 0.7, 1.0
    assert [_inverse_cdf(weights, u) for u in (0.0, 0.19, 0.21, 0.69, 0.71, 0.999)] == [0, 0, 2, 2, 3, 3]
    assert _inverse_cdf(weights * 4, 0.5) == 2  # unnormalised: the same draw
    assert [draw(weights, u) for u in (0.0, 0.19, 0.21, 0.69, 0.71, 0.999)] == [0, 0, 2, 2, 3, 3]


def _per_path_logits(probs: np.ndarray, retrieve: torch.Tensor) -> torch.Tensor:
    logits = torch.from_numpy(np.log(probs))  # (N, V)
    return logits[retrieve.clamp(min=0)]  # (P, L, V): padded positions are never read


@pytest.mark.parametrize("delta", [0.05, 0.2, 0.5, 2.0])
def test_greedy_agrees_with_the_official_code(delta):
    rng = np.random.default_rng(7)
    nearest, official = _official_rule(rng, delta)
    for _ in range(300):
        parents, tokens, probs = _random_case(rng)
        tree = _tree(tokens, parents)
        result = official.bind(GREEDY).walk(tree, probs, np.zeros(len(tokens) + 1))
        retrieve, candidates = reference.paths_table(parents, tokens, lexicographic=False)
        best, accept, token = reference.greedy(_per_path_logits(probs, retrieve), candidates, nearest, K, delta)
        assert result.accepted_nodes == retrieve[best, 1: accept + 1].tolist()
        assert result.next_token == token


@pytest.mark.parametrize("delta", [0.0, 0.1, 0.3, 3.0])
def test_sampling_agrees_with_the_official_code(delta):
    rng = np.random.default_rng(11)
    nearest, official = _official_rule(rng, delta)
    for _ in range(300):
        parents, tokens, probs = _random_case(rng)
        tree = _tree(tokens, parents)
        uniforms = rng.random(len(tokens) + 1)
        result = official.bind(SAMPLING).walk(tree, probs, uniforms)
        retrieve, candidates = reference.paths_table(parents, tokens, lexicographic=True)
        best, accept, final, seen = reference.sampling(_per_path_logits(probs, retrieve), candidates,
                                                       nearest, K, delta, list(uniforms))
        assert result.accepted_nodes == retrieve[best, 1: accept + 1].tolist()
        assert [v.accept_prob for v in result.verdicts] == pytest.approx(seen)
        assert result.next_token == _inverse_cdf(final.numpy(), uniforms[len(seen)])


def test_the_residual_after_every_rejection_agrees_with_the_official_code():
    rng = np.random.default_rng(3)
    nearest = reference.random_nearest(VOCAB, rng)
    official = lantern_rule(nearest.numpy(), DeltaBound(0.3), "official", K)
    for _ in range(200):
        p = rng.dirichlet(np.full(VOCAB, 0.4))
        siblings = [int(t) for t in rng.choice(VOCAB, size=4, replace=False)]
        tokens, parents = [0] + siblings, [-1, 0, 0, 0, 0]
        residual = p
        for token in siblings:  # reject every sibling
            residual = official.bind(SAMPLING).test(residual, token, None, 2.0).residual
        retrieve, candidates = reference.paths_table(parents, tokens, lexicographic=True)
        _, accept, final, _ = reference.sampling(_per_path_logits(np.stack([p] * 5), retrieve), candidates,
                                                 nearest, K, 0.3, [2.0] * 5)
        assert accept == 0
        np.testing.assert_allclose(residual, final.numpy(), atol=1e-12)


@pytest.mark.parametrize("delta", [0.1, 0.4, 3.0])
def test_sampled_static_tree_drafts_agree_with_the_official_code(delta):
    """LANTERN++ under sampling: children drawn without replacement, judged against q."""
    rng = np.random.default_rng(5)
    nearest, official = _official_rule(rng, delta)
    for _ in range(300):
        parents, tokens, probs = _random_case(rng)
        drafts = rng.dirichlet(np.full(VOCAB, 0.5), size=len(tokens))  # (N, V) at every parent
        q_dists = np.full((len(tokens), VOCAB), 1.0 / VOCAB)
        for node in range(len(tokens)):
            left = drafts[node].copy()
            kids = [c for c in range(len(tokens)) if parents[c] == node]
            picks = rng.choice(VOCAB, size=len(kids), replace=False, p=drafts[node])
            for child, token in zip(kids, picks):
                tokens[child] = int(token)
                q_dists[child] = left / left.sum()
                left[token] = 0.0
        tree = _tree(tokens, parents, q_dists)
        uniforms = rng.random(len(tokens) + 1)
        result = official.bind(SAMPLING).walk(tree, probs, uniforms)
        retrieve, candidates = reference.paths_table(parents, tokens, lexicographic=True)
        per_path_drafts = torch.from_numpy(drafts)[retrieve.clamp(min=0)]  # (P, L, V)
        best, accept, final, seen = reference.sampling(_per_path_logits(probs, retrieve), candidates,
                                                       nearest, K, delta, list(uniforms), per_path_drafts)
        assert result.accepted_nodes == retrieve[best, 1: accept + 1].tolist()
        assert [v.accept_prob for v in result.verdicts] == pytest.approx(seen)
        assert result.next_token == _inverse_cdf(final.numpy(), uniforms[len(seen)])
