"""Known-answer checks of the acceptance rules' edge cases, written where mutation testing (mutmut,
see "Mutation testing" in docs/architecture.md) showed that the statistical tests could not tell a
changed rule from the right one: a draft the drafter gave no mass, a threshold met with equality,
zero-probability tokens in an entropy, the fields a verdict reports, Medusa's default constants,
LANTERN++'s ratio bound on the drafter's side, and the nucleus a drafter samples from."""
import math

import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import distribution, draw, entropy_bits, filter_top_k_top_p, nucleus
from engine.core.tree import DraftTree
from engine.rules.acceptance import Sampling, TypicalRule, exact_residual, normalised
from engine.rules.lantern import DeltaBound, NeighbourCredit, RatioBound, lantern_rule

SAMPLING, GREEDY = SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.0)
CODES = 8
NEXT_CODES = np.array([[(i + j) % CODES for j in range(1, CODES)] for i in range(CODES)])  # i+1, i+2, ...
# A drafter's q with dyadic masses, so that sums meet the bounds below exactly.
Q = torch.tensor([[0.25, 0.125, 0.125, 0.125, 0.125, 0.125, 0.0625, 0.0625]], dtype=torch.float64)


def test_normalising_scales_weights_to_one_and_leaves_an_empty_vector_empty():
    assert normalised(np.array([2.0, 1.0, 1.0])).tolist() == [0.5, 0.25, 0.25]
    assert normalised(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]  # no mass: no NaNs either


def test_a_draft_its_drafter_gave_no_mass_is_never_accepted():
    # q(1) = 0: the ratio p(1) / q(1) is undefined; the rule gives it chance 0 and rejects it for
    # any uniform, leaving norm(max(0, p - q)).
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.6, 0.0, 0.4])
    for uniform in (0.0, 0.5, 0.999):
        verdict = Sampling().test(p, 1, q, uniform)
        assert (verdict.accept_prob, verdict.accepted) == (0.0, False)
    assert Sampling().test(p, 1, q, 0.0).residual.tolist() == pytest.approx([0.0, 0.3, 0.0])


def test_typical_acceptance_is_strict_at_the_threshold():
    # p = (0.5, 0.25, 0.25): alpha exp(-H) = exp(-1.0397) = 0.354 > eps = 0.25, so the threshold is
    # 0.25 exactly, and p(x) = 0.25 fails: Medusa keeps p(x) > threshold.
    p = np.array([0.5, 0.25, 0.25])
    rule = TypicalRule(eps=0.25, alpha=1.0).bind(SAMPLING)
    assert [rule.test(p, x, None, 0.5).accepted for x in range(3)] == [True, False, False]


def test_typical_entropy_ignores_tokens_of_zero_probability():
    # The spread case of test_typical.py with two codes of no mass added: H and the threshold
    # (0.114 < eps = 0.4) stay the same, so 0.3 still passes.
    p = np.array([0.6, 0.3, 0.05, 0.05, 0.0, 0.0])
    rule = TypicalRule(eps=0.4, alpha=0.3).bind(SAMPLING)
    assert [rule.test(p, x, None, 0.5).accepted for x in range(4)] == [True, True, False, False]


def test_typical_verdict_reports_the_token_and_its_normalised_probability():
    verdict = TypicalRule(eps=0.09, alpha=0.3).bind(SAMPLING).test(np.array([8.0, 1.2, 0.8]), 1, None, 0.5)
    assert verdict.token == 1 and verdict.token_prob == pytest.approx(0.12)


def test_typical_rule_defaults_are_medusas_eps_and_alpha():
    # Medusa's posterior_threshold 0.09 and posterior_alpha 0.3.
    rule = TypicalRule().bind(SAMPLING)
    # Confident p: alpha exp(-H) = 0.159 > 0.09, so the threshold is eps: 0.12 passes, 0.08 fails.
    confident = np.array([0.8, 0.12, 0.08])
    assert [rule.test(confident, x, None, 0.5).accepted for x in range(3)] == [True, True, False]
    # Spread p: alpha exp(-H) = 0.3 * 0.156 = 0.047 < 0.09, so 0.07 passes.
    spread = np.array([0.25, 0.2, 0.15, 0.15, 0.1, 0.08, 0.07])
    entropy = -sum(x * math.log(x) for x in spread)
    assert 0.3 * math.exp(-entropy) == pytest.approx(0.0469, abs=1e-3)
    assert rule.test(spread, 6, None, 0.5).accepted


def test_greedy_lantern_records_each_verdict_at_its_node():
    # The official greedy walk judges every node of the tree once, in node order.
    codes = 8
    table = np.array([[(i + j) % codes for j in range(1, codes)] for i in range(codes)])
    tree = DraftTree(torch.tensor([5, 1, 2, 7, 0]), torch.tensor([-1, 0, 0, 1, 2]),
                     torch.ones(5, dtype=torch.float64))
    p = np.array([0.30, 0.22, 0.18, 0.12, 0.08, 0.06, 0.03, 0.01])
    result = lantern_rule(table, DeltaBound(0.2), "official", 2).bind(GREEDY).walk(tree, np.stack([p] * 5),
                                                                                  np.zeros(6))
    assert [v.node for v in result.verdicts] == [1, 2, 3, 4]
    assert [v.token for v in result.verdicts] == [1, 2, 7, 0]
    assert all(v.residual is None for v in result.verdicts)


def test_the_exact_residual_falls_back_to_p_when_q_equals_p():
    # max(0, p - q) is empty when q = p (to rounding): a draw from p itself is then the right one.
    p = np.array([0.5, 0.3, 0.2])
    assert exact_residual(p, 1, p.copy()).tolist() == [0.5, 0.3, 0.2]
    assert exact_residual(p, 1, np.array([0.6, 0.1, 0.3])).tolist() == pytest.approx([0.0, 0.2, 0.0])
    assert exact_residual(p, 1, None).tolist() == [0.5, 0.0, 0.2]  # a point mass on 1


def test_official_lantern_never_accepts_a_sampled_draft_of_zero_draft_mass():
    q = np.full(CODES, 1.0 / (CODES - 1))
    q[2] = 0.0
    verdict = lantern_rule(NEXT_CODES, DeltaBound(0.25), "official", 2).bind(SAMPLING).test(Q[0].numpy(), 2, q, 0.0)
    assert (verdict.accept_prob, verdict.accepted) == (0.0, False)


def test_official_lantern_verdict_reports_the_token_and_its_normalised_probability():
    p = np.array([0.30, 0.22, 0.18, 0.12, 0.08, 0.06, 0.03, 0.01])
    verdict = lantern_rule(NEXT_CODES, DeltaBound(0.25), "official", 2).bind(SAMPLING).test(p * 4, 2, None, 0.5)
    assert verdict.token == 2 and verdict.token_prob == pytest.approx(0.18)


def test_drafted_credit_includes_a_neighbour_set_whose_mass_equals_the_bound():
    # Candidate 1: neighbours 2, 3 carry 0.125 each, 0.25 in all = delta: both count, as on p
    # (NeighbourCredit.of keeps s_j <= delta). Candidate 5: 6 and 7 carry 0.0625 each, 0.125 in all.
    credit = NeighbourCredit(NEXT_CODES, DeltaBound(0.25), k=2)
    candidates = torch.tensor([[1, 5]])
    assert credit.on_drafts(Q, candidates, Q.gather(1, candidates)).tolist() == [[0.25, 0.125]]
    assert credit.of(Q[0].numpy(), 1).size == 2


def test_drafted_credit_under_a_ratio_bound_scales_with_each_candidates_own_mass():
    # lambda = 3: candidate 1 (q = 0.125) may borrow 0.25: neighbours 2, 3; candidate 6 (q = 0.0625)
    # 0.125: neighbour 7 (0.0625) only, 7 + 0 would make 0.3125.
    credit = NeighbourCredit(NEXT_CODES, RatioBound(3.0), k=3)
    candidates = torch.tensor([[1, 6]])
    assert credit.on_drafts(Q, candidates, Q.gather(1, candidates)).tolist() == [[0.25, 0.0625]]
    # Siblings in turn: 1 passes with q~ = 0.375; 6 is reached when 1 fails and passes with 0.125.
    confidence = lantern_rule(NEXT_CODES, RatioBound(3.0), "paper", 3).bind(SAMPLING).draft_confidence(Q, candidates)
    assert confidence.dtype == torch.float64
    assert confidence.tolist() == [[0.375, 0.625 * 0.125]]


def test_official_rule_out_counts_a_nearest_neighbour_whose_mass_equals_the_bound():
    # delta = 0.125, k = 2: rejecting 1 (nearest 2 at 0.125 <= delta) zeroes 2, 3, 4, ruling out 3;
    # rejecting 3 (nearest 4 at 0.125) zeroes 4, 5, 6; rejecting 7 (nearest 0 at 0.25) zeroes 7 alone.
    mask = lantern_rule(NEXT_CODES, DeltaBound(0.125), "official", 2).bind(SAMPLING).rules_out(
        Q, torch.tensor([[1, 3, 7]]))
    assert mask.tolist() == [[[True, True, False], [False, True, False], [False, False, True]]]


def test_official_rule_out_under_a_ratio_bound():
    candidates = torch.tensor([[1, 3]])  # q = 0.125 each; each one's nearest neighbour has 0.125
    borrows = lantern_rule(NEXT_CODES, RatioBound(2.0), "official", 2).bind(SAMPLING).rules_out(Q, candidates)
    assert borrows.tolist() == [[[True, True], [False, True]]]  # A = {2}: 1's rejection zeroes 2, 3, 4
    stingy = lantern_rule(NEXT_CODES, RatioBound(1.5), "official", 2).bind(SAMPLING).rules_out(Q, candidates)
    assert stingy.tolist() == [[[True, False], [False, True]]]  # bound 0.0625: A empty, x alone


def test_paper_rule_out_counts_neighbours_up_to_a_mass_equal_to_the_bound():
    # delta = 0.125, k = 2: each candidate's set A is its next code (0.125); the one after would exceed.
    mask = lantern_rule(NEXT_CODES, DeltaBound(0.125), "paper", 2).bind(SAMPLING).rules_out(
        Q, torch.tensor([[1, 2, 3]]))
    assert mask.tolist() == [[[True, True, False], [False, True, True], [False, False, True]]]
    ratio = lantern_rule(NEXT_CODES, RatioBound(2.0), "paper", 2).bind(SAMPLING).rules_out(Q, torch.tensor([[1, 2]]))
    assert ratio.tolist() == [[[True, True], [False, True]]]


def test_neighbour_tables_and_rule_out_masks_follow_the_candidates_device():
    # The "meta" device stands in for an accelerator: the cached table must move with the candidates.
    credit = NeighbourCredit(NEXT_CODES, DeltaBound(0.125), k=2)
    assert credit.neighbours_on(torch.tensor([[1, 2]])).tolist() == [[[2, 3], [3, 4]]]
    assert credit.neighbours_on(torch.tensor([[1, 2]], device="meta")).device.type == "meta"
    rule = lantern_rule(NEXT_CODES, DeltaBound(0.125), "official", 2).bind(SAMPLING)
    assert rule.rules_out(Q.to("meta"), torch.tensor([[1, 3]], device="meta")).device.type == "meta"


def test_nucleus_normalises_its_input_first():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    assert nucleus(probs * 8, 0.7).tolist() == nucleus(probs, 0.7).tolist() == [2 / 3, 1 / 3, 0.0, 0.0]


def test_nucleus_drops_a_token_once_the_mass_before_it_reaches_top_p():
    # Mass before token 1 is 0.5 = top_p exactly: top-p filtering drops it, and so must the nucleus.
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    assert nucleus(probs, 0.5).tolist() == [1.0, 0.0, 0.0, 0.0]
    kept = filter_top_k_top_p(probs.log()[None], 0, 0.5)[0].isfinite()
    assert kept.tolist() == [True, False, False, False]


def test_a_nucleus_holding_every_token_is_the_whole_distribution():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    assert nucleus(probs, 1.0).tolist() == probs.tolist()
    wide = torch.full((300,), 1.0 / 300, dtype=torch.float64)  # larger than the first look
    assert torch.allclose(nucleus(wide, 1.0), wide)


def test_entropy_in_bits_of_known_distributions():
    # H(1/2, 1/4, 1/4, 0) = 1.5 bits (a code of no mass adds nothing); a point mass has none.
    rows = np.array([[0.5, 0.25, 0.25, 0.0], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    assert entropy_bits(rows).tolist() == [1.5, 0.0, 2.0]
    assert float(entropy_bits(rows[0])) == 1.5  # one row (V,)


LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0]])


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sampling_divides_the_logits_by_the_temperature(temperature):
    expected = (LOGITS.double() / temperature).softmax(-1)
    assert torch.allclose(distribution(LOGITS, SamplingConfig(temperature=temperature)), expected)


def test_greedy_keeps_the_temperature_one_distribution():
    assert torch.allclose(distribution(LOGITS, GREEDY), LOGITS.double().softmax(-1))


def test_top_k_applies_before_top_p_unless_top_p_first():
    # p = (0.4, 0.3, 0.2, 0.1), top-k 2, top-p 0.5. Top-k first: (4/7, 3/7), and 4/7 >= 0.5 leaves
    # token 0 alone. Top-p first: 0.4 < 0.5 keeps tokens 0 and 1, and top-k 2 keeps both.
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    assert filter_top_k_top_p(logits, 2, 0.5)[0].isfinite().tolist() == [True, False, False, False]
    assert filter_top_k_top_p(logits, 2, 0.5, top_p_first=True)[0].isfinite().tolist() == [True, True, False, False]
    k_first = distribution(logits, SamplingConfig(temperature=1.0, top_k=2, top_p=0.5))
    p_first = distribution(logits, SamplingConfig(temperature=1.0, top_k=2, top_p=0.5, top_p_first=True))
    assert k_first[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert torch.allclose(p_first[0], torch.tensor([4 / 7, 3 / 7, 0.0, 0.0], dtype=torch.float64))


def test_top_p_drops_a_token_whose_preceding_mass_equals_top_p():
    # Four equal logits: 0.25 each; the third in sorted order has exactly 0.5 before it.
    assert int(filter_top_k_top_p(torch.zeros(1, 4), 0, 0.5).isfinite().sum()) == 2


def test_top_p_of_one_keeps_every_token_however_unlikely():
    # p(1) ~ 1e-13: in float32 the mass before it rounds to 1.0, yet top-p 1 is off and keeps it.
    logits = torch.tensor([[0.0, -30.0]])
    assert filter_top_k_top_p(logits, 0, 1.0).isfinite().all()
    assert float(distribution(logits, SamplingConfig(temperature=1.0, top_p=1.0))[0, 1]) > 0.0


def test_draw_inverts_the_cdf_at_its_steps():
    # Token i takes uniforms in [F(i - 1), F(i)): a uniform on a step belongs to the token it starts.
    probs = np.array([0.25, 0.25, 0.5])
    assert [draw(probs, u) for u in (0.0, 0.2499, 0.25, 0.4999, 0.5, 0.9999)] == [0, 0, 1, 1, 2, 2]
    assert draw(np.array([0.0, 0.5, 0.5]), 0.0) == 1  # never a code of no mass, also at u = 0
    assert draw(probs * 4, 0.25) == 1  # unnormalised weights


def test_draw_at_the_top_of_the_range_lands_on_the_last_token_with_mass():
    # u * total can round up to the total: the draw then takes the last code that has mass, not a
    # trailing code of none (u = 1 stands in for that rounding).
    assert draw(np.array([0.5, 0.25, 0.25, 0.0]), 1.0) == 2
    assert draw(np.array([0.5, 0.25, 0.25]), 1.0) == 2
