"""Stored steps judged again (engine.loop.rejudge): at the decode's own setting the recorded verdicts,
at delta 0 the exact rule's, and on the first step what a real decode at the new setting decides."""
import dataclasses

import pytest

from engine.core.config import InvalidInput, SamplingConfig
from engine.generation import generate, stream
from engine.loop.rejudge import rejudge
from engine.methods import MethodOptions, bound_rule
from engine.rules.acceptance import ExactRule

SAMPLING = SamplingConfig(temperature=1.0, seed=3)
GREEDY = SamplingConfig(temperature=0.0, seed=3)
# Wide credit on the tiny model's 64 codes, so that drafts are accepted and the walks go deep.
OPTIONS = MethodOptions(delta=0.6, k=16)
CASES = [("lantern_static", SAMPLING, "official"), ("lantern_static", SAMPLING, "paper"),
         ("lantern", GREEDY, "official"), ("lantern", GREEDY, "paper"), ("lantern", SAMPLING, "paper")]


def decoded(model, method, sampling, variant, options=OPTIONS):
    options = dataclasses.replace(options, lantern_variant=variant)
    return options, list(stream(model, method, sampling, 0, options, keep_inputs=True))[1:]


def as_decided(verdicts):
    return [(v.node, v.token, v.accept_prob, v.accepted, v.neighbours.tolist()) for v in verdicts]


@pytest.mark.parametrize("method, sampling, variant", CASES)
def test_at_the_decodes_own_setting_the_recorded_verdicts_come_back_exactly(tiny_eagle, method, sampling, variant):
    options, steps = decoded(tiny_eagle, method, sampling, variant)
    rule = bound_rule(tiny_eagle, method, options, sampling)
    assert sum(len(step.accepted_nodes) for step in steps) >= 3  # acceptances are exercised, not only rejections
    for step in steps:
        again = rejudge(step, rule)
        assert as_decided(again.verdicts) == as_decided(step.verdicts)
        assert again.accepted_nodes == step.accepted_nodes
        if len(step.new_tokens) > len(step.accepted_nodes):  # the last step may stop at the image's end
            assert again.next_token == step.new_tokens[len(step.accepted_nodes)]


@pytest.mark.parametrize("method, sampling", [("lantern_static", SAMPLING), ("lantern", GREEDY)])
def test_the_paper_rule_at_delta_zero_judges_as_the_exact_rule(tiny_eagle, method, sampling):
    options, steps = decoded(tiny_eagle, method, sampling, "paper")
    no_credit = bound_rule(tiny_eagle, method, dataclasses.replace(options, delta=0.0), sampling)
    exact = ExactRule().bind(sampling)
    relaxed_kept = 0
    for step in steps:
        paper, lossless = rejudge(step, no_credit), rejudge(step, exact)
        assert [(v.accept_prob, v.accepted) for v in paper.verdicts] == [
            (v.accept_prob, v.accepted) for v in lossless.verdicts]
        assert paper.accepted_nodes == lossless.accepted_nodes
        relaxed_kept += len(step.accepted_nodes) - len(paper.accepted_nodes)
    assert relaxed_kept > 0  # the decode's delta 0.6 did keep more: the comparison is not vacuous


@pytest.mark.parametrize("method, sampling", [("lantern_static", SAMPLING), ("lantern", GREEDY)])
def test_the_official_rule_at_delta_zero_keeps_the_exact_rules_drafts(tiny_eagle, method, sampling):
    options, steps = decoded(tiny_eagle, method, sampling, "official")
    no_credit = bound_rule(tiny_eagle, method, dataclasses.replace(options, delta=0.0), sampling)
    exact = ExactRule().bind(sampling)
    for step in steps:
        assert rejudge(step, no_credit).accepted_nodes == rejudge(step, exact).accepted_nodes


@pytest.mark.parametrize("delta", [0.0, 0.2, 1.0])
def test_the_first_step_judged_again_is_what_a_decode_at_that_delta_decides(tiny_eagle, delta):
    """Up to its first walk a decode does not depend on delta (same drafts, same draws): a known answer."""
    options, steps = decoded(tiny_eagle, "lantern_static", SAMPLING, "official")
    asked = dataclasses.replace(options, delta=delta)
    real = generate(tiny_eagle, "lantern_static", SAMPLING, 0, asked).traces[1]
    again = rejudge(steps[0], bound_rule(tiny_eagle, "lantern_static", asked, SAMPLING))
    assert as_decided(again.verdicts) == as_decided(real.verdicts)
    assert again.accepted_nodes == real.accepted_nodes


def test_a_decode_keeps_no_inputs_unless_asked_and_then_cannot_be_judged_again(tiny_eagle):
    steps = list(stream(tiny_eagle, "lantern_static", SAMPLING, 0, OPTIONS))[1:]
    assert all(step.inputs is None for step in steps)
    with pytest.raises(InvalidInput, match="keep_inputs"):
        rejudge(steps[0], bound_rule(tiny_eagle, "lantern_static", OPTIONS, SAMPLING))
