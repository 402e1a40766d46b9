"""The comparison generator and request checking, on the tiny random model with random drafters."""
import math
import time

import numpy as np
import pytest
import torch

from app.backend.lanes import interleave, lane_speedup, run_to_end, summary
from app.backend.request import RELAXED_DEFAULTS, CompareRequest
from app.backend.runtime import Runtime, usable_methods
from engine.core.config import InvalidInput, SamplingConfig
from engine.drafters.eagle_net import EagleNet
from engine.generation import generate
from engine.methods import MethodOptions
from tests.conftest import TINY_GPT

OPTIONS = MethodOptions(k=8, delta=0.3)


def test_interleaving_does_not_change_any_method_output(tiny_eagle):
    sampling = SamplingConfig(temperature=1.0, seed=3)
    lanes = run_to_end(tiny_eagle, ["vanilla", "eagle2", "lantern"], sampling, 1, OPTIONS)
    for lane in lanes:
        alone = generate(tiny_eagle, lane.method, sampling, 1, OPTIONS)
        assert np.array_equal(lane.tokens, alone.tokens)
        assert lane.passes == len(alone.traces)
        assert lane.done and len(lane.tokens) == TINY_GPT.num_image_tokens


def test_the_next_step_goes_to_the_lane_that_has_used_least_time(tiny_eagle):
    before = None
    for lanes in interleave(tiny_eagle, ["vanilla", "eagle2", "sjd"], SamplingConfig(seed=1), 0, OPTIONS):
        state = [(lane.passes, lane.elapsed_ms, lane.done) for lane in lanes]
        if before is not None:
            stepped = [i for i in range(3) if state[i][0] != before[i][0]]
            assert len(stepped) == 1
            waiting = [before[i][1] for i in range(3) if not before[i][2]]
            assert before[stepped[0]][1] == min(waiting)
        before = state
    assert all(done for _, _, done in before)


def test_each_lane_is_timed_by_its_own_steps_only(tiny_eagle):
    started = time.perf_counter()
    lanes = run_to_end(tiny_eagle, ["vanilla", "vanilla"], SamplingConfig(seed=2), 2, OPTIONS)
    wall_ms = (time.perf_counter() - started) * 1000
    assert all(lane.elapsed_ms > 0 for lane in lanes)
    # Interleaved lanes share the wall time: their own times add up to no more than it.
    assert lanes[0].elapsed_ms + lanes[1].elapsed_ms <= wall_ms


def test_summary_counts_and_speedup(tiny_eagle):
    lanes = run_to_end(tiny_eagle, ["vanilla", "lantern"], SamplingConfig(temperature=0.0), 0, OPTIONS)
    rows = summary(lanes)
    assert rows[0]["mean_accepted_length"] == 1.0
    assert rows[0]["speedup_vs_vanilla"] == 1.0
    assert rows[0]["target_passes"] == TINY_GPT.num_image_tokens
    lantern = rows[1]
    assert lantern["tokens"] == TINY_GPT.num_image_tokens
    expected = (TINY_GPT.num_image_tokens - 1) / (lantern["target_passes"] - 1)
    assert math.isclose(lantern["mean_accepted_length"], expected, rel_tol=1e-3)
    assert lantern["drafts_tested"] > 0 and 0 <= lantern["mean_accept_prob"] <= 1
    # The speed-up is vanilla's decode time over the lane's: with times set by hand, 300 / 120 ms.
    lanes[0].elapsed_ms, lanes[1].elapsed_ms = 300.0, 120.0
    assert summary(lanes)[1]["speedup_vs_vanilla"] == 2.5


def test_the_undrafted_speedup_from_hand_set_times(tiny_eagle):
    import dataclasses

    lanes = run_to_end(tiny_eagle, ["vanilla", "eagle2"], SamplingConfig(temperature=0.0), 0, OPTIONS)
    # Every pass: drafting 1 ms (vanilla's 1 ms of asking counts as the rest), verifying 5, accepting
    # 2; vanilla 10 ms a pass, eagle2 12 ms, so 4 ms of eagle2's are the rest.
    for lane, per_pass in zip(lanes, (10.0, 12.0)):
        lane.traces[1:] = [dataclasses.replace(t, draft_ms=1.0, verify_ms=5.0, accept_ms=2.0) for t in lane.traces[1:]]
        lane.elapsed_ms = per_pass * (lane.passes - 1)
    vanilla, eagle = summary(lanes)
    assert vanilla["ms_per_pass"] == {"draft": 0.0, "verify": 5.0, "accept": 2.0, "other": 3.0, "wall": 10.0}
    assert eagle["ms_per_pass"] == {"draft": 1.0, "verify": 5.0, "accept": 2.0, "other": 4.0, "wall": 12.0}
    mal = (TINY_GPT.num_image_tokens - 1) / (lanes[1].passes - 1)  # 15 tokens after the prefill
    assert eagle["undrafted_speedup"] == round(mal * 10.0 / 11.0, 3)  # MAL tokens for 11 ms, not 10
    assert vanilla["undrafted_speedup"] == 1.0


def test_each_panels_time_split_adds_up_to_its_decode_time(tiny_eagle):
    lanes = run_to_end(tiny_eagle, ["vanilla", "eagle2", "lantern"], SamplingConfig(temperature=1.0, seed=4), 2,
                       OPTIONS)
    for lane, row in zip(lanes, summary(lanes)):
        split = row["ms_per_pass"]
        passes = lane.passes - 1  # after the prefill, whose time is part of `other`
        assert set(split) == {"draft", "verify", "accept", "other", "wall"}
        parts = split["draft"] + split["verify"] + split["accept"] + split["other"]
        assert math.isclose(parts * passes, row["wall_ms"], rel_tol=0.01, abs_tol=0.5)
        assert math.isclose(split["wall"] * passes, row["wall_ms"], rel_tol=0.01, abs_tol=0.5)
        assert all(split[part] >= 0 for part in ("draft", "verify", "accept"))
        assert split["verify"] > 0  # every pass runs the target
        assert row["speedup_limit"] == row["mean_accepted_length"]
    assert summary(lanes)[0]["ms_per_pass"]["draft"] < summary(lanes)[1]["ms_per_pass"]["draft"]


def test_speedup_needs_a_vanilla_lane(tiny_eagle):
    lanes = run_to_end(tiny_eagle, ["eagle2", "lantern"], SamplingConfig(), 0, OPTIONS)
    assert lane_speedup(lanes[0], lanes) is None
    assert summary(lanes)[1]["speedup_vs_vanilla"] is None


def test_speedup_is_shown_once_both_lanes_have_finished(tiny_eagle):
    steps = interleave(tiny_eagle, ["vanilla", "lantern"], SamplingConfig(temperature=0.0), 0, OPTIONS)
    seen = [[row["speedup_vs_vanilla"] for row in summary(lanes)] for lanes in steps]
    assert all(ratios[1] is None for ratios in seen[:-1])
    assert seen[-1][1] is not None and seen[-1][0] == 1.0  # the benchmark's ratio of whole-image times


def test_a_method_that_cannot_run_fails_before_any_update(tiny_model):
    steps = interleave(tiny_model, ["vanilla", "eagle2"], SamplingConfig(), 0, OPTIONS)
    with pytest.raises(InvalidInput, match="eagle2"):
        next(steps)


def test_missing_drafters_are_replaced_by_runnable_methods(tiny_model):
    methods = usable_methods(tiny_model, ["vanilla", "eagle2", "lantern"])
    assert methods[0] == "vanilla" and len(set(methods)) == 3
    assert "eagle2" not in methods and "lantern" not in methods


def test_lantern_pp_needs_the_eagle_drafter_like_lantern(tiny_model):
    wanted = ["lantern_pp", "vanilla", "gsd"]
    methods = usable_methods(tiny_model, wanted)
    assert methods[1:] == ["vanilla", "gsd"] and methods[0] not in ("eagle2", "lantern", "lantern_pp")
    assert methods[0] not in methods[1:]
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    assert usable_methods(tiny_model, wanted) == wanted


def test_runtime_runs_a_whole_comparison_with_replacements(tiny_model):
    runtime = Runtime(loader=lambda name: tiny_model)
    state = runtime.run(CompareRequest(class_name="green", k=8))
    assert [lane.method for lane in state.lanes][0] == "vanilla"
    assert len(state.finals) == 3 and state.finals[0].shape == (8, 8, 3)  # a 4 x 4 grid, 2x upsampling
    assert state.max_step == max(len(lane.traces) for lane in state.lanes) - 1


@pytest.mark.parametrize("field, value, shown", [
    ("seed", 1.5, "seed 1.5"), ("seed", "abc", "seed 'abc'"), ("temperature", float("nan"), "temperature nan"),
    ("temperature", 11.0, "temperature 11.0"), ("cfg_scale", 0.5, "CFG scale 0.5"), ("top_k", -1, "top-k -1"),
    ("delta", 1.5, "delta 1.5"), ("k", 0, "k 0"), ("tree_depth", 0, "tree depth 0"),
    ("tree_total", 1000, "tree total tokens 1000"), ("seed", None, "seed None"),
    ("lantern_variant", "draft", "LANTERN variant 'draft'"), ("lantern_lambda", 101, "lambda 101"),
    ("lantern_lambda", "x", "lambda 'x'"), ("static_tree", "0 a", "static tree '0 a'"),
    ("static_tree", "0.0", "no parent '0'"), ("sjd_init", "middle", "initialisation 'middle'"),
    ("gsd_window", -1, "GSD window -1"), ("gsd_window", 2.5, "GSD window 2.5"),
    ("gsd_p_gap", float("inf"), "GSD p gap inf"), ("gsd_distance", 11, "GSD distance 11"),
])
def test_bad_request_values_are_named(field, value, shown):
    request = CompareRequest(**{field: value})
    with pytest.raises(InvalidInput) as err:
        request.sampling()
        request.options()
    assert shown in str(err.value)


def test_the_new_settings_reach_the_method_options():
    request = CompareRequest(lantern_variant="paper", lantern_lambda=7.5, static_tree="0 1 0.1 0.0",
                             sjd_init="left", gsd_window=12, gsd_p_gap=0.4, gsd_distance=1.5)
    assert request.options() == MethodOptions(lantern_variant="paper", lantern_lambda=7.5,
                                              static_tree=((0,), (1,), (0, 0), (0, 1)), sjd_init="left",
                                              gsd_window=12, gsd_p_gap=0.4, gsd_distance=1.5, **RELAXED_DEFAULTS)
    # An emptied window box means GSD's scaled default, as the API's None does.
    assert CompareRequest(gsd_window="").options().gsd_window is None
    # So does an emptied static-tree box: each method's own chain.
    assert CompareRequest(static_tree="  ").options().static_tree is None
    # The page's defaults are the engine's, but for the relaxed panel's setting (app.backend.request).
    assert CompareRequest().options() == MethodOptions(**RELAXED_DEFAULTS)


def test_unknown_methods_are_named():
    with pytest.raises(InvalidInput, match="'nope'"):
        CompareRequest(methods=("vanilla", "nope")).checked_methods()
