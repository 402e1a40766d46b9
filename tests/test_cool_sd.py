"""COOL-SD's annealed rule: exact at w = 1, its output distribution as derived, TV growing with w.

At w = 1 (and on truncated drafts) the checks are the exact rule's from tests/test_acceptance.py,
with their stated power; the relaxed w > 1 check compares 20,000 draws with the distribution derived
in the test, a z-test per token with its power stated.
"""
import numpy as np
import pytest
import torch

from engine.core.tree import DraftTree
from engine.rules.acceptance import ExactRule
from engine.rules.cool_sd import AnnealedRule, annealed_weights, one_step_output
from tests.distribution_checks import frequency_misfits, smallest_shift, z_limit
from tests.test_acceptance import (
    GREEDY,
    N_DRAWS,
    P_NEXT,
    P_RARE,
    Q_NEXT,
    Q_RARE,
    SAMPLING,
    P,
    assert_stated_power,
    check_exact_walks,
    empirical,
    first_token,
    sampled_chains,
)

Q = np.array([0.05, 0.05, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1])  # a drafter that likes code 2 more than p does


def sampled_first_token(rule, gen: torch.Generator) -> int:
    x = int(torch.multinomial(torch.from_numpy(Q), 1, generator=gen))
    tree = DraftTree.chain(torch.tensor([0, x]), torch.tensor([1.0, Q[x]], dtype=torch.float64),
                           torch.from_numpy(np.stack([Q, Q])))
    return first_token(tree, np.stack([P, P]), rule, torch.rand(3, generator=gen, dtype=torch.float64).numpy())


def test_weights_decay_with_depth_stay_at_least_one_and_average_the_knob():
    weights = annealed_weights(3.0, 8)
    assert np.all(np.diff(weights) < 0) and weights.min() >= 1.0
    assert weights.mean() == pytest.approx(3.0)
    assert np.allclose((weights[1:] - 1) / (weights[:-1] - 1), np.exp(-0.7))
    assert np.all(annealed_weights(1.0, 8) == 1.0)
    with pytest.raises(ValueError, match="at least 1"):
        annealed_weights(0.5, 8)


def test_w_one_makes_the_exact_rules_decisions():
    exact, cool = ExactRule(), AnnealedRule(1.0, 8)
    rng = np.random.default_rng(0)
    for mode in (SAMPLING, GREEDY):
        for depth in (1, 3, 8):
            for _ in range(100):
                p, q = rng.dirichlet(np.ones(len(P))), rng.dirichlet(np.ones(len(P)))
                token, u = int(rng.integers(len(P))), float(rng.random())
                a = exact.bind(mode).test(p, token, q, u)
                b = cool.bind(mode).at_depth(depth).test(p, token, q, u)
                assert (a.accepted, a.accept_prob) == (b.accepted, b.accept_prob)
                np.testing.assert_array_equal(a.residual, b.residual)


def test_w_one_samples_the_target():
    """At w = 1 COOL-SD is the exact rule, so a sampled chain's output is p itself (the expectation
    comes from the target, not from one_step_output). The exact rule's sampled-chain check of
    tests/test_acceptance.py: 25,000 walks, a z-test per token at two positions and one on the
    accepted drafts' count against their exact chances min(1, p / q), |z| <= 5.04 (family alpha
    1e-5); a token of p = 0.01 doubled, halved or dropped is caught with power > 0.999, acceptance
    0.02 too generous with 0.991 (the powers are computed and asserted)."""
    trees = sampled_chains(Q_RARE, Q_NEXT, seed=12)
    powers = check_exact_walks(trees, np.stack([P_RARE, P_NEXT, P_NEXT]), seed=13, rule=AnnealedRule(1.0, 8))
    assert_stated_power(powers, second_position=True)


@pytest.mark.parametrize("strength", [1.5, 3.0])
def test_output_follows_the_distribution_derived_here(strength):
    """The first token of a sampled chain under w > 1, derived in the test: a draft x ~ q is kept with
    min(1, w p(x) / q(x)), so x leaves as a kept draft with mass min(q(x), w p(x)); the rest of the
    mass is drawn from norm(max(0, p - q)). 20,000 draws, a z-test per token at |z| <= 4.85 (8 checks,
    family alpha 1e-5); the smallest rise of a token's probability caught with 99 % is computed and
    asserted: at most 0.025 on any token (the largest, p ~ 0.4; about 0.01 on the rarest)."""
    rule = AnnealedRule(strength, 8)
    weight = float(rule.weights[0])  # the first drafted token sits at depth 1
    kept = np.minimum(Q, weight * P)  # (V,)
    left = np.maximum(P - Q, 0.0)  # (V,)
    expected = kept + (1.0 - kept.sum()) * left / left.sum()
    counts = np.rint(empirical(lambda g: sampled_first_token(rule, g)) * N_DRAWS)
    z = z_limit(len(P))
    assert not frequency_misfits(counts, expected, z)
    shifts = [smallest_shift(N_DRAWS, p, z) for p in expected if 0 < p < 1]
    assert max(shifts) <= 0.025


def test_tv_distance_to_the_target_grows_with_w_and_is_zero_at_one():
    distances = [0.5 * np.abs(one_step_output(P, Q, w) - P).sum() for w in (1.0, 1.5, 2.0, 4.0, 8.0)]
    assert distances[0] == pytest.approx(0.0, abs=1e-12)
    assert all(b > a for a, b in zip(distances, distances[1:]))
    # A relaxation can move no more than the mass it adds to accepted drafts: sum min(q, w p) - min(q, p).
    for w, distance in zip((1.0, 1.5, 2.0, 4.0, 8.0), distances):
        assert distance <= (np.minimum(Q, w * P) - np.minimum(Q, P)).sum() + 1e-12


def test_a_token_the_target_rules_out_is_never_accepted():
    p = P.copy()
    p[2] = 0.0
    p /= p.sum()
    verdict = AnnealedRule(20.0, 8).bind(SAMPLING).test(p, 2, Q, 0.0)
    assert not verdict.accepted and verdict.accept_prob == 0.0


def test_greedy_accepts_a_draft_within_a_factor_w_of_the_argmax():
    rule = AnnealedRule(2.0, 8).bind(GREEDY)
    w1 = float(rule.at_depth(1).weight)
    near = 1  # p = 0.22 against the argmax's 0.30
    assert (w1 * P[near] >= P.max()) == rule.at_depth(1).test(P, near, None, 0.0).accepted
    assert rule.at_depth(1).test(P, near, None, 0.0).accepted  # w_1 is well above 0.30 / 0.22
    assert not rule.at_depth(8).test(P, len(P) - 1, None, 0.0).accepted  # 0.01 is far below, late in the draft


def test_truncated_drafting_draws_from_the_nucleus_and_hands_the_rule_that_distribution():
    from types import SimpleNamespace

    from engine.core.config import SamplingConfig
    from engine.drafters.static_tree import StaticTreeDrafter, chain

    q = torch.tensor([0.5, 0.3, 0.1, 0.06, 0.04], dtype=torch.float64)
    drafter = StaticTreeDrafter(None, chain(1), top_p=0.75)
    seen = set()
    for seed in range(200):
        state = SimpleNamespace(sampling=SamplingConfig(temperature=1.0), generator=torch.Generator().manual_seed(seed))
        ((token, q_token, q_dist),) = drafter._ranked_children(state, q)
        seen.add(token)
        # The nucleus of 0.75 is {0, 1}: 0.5 alone falls short of it; renormalised, 5/8 and 3/8.
        assert torch.allclose(q_dist, torch.tensor([0.625, 0.375, 0, 0, 0], dtype=torch.float64))
        assert q_token == pytest.approx(float(q_dist[token]))
    assert seen == {0, 1}


def top_p_nucleus(q: np.ndarray, top_p: float) -> np.ndarray:
    """q renormalised over its most probable tokens until the mass before a token reaches top_p,
    worked out here by sorting (ties: the lower code first), independently of engine.core.sampling."""
    order = sorted(range(len(q)), key=lambda t: (-q[t], t))
    kept, before = [], 0.0
    for token in order:
        if before >= top_p:
            break
        kept.append(token)
        before += q[token]
    inside = np.zeros_like(q)
    inside[kept] = q[kept]
    return inside / inside.sum()


@pytest.mark.parametrize("rule", [ExactRule(), AnnealedRule(1.0, 8)], ids=["exact", "cool_sd_w1"])
def test_the_exact_rule_stays_exact_on_truncated_drafts(rule):
    """Truncation (draft_top_p < 1) changes the proposal, not the rule: drafts come from q's top-0.75
    nucleus, which the rule divides by (StaticTreeDrafter hands it as q_dist; see
    test_truncated_drafting_draws_from_the_nucleus_and_hands_the_rule_that_distribution), and the
    output must still be p. Half the tokens, the rare ones among them, are outside the nucleus and
    reach the output only through the residual. The sampled-chain check of tests/test_acceptance.py:
    25,000 walks, |z| <= 5.04; a token of p = 0.01 doubled, halved or dropped is caught with power
    > 0.999 and acceptance 0.02 too generous with >= 0.99 (computed and asserted)."""
    root, after = top_p_nucleus(Q_RARE, 0.75), top_p_nucleus(Q_NEXT, 0.75)
    assert (root > 0).sum() == 5 and root[8] == root[9] == 0  # 0.4 + 3 x 0.1 < 0.75: one 0.1 more
    trees = sampled_chains(root, after, seed=14)
    powers = check_exact_walks(trees, np.stack([P_RARE, P_NEXT, P_NEXT]), seed=15, rule=rule)
    assert_stated_power(powers, second_position=False)


def test_greedy_cool_sd_at_w_one_draws_vanillas_picture_token_for_token(tiny_accepting):
    """With a trained drafter (tests/accepting.py), whose chains of 4 are mostly accepted at w = 1:
    7 of 15 at least (11 measured), so that the accepted drafts make the picture."""
    from engine.core.config import SamplingConfig
    from engine.generation import generate
    from engine.methods import MethodOptions
    from tests.accepting import assert_lossless

    greedy = SamplingConfig(temperature=0.0)
    vanilla = generate(tiny_accepting, "vanilla", greedy, 1, MethodOptions())
    exact = generate(tiny_accepting, "cool_sd", greedy, 1, MethodOptions(cool_w=1.0))
    relaxed = generate(tiny_accepting, "cool_sd", greedy, 1, MethodOptions(cool_w=6.0))
    assert_lossless(exact, vanilla, 7)
    assert relaxed.mean_accepted_length >= exact.mean_accepted_length


def test_known_answers_at_one_depths_weight():
    """Hand-worked: with a horizon of one depth the weight is the strength itself, w = 2 exactly."""
    rule = AnnealedRule(2.0, 1)
    assert rule.weights.tolist() == [2.0]
    p = np.array([0.5, 0.25, 0.25])
    sampled, greedy = rule.bind(SAMPLING), rule.bind(GREEDY)
    # A deterministic draft (q(x) = 1): min(1, 2 x 0.25 / 1) = 0.5, judged before any depth is picked.
    assert sampled.test(p, 1, None, 0.4999).accept_prob == 0.5 and not sampled.test(p, 1, None, 0.5).accepted
    # A draft its drafter gave no mass is never accepted.
    never = sampled.test(p, 1, np.array([1.0, 0.0, 0.0]), 0.0)
    assert never.accept_prob == 0.0 and not never.accepted
    # Greedy: w p(x) = 2 x 0.25 reaches the largest p, 0.5, exactly: accepted; 0.2 x 2 falls short.
    assert greedy.test(p, 1, None, 0.0).accepted
    assert not greedy.test(np.array([0.5, 0.2, 0.3]), 1, None, 0.0).accepted


def test_a_rule_at_one_depth_hands_on_the_weight_of_any_other():
    rule = AnnealedRule(2.0, 4)
    w = rule.weights
    p, q = np.array([0.125, 0.25, 0.5, 0.125]), np.array([0.5, 0.25, 0.125, 0.125])
    bound = rule.bind(SAMPLING)
    assert bound.test(p, 0, q, 0.99).accept_prob == pytest.approx(w[0] * 0.125 / 0.5)
    assert bound.at_depth(2).at_depth(3).test(p, 0, q, 0.99).accept_prob == pytest.approx(w[2] * 0.125 / 0.5)
    assert bound.at_depth(3).at_depth(9).test(p, 0, q, 0.99).accept_prob == pytest.approx(w[3] * 0.125 / 0.5)


def test_one_step_output_is_p_when_the_drafter_is_the_target():
    """Everything drafted is accepted (q = p, w >= 1): nothing is left for the residual, which is empty."""
    p = np.array([0.5, 0.5, 0.0])
    np.testing.assert_array_equal(one_step_output(p, p.copy(), 1.5), p)
