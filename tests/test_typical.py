"""Medusa's typical acceptance (TypicalRule): a draft x passes iff p(x) > min(eps, alpha * exp(-H(p))),
checked on hand-made distributions whose entropy is written out."""
import math

import numpy as np
import pytest

from engine.core.config import SamplingConfig
from engine.rules.acceptance import Greedy, TypicalRule

SAMPLING, GREEDY = SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.0)


def test_a_confident_p_is_cut_at_eps():
    # p = (0.8, 0.12, 0.08): H = 0.6350 nats, alpha exp(-H) = 0.3 * 0.5299 = 0.159 > eps = 0.09, so
    # the threshold is 0.09: 0.12 passes though it is under 0.159, and 0.08 fails.
    p = np.array([0.8, 0.12, 0.08])
    entropy = -(0.8 * math.log(0.8) + 0.12 * math.log(0.12) + 0.08 * math.log(0.08))
    assert 0.3 * math.exp(-entropy) == pytest.approx(0.1590, abs=1e-4)
    rule = TypicalRule(eps=0.09, alpha=0.3).bind(SAMPLING)
    assert [rule.test(p, x, None, 0.5).accepted for x in range(3)] == [True, True, False]


def test_a_spread_p_is_cut_at_alpha_times_exp_minus_entropy():
    # p = (0.6, 0.3, 0.05, 0.05): H = 0.9673 nats, alpha exp(-H) = 0.3 * 0.3801 = 0.1140 < eps = 0.4, so
    # the threshold is 0.114: 0.3 passes though it is under eps, the 0.05s fail.
    p = np.array([0.6, 0.3, 0.05, 0.05])
    entropy = -(0.6 * math.log(0.6) + 0.3 * math.log(0.3) + 2 * 0.05 * math.log(0.05))
    assert 0.3 * math.exp(-entropy) == pytest.approx(0.1140, abs=1e-4)
    rule = TypicalRule(eps=0.4, alpha=0.3).bind(SAMPLING)
    verdicts = [rule.test(p, x, None, 0.999) for x in range(4)]
    assert [v.accepted for v in verdicts] == [True, True, False, False]
    assert [v.accept_prob for v in verdicts] == [1.0, 1.0, 0.0, 0.0]  # a threshold, not a chance
    # Unnormalised weights are judged as the distribution they make.
    assert rule.test(p * 10, 1, None, 0.5).accepted and not rule.test(p * 10, 2, None, 0.5).accepted
    # A rejection removes the rejected token from what the walk draws from next.
    assert verdicts[2].residual.tolist() == [0.6, 0.3, 0.0, 0.05]


def test_greedy_decoding_keeps_the_exact_greedy_rule():
    assert isinstance(TypicalRule().bind(GREEDY), Greedy)
    # Under greedy decoding 0.3 fails (not the argmax) though typical acceptance would take it.
    assert not TypicalRule(eps=0.4, alpha=0.3).bind(GREEDY).test(np.array([0.6, 0.3, 0.1]), 1, None, 0.5).accepted
