"""Statistical checks of the acceptance rules.

The exact rule's tests (`test_exact_rule_samples_the_target_*`) walk a draft tree 25,000 times and
z-test every token's count, and the number of accepted drafts, with a power stated and asserted in
each (tests/distribution_checks.py computes it). The older LANTERN check below still compares
20,000 draws with an absolute tolerance of 0.016 per token (about five standard errors of p <= 0.3).
"""
import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig, TreeConfig
from engine.core.tree import DraftTree
from engine.rules.acceptance import ExactRule
from engine.rules.lantern import DeltaBound, lantern_rule
from tests.distribution_checks import (
    POWER,
    binomial_power,
    frequency_misfits,
    inverse_cdf,
    pooled_misfit,
    pooled_power,
    smallest_shift,
    walk_outputs,
    without_replacement,
    z_limit,
)

N_DRAWS = 20_000
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


# --- The exact rule's output distribution, with a stated power -----------------------------------
#
# The walks below use a target with rare tokens (p = 0.01, 0.006, 0.004) that a draft gives less mass
# than the target does (q = 0.001), so that they reach the output only through a residual: a rule
# that loses or inflates them after a rejection shows in their counts.
P_RARE = np.array([0.30, 0.22, 0.18, 0.12, 0.08, 0.06, 0.02, 0.01, 0.006, 0.004])
Q_RARE = np.array([0.05, 0.10, 0.40, 0.10, 0.10, 0.10, 0.10, 0.048, 0.001, 0.001])
# After the first draft the target and drafter see another order of the same values (so the second
# position is not a copy of the first), the rare tokens still under-drafted.
NEXT_ORDER = [3, 8, 0, 7, 1, 6, 2, 9, 5, 4]
P_NEXT, Q_NEXT = P_RARE[NEXT_ORDER], Q_RARE[NEXT_ORDER]
N_WALKS = 25_000
# Checks per test: a z-test per token at each of two positions, and one on the acceptance count.
CHECKS = 2 * len(P_RARE) + 1
Z = z_limit(CHECKS)


def exact_chances(tree: DraftTree, probs: np.ndarray, tries: list[tuple[int, bool]]) -> list[float]:
    """The acceptance chance of each try as the textbook exact rule gives it, worked out here from
    p and q alone: min(1, r(x) / q(x)) with r the parent's p less what earlier rejected siblings took,
    r <- norm(max(0, r - q)), q a point mass on x for a deterministic draft."""
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    q_dists = None if tree.q_dists is None else tree.q_dists.numpy()
    residual: dict[int, np.ndarray] = {}
    chances = []
    for node, accepted in tries:
        parent, x = parents[node], tokens[node]
        r = residual.get(parent, probs[parent] / probs[parent].sum())
        q = np.eye(len(r))[x] if q_dists is None else q_dists[node]
        chances.append(min(1.0, r[x] / q[x]))
        if not accepted:
            left = np.maximum(r - q, 0.0)
            residual[parent] = left / left.sum()
    return chances


def check_exact_walks(trees: list[DraftTree], probs: np.ndarray, seed: int, rule=None) -> dict[str, float]:
    """Walk each tree once with `rule` (default the exact rule; others that must equal it pass
    theirs) and test (1) the first output token against p at the
    root, (2) the second, where the first was the root's accepted child, against p at that child, and
    (3) the number of accepted tries against the sum of their exact chances. Returns the powers."""
    bound = (rule or ExactRule()).bind(SAMPLING)
    uniforms = np.random.default_rng(seed).random((len(trees), max(t.size for t in trees) + 1))
    first, second, tries = walk_outputs(bound, trees, probs, uniforms)
    cached: dict = {}
    chances, accepted = [], 0
    for tree, walk in zip(trees, tries):
        key = (id(tree), tuple(walk))
        if key not in cached:
            cached[key] = exact_chances(tree, probs, walk)
        chances += cached[key]
        accepted += sum(a for _, a in walk)
    # Position 2 is reached when the root's child (node 1 in every tree here) was accepted first.
    after_child = np.array([bool(walk) and walk[0] == (1, True) for walk in tries]) & (second >= 0)
    misfits = frequency_misfits(np.bincount(first, minlength=len(probs[0])), probs[0], Z)
    misfits += frequency_misfits(np.bincount(second[after_child], minlength=len(probs[1])), probs[1], Z)
    misfits += pooled_misfit(accepted, np.array(chances), Z, "accepted tries")
    assert not misfits, misfits
    return {"rare doubled": binomial_power(len(trees), 0.01, 0.02, Z),
            "rare halved": binomial_power(len(trees), 0.01, 0.005, Z),
            "rare dropped": binomial_power(len(trees), 0.01, 0.0, Z),
            "acceptance + 0.02": pooled_power(np.array(chances), 0.02, Z),
            "second position, rare doubled": binomial_power(after_child.sum(), 0.01, 0.02, Z)}


def tree_cache(make):
    """make(draft tuple) -> DraftTree, memoised: walks share the few distinct trees, and a tree costs
    more to build than to walk."""
    trees: dict = {}

    def tree_of(key):
        if key not in trees:
            trees[key] = make(key)
        return trees[key]
    return tree_of


def sampled_chains(q_root: np.ndarray, q_next: np.ndarray, seed: int, n: int = N_WALKS) -> list[DraftTree]:
    """n chains root -> x1 -> x2 with x1 ~ q_root and x2 ~ q_next, each node carrying the
    distribution it was drawn from."""
    rng = np.random.default_rng(seed)
    x1, x2 = inverse_cdf(q_root, rng.random(n)), inverse_cdf(q_next, rng.random(n))
    q_dists = torch.from_numpy(np.stack([q_root, q_root, q_next]))
    tree_of = tree_cache(lambda d: DraftTree.chain(torch.tensor([9, *d]), torch.tensor(
        [1.0, q_root[d[0]], q_next[d[1]]], dtype=torch.float64), q_dists))
    return [tree_of((int(a), int(b))) for a, b in zip(x1, x2)]


def assert_stated_power(powers: dict[str, float], second_position: bool) -> None:
    """The docstrings' claim, checked: the first position and the acceptance count catch each error
    with 99 % probability; where claimed, so does the second position a doubled p = 0.01 token."""
    for error in ("rare doubled", "rare halved", "rare dropped", "acceptance + 0.02"):
        assert powers[error] >= POWER, (error, powers)
    if second_position:
        assert powers["second position, rare doubled"] >= POWER, powers


def test_exact_rule_samples_the_target_on_a_deterministic_chain():
    """A chain of two deterministic drafts (q a point mass): root -> 0 -> 4, p at the root P_RARE,
    after code 0 P_NEXT. n = 25,000 walks; each token's count is z-tested against n p, and the
    accepted tries' count against the sum of their exact chances, failing at |z| > 5.04 (21 checks,
    family alpha 1e-5). Power at the first position (normal approximation, computed by
    check_exact_walks and asserted below): a token of p = 0.01 drawn twice as often, half as often or
    never, > 0.999 each (99 % power down to a rise of 0.005, i.e. 1.5x); acceptance 0.02 too
    generous, 0.998. At the second position (reached after p(0) = 0.3: ~7,500 walks) a doubled
    p = 0.01 token, 0.995."""
    tree = DraftTree.chain(torch.tensor([9, 0, 4]), torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64))
    powers = check_exact_walks([tree] * N_WALKS, np.stack([P_RARE, P_NEXT, P_NEXT]), seed=0)
    assert_stated_power(powers, second_position=True)


def test_exact_rule_samples_the_target_on_deterministic_siblings():
    """Two deterministic siblings: code 2 (p = 0.18) tried first, then code 0 judged on the residual
    p without 2 (0.3 / 0.82), then the bonus drawn from p without 2 and 0. n = 25,000 walks, the
    checks and limit of the chain above: a token of p = 0.01 doubled, halved or dropped is caught
    with power > 0.999, acceptance 0.02 too generous (on ~45,500 tries) with power > 0.999. The
    second position (after code 2 was accepted: ~4,500 walks) is tested too but claims no power
    (0.89 against a doubled p = 0.01 token)."""
    tree = DraftTree(torch.tensor([9, 2, 0]), torch.tensor([-1, 0, 0]),
                     torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64))
    powers = check_exact_walks([tree] * N_WALKS, np.stack([P_RARE, P_NEXT, P_NEXT]), seed=1)
    assert_stated_power(powers, second_position=False)


def test_exact_rule_samples_the_target_on_a_sampled_chain():
    """A chain of two sampled drafts: x1 ~ Q_RARE at the root, x2 ~ Q_NEXT after it, each judged with
    min(1, p / q) and a rejection leaving norm(max(0, p - q)). The rare tokens reach the output only
    through that residual (q = 0.001 < p). n = 25,000 walks, the checks and limit of the chains
    above: a token of p = 0.01 doubled, halved or dropped is caught with power > 0.999, acceptance
    0.02 too generous with 0.991 (it can rise only where p < q: 75 % of drafts); the second position
    (reached in ~55 % of walks) catches a doubled p = 0.01 token with power > 0.999."""
    powers = check_exact_walks(sampled_chains(Q_RARE, Q_NEXT, seed=2), np.stack([P_RARE, P_NEXT, P_NEXT]), seed=3)
    assert_stated_power(powers, second_position=True)


def test_exact_rule_samples_the_target_on_sampled_siblings():
    """Two siblings drawn from Q_RARE without replacement (the second from q with the first removed,
    renormalised, as the static tree drafts them): the first judged on p, the second on what the
    first's rejection left, norm(max(0, p - q)), the bonus on what both left. n = 25,000 walks, the
    checks and limit above: a token of p = 0.01 doubled, halved or dropped is caught with power
    > 0.999, acceptance 0.02 too generous with 0.998; the second position (after the first sibling
    was accepted) is tested on P_NEXT too, and there a doubled p = 0.01 token is caught with > 0.999."""
    rng = np.random.default_rng(4)
    drafts = without_replacement(Q_RARE, N_WALKS, 2, rng)

    def make(d):
        second_q = Q_RARE.copy()
        second_q[d[0]] = 0.0
        second_q /= second_q.sum()
        return DraftTree(torch.tensor([9, *d]), torch.tensor([-1, 0, 0]),
                         torch.tensor([1.0, Q_RARE[d[0]], second_q[d[1]]], dtype=torch.float64),
                         torch.from_numpy(np.stack([Q_RARE, Q_RARE, second_q])))

    tree_of = tree_cache(make)
    trees = [tree_of((int(a), int(b))) for a, b in drafts]
    powers = check_exact_walks(trees, np.stack([P_RARE, P_NEXT, P_NEXT]), seed=5)
    assert_stated_power(powers, second_position=False)


def test_lantern_moves_at_most_delta_and_matches_its_relaxed_distribution():
    """The paper rule on a deterministic draft x = 2 whose neighbours are the next codes: A = {3, 4}
    (0.12 + 0.08 fits in delta 0.25, adding 0.06 would not), so the output is p with that mass moved
    onto x, written out by hand below. 20,000 draws, a z-test per token at |z| <= 4.85 (8 checks,
    family alpha 1e-5), which catches a rise of 0.025 on any token with 99 % (computed and asserted);
    a code of A drawn even once fails."""
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
    by_hand = np.array([0.30, 0.22, 0.18 + 0.12 + 0.08, 0.0, 0.0, 0.06, 0.03, 0.01])
    np.testing.assert_allclose(relaxed, by_hand, atol=1e-12)
    freq = empirical(lambda g: first_token(tree, probs, rule,
                                           torch.rand(3, generator=g, dtype=torch.float64).numpy()))
    z = z_limit(V)
    assert not frequency_misfits(np.rint(freq * N_DRAWS), by_hand, z)
    assert max(smallest_shift(N_DRAWS, p, z) for p in by_hand if 0 < p < 1) <= 0.025


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
