"""Statistical checks of the acceptance rules.

Each test draws the token at one position many times and compares the empirical distribution with
the one the rule promises. With n = 20,000 draws, the standard error of a probability of at most
0.3 is sqrt(0.3 * 0.7 / n) < 0.0033; the tolerance of 0.016 per token is about five of them.
"""
import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig, TreeConfig
from engine.core.tree import DraftTree
from engine.rules.acceptance import ExactRule
from engine.rules.lantern import DeltaBound, lantern_rule

N_DRAWS = 20_000
TOLERANCE = 0.016
P = np.array([0.30, 0.22, 0.18, 0.12, 0.08, 0.06, 0.03, 0.01])
V = len(P)
GREEDY, SAMPLING = SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0)  # the two modes a rule binds to


def first_token(tree: DraftTree, probs: np.ndarray, rule, uniforms: np.ndarray) -> int:
    result = rule.bind(SAMPLING).walk(tree, probs, uniforms)
    if result.accepted_nodes:
        return int(tree.tokens[result.accepted_nodes[0]])
    return result.next_token


def empirical(draw_once) -> np.ndarray:
    gen = torch.Generator().manual_seed(0)
    counts = np.zeros(V)
    for _ in range(N_DRAWS):
        counts[draw_once(gen)] += 1
    return counts / N_DRAWS


def sibling_tree(siblings: list[int], q: list[float]) -> DraftTree:
    n = len(siblings)
    return DraftTree(torch.tensor([0] + siblings), torch.tensor([-1] + [0] * n),
                     torch.tensor([1.0] + q, dtype=torch.float64))


@pytest.mark.parametrize("siblings", [[3], [5, 0, 2], [7, 6, 1, 4]])
def test_exact_rule_on_deterministic_siblings_samples_the_target(siblings):
    tree = sibling_tree(siblings, [0.5] * len(siblings))
    probs = np.stack([P] * tree.size)
    freq = empirical(lambda g: first_token(tree, probs, ExactRule(),
                                           torch.rand(tree.size + 1, generator=g, dtype=torch.float64).numpy()))
    assert np.abs(freq - P).max() < TOLERANCE


def test_exact_rule_on_a_sampled_chain_samples_the_target():
    q = np.array([0.05, 0.05, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1])
    probs = np.stack([P, P])

    def once(g):
        x = int(torch.multinomial(torch.from_numpy(q), 1, generator=g))
        tree = DraftTree.chain(torch.tensor([0, x]), torch.tensor([1.0, q[x]], dtype=torch.float64),
                               torch.from_numpy(np.stack([q, q])))
        return first_token(tree, probs, ExactRule(), torch.rand(3, generator=g, dtype=torch.float64).numpy())

    assert np.abs(empirical(once) - P).max() < TOLERANCE


def test_lantern_moves_at_most_delta_and_matches_its_relaxed_distribution():
    table = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])  # neighbours: next codes
    delta = 0.25
    rule = lantern_rule(table, DeltaBound(delta), "paper")
    tree = sibling_tree([2], [1.0])
    probs = np.stack([P, P])
    decision = rule.bind(SAMPLING).test(P, 2, None, 1.0)
    used, mass = decision.neighbours, decision.neighbour_mass
    relaxed = P.copy()
    relaxed[2] += mass.sum()
    relaxed[used] = 0.0
    assert mass.sum() <= delta + 1e-12
    # Moving mass s onto x changes p by s on x and by s in total on A: TV distance is exactly s.
    assert 0.5 * np.abs(relaxed - P).sum() == pytest.approx(mass.sum(), abs=1e-12)
    assert used.tolist() == [3, 4]  # 0.12 + 0.08 fits in 0.25; adding p(5) = 0.06 would not
    freq = empirical(lambda g: first_token(tree, probs, rule,
                                           torch.rand(3, generator=g, dtype=torch.float64).numpy()))
    assert np.abs(freq - relaxed).max() < TOLERANCE
    assert 0.5 * np.abs(freq - P).sum() <= delta + TOLERANCE


def test_lantern_with_zero_delta_makes_the_exact_rules_decisions():
    table = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])
    exact, relaxed = ExactRule(), lantern_rule(table, DeltaBound(0.0), "paper")
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.dirichlet(np.ones(V))
        token, u = int(rng.integers(V)), float(rng.random())
        a = exact.bind(SAMPLING).test(p, token, None, u)
        b = relaxed.bind(SAMPLING).test(p, token, None, u)
        assert (a.accepted, a.accept_prob) == (b.accepted, b.accept_prob)
        np.testing.assert_array_equal(a.residual, b.residual)


def test_greedy_lantern_accepts_a_token_whose_neighbourhood_outweighs_the_argmax():
    table = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])
    # x = 1 (0.22) plus neighbour 2 (0.18) = 0.40 > p(0) = 0.30 within delta = 0.2.
    for variant in ("paper", "official"):
        assert lantern_rule(table, DeltaBound(0.2), variant).bind(GREEDY).test(P, 1, None, 0.0).accepted
        assert not lantern_rule(table, DeltaBound(0.1), variant).bind(GREEDY).test(P, 1, None, 0.0).accepted
    assert not ExactRule().bind(GREEDY).test(P, 1, None, 0.0).accepted


def test_verdicts_report_the_target_probabilities_the_rule_saw():
    table = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])
    tree = sibling_tree([2, 6], [1.0, 1.0])
    uniforms = np.full(4, 0.999)  # reject both drafts
    rule = lantern_rule(table[:, :4], DeltaBound(0.25), "paper").bind(SAMPLING)
    verdicts = rule.walk(tree, np.stack([P, P, P]), uniforms).verdicts
    first, second = verdicts
    assert first.token_prob == pytest.approx(P[2])
    np.testing.assert_allclose(first.latent_probs, P[[3, 4, 5, 6]])  # all k = 4 neighbours, nearest first
    np.testing.assert_allclose(first.neighbour_mass, first.latent_probs[:2])  # A takes a prefix of them
    # The second sibling is judged on the residual, with the first one's whole set A removed.
    residual = P.copy()
    residual[[2, 3, 4]] = 0.0
    residual /= residual.sum()
    assert second.token_prob == pytest.approx(residual[6])
    np.testing.assert_allclose(second.latent_probs, residual[[7, 0, 1, 2]])
    exact = ExactRule().bind(SAMPLING).walk(tree, np.stack([P, P, P]), uniforms).verdicts[0]
    assert exact.token_prob == pytest.approx(P[2]) and len(exact.latent_probs) == 0


def test_a_rejection_rules_out_the_set_a_it_zeroes():
    table = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])
    q = torch.from_numpy(P[None]).float()
    candidates = torch.tensor([[2, 3, 5, 6]])
    rules_out = lantern_rule(table, DeltaBound(0.25), "paper").bind(SAMPLING).rules_out(q, candidates)[0]
    # A of 2 within 0.25 is {3, 4} (see above): rejecting 2 rules out 3 but not 5 or 6.
    assert rules_out[0].tolist() == [True, True, False, False]
    # A of 5 is {6, 7} (0.03 + 0.01; code 0's 0.30 would exceed 0.25): rejecting 5 rules out 6.
    assert rules_out[2].tolist() == [False, False, True, True]
    assert ExactRule().bind(SAMPLING).rules_out(q, candidates) is None  # a rejection rules out the token alone
    # With delta = 0 there is no set A, even for neighbours the draft gives no mass (top-k filtering).
    zero_mass = torch.zeros(1, V).index_fill_(1, torch.tensor([2, 5]), 0.5)
    assert lantern_rule(table, DeltaBound(0.0), "paper").bind(SAMPLING).rules_out(zero_mass, candidates) is None


def test_lantern_drafts_siblings_that_earlier_rejections_leave_possible():
    from engine.drafters.eagle import EagleDrafter

    table = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])
    q = torch.from_numpy(P[None]).float()
    by_draft = TreeConfig(score="draft")  # children in draft order, as EAGLE-2 ranks them
    plain_q, plain, _ = EagleDrafter(None, by_draft)._children(q, 3)  # the exact rule
    assert plain.tolist() == [[0, 1, 2]] and plain_q.tolist()[0] == pytest.approx(P[:3].tolist())
    drafter = EagleDrafter(None, by_draft)
    drafter.rule = lantern_rule(table, DeltaBound(0.25), "paper").bind(SAMPLING)  # as a decode's reset sets it
    _, distinct, _ = drafter._children(q, 3)
    # A of 0 within 0.25 is {1}, of 2 is {3, 4}: the children skip 1, 3 and 4.
    assert distinct.tolist() == [[0, 2, 5]]
