"""The page's handlers called directly (no server), on the tiny random model with a random drafter."""
import re
from dataclasses import replace

import gradio as gr
import numpy as np
import pytest
import torch

from app.backend.lanes import interleave
from app.backend.request import PANELS, CompareRequest
from app.backend.runtime import Runtime
from app.page import handlers
from app.page.outputs import ComparisonOutputs, LoadOutputs
from engine.drafters.eagle_net import EagleNet
from tests.conftest import TINY_GPT

REQUEST = CompareRequest(class_name="blue", k=8, delta=0.3)
SKIP = type(gr.skip())


@pytest.fixture
def runtime(tiny_model):
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    return Runtime(loader=lambda name: tiny_model)


def stream(runtime, request) -> list[ComparisonOutputs]:
    return [ComparisonOutputs.unflatten(update) for update in handlers.stream_comparison(runtime, request)]


def recorded_progress(runtime, request) -> list:
    """(model, lanes) after every step of a comparison, each a copy, as app.backend.live_run publishes them."""
    model, condition = runtime.bound_model(request)
    return [(model, [replace(lane, traces=list(lane.traces)) for lane in lanes])
            for lanes in interleave(model, request.panel_methods(), request.sampling(), condition, request.options())]


def test_previews_show_images_maps_and_counters_and_leave_the_rest(runtime, monkeypatch):
    monkeypatch.setattr(handlers, "DECODE_SHARE", 0.0)  # an image preview at every look
    progress = recorded_progress(runtime, REQUEST)
    previews = list(handlers.previews(progress))
    assert len(previews) == len(progress)
    first = previews[0]
    assert all(isinstance(image, np.ndarray) and image.shape == (256, 256, 3) for image in first.images)
    # While decoding, the heavy outputs are left alone.
    assert all(isinstance(value, SKIP) for value in first.flatten()[3 * PANELS:])
    assert "decoding" in first.counters[0] and "done" in previews[-1].counters[0]


def test_counters_and_maps_stream_even_when_image_previews_are_too_costly(runtime, monkeypatch):
    monkeypatch.setattr(handlers, "DECODE_SHARE", 1e6)  # a decoder so slow that one preview uses the budget
    previews = list(handlers.previews(recorded_progress(runtime, REQUEST)))
    with_images = [update for update in previews if not isinstance(update.images[0], SKIP)]
    assert len(with_images) == 1 and with_images[0] is previews[0]  # the first update only
    assert len(previews) > 3 and all(isinstance(update.counters[0], str) for update in previews)
    assert sum(not isinstance(update.maps[2], SKIP) for update in previews) > 3  # the relaxed map moves on


def test_compare_streams_then_returns_everything(runtime):
    updates = stream(runtime, REQUEST)
    final = updates[-1]
    state = final.run_state
    assert [lane.method for lane in state.lanes] == ["vanilla", "eagle2", "lantern_static"]  # sampling defaults
    # The echo names what ran: LANTERN's static chain, which the sampling panel runs for "lantern".
    assert final.statistics["request"]["methods"] == ("vanilla", "eagle2", "lantern_static")
    assert all(lane.done for lane in state.lanes)
    assert all(isinstance(update.run_state, SKIP) for update in updates[:-1])  # previews only before it
    clocks = final.statistics
    assert 0 < clocks["panels_decode_ms"] <= clocks["comparison_wall_ms"]
    # The text rounds the comparison's time to hundredths of a second, the statistics to tenths of a
    # millisecond: the two agree to the text's rounding (0.0950 s may read 0.10 s beside 0.09 s).
    shown = re.search(r"The whole comparison took \*\*([0-9.]+) s\*\*", final.teaching)
    assert shown and abs(float(shown.group(1)) - clocks["comparison_wall_ms"] / 1000) <= 0.0051
    assert [row["tokens"] for row in final.statistics["methods"]] == [TINY_GPT.num_image_tokens] * 3
    assert final.inspect_panel == 2  # the inspector starts on the relaxed panel


def test_bad_values_become_gr_errors_naming_them(runtime):
    for request, named in [(CompareRequest(class_name="dragon"), "dragon"),
                           (CompareRequest(class_name="red", k=900, methods=("vanilla", "lantern_static")), "900"),
                           (CompareRequest(class_name="red", methods=("vanilla", "sps", "sjd")), "sps")]:
        with pytest.raises(gr.Error, match=named):
            next(handlers.stream_comparison(runtime, request))


def test_scrubbing_replays_a_step_from_the_traces(runtime):
    state = runtime.run(REQUEST)
    step = 2
    out = ComparisonOutputs.unflatten(handlers.scrub(runtime, state, 2, step))
    for lane, image in zip(state.lanes, out.images):
        known = len(lane.traces[min(step, len(lane.traces) - 1)].tokens_so_far)
        cell = 256 // TINY_GPT.grid_size
        row, col = divmod(known, TINY_GPT.grid_size)  # the first cell not yet generated at that step
        if known < TINY_GPT.num_image_tokens:
            pending = image[row * cell + cell // 2, col * cell + cell // 2]
            assert pending.tolist() == handlers.render.PENDING.tolist()
    assert f"(step {step})" in out.detail
    # Replaying changes neither the run, nor the counters, nor the panel being inspected.
    assert all(isinstance(value, SKIP) for value in [out.run_state, out.inspect_panel, *out.counters])


def test_clicking_a_token_inspects_it(runtime):
    state = runtime.run(REQUEST)
    out = ComparisonOutputs.unflatten(handlers.select(runtime, state, 1, x=200, y=10))
    assert out.inspect_panel == 1 and "row 0, column 3" in out.detail
    step = handlers.render.step_of_position(state.lanes[1].traces, 3)[0]
    assert out.scrubber["value"] == step and f"(step {step})" in out.detail  # the slider follows the token
    assert out.length_plot.layout.shapes[0].x0 == step
    assert out.latent_plot.data[0].name == "codebook"
    assert all(isinstance(image, SKIP) for image in out.images)


def test_page_load_without_a_start_up_run(runtime):
    loading = handlers.on_load(runtime, 0.2, 8, 0.0, ["vanilla", "eagle2", "lantern"])
    updates = [LoadOutputs.unflatten(update) for update in loading]
    assert len(updates) == 2
    assert len(updates[0].latent_plot.data[0].x) == TINY_GPT.vocab_size
    assert "Press Run" in updates[0].counters[0] and "Press Run" in updates[1].counters[0]
    assert all(isinstance(image, SKIP) for image in updates[0].images)


def test_page_load_shows_pending_pictures_while_the_start_up_run_decodes(runtime):
    runtime.first_run.expected = True  # as Runtime.start(warm=True) sets it, before the run publishes
    runtime.first_run.end(None)
    first = LoadOutputs.unflatten(next(handlers.on_load(runtime, 0.2, 8, 1.0, ["vanilla", "eagle2", "lantern"])))
    assert "Starting a first comparison" in first.counters[0] and "Press Run" not in first.counters[0]
    for image in first.images:  # not blank frames: the picture's cells, all pending
        assert image.shape == (256, 256, 3) and (image == handlers.render.PENDING).all(-1).mean() > 0.5


def test_page_load_shows_the_start_up_run(runtime):
    runtime.start(warm=True, request=REQUEST).join(timeout=120)
    updates = list(handlers.on_load(runtime, 0.2, 64, 0.0, ["vanilla", "eagle2", "lantern"]))
    assert len(updates) == 2  # already decoded: no previews, the result at once
    final = LoadOutputs.unflatten(updates[-1])
    assert final.run_state.lanes[0].method == "vanilla"
    assert final.methods == [lane.method for lane in runtime.cached_run(0).lanes]


def test_page_load_streams_the_start_up_run_while_it_decodes(runtime, monkeypatch):
    monkeypatch.setattr(handlers, "MIN_UPDATE_S", 0.0)  # a preview after every step
    monkeypatch.setattr(handlers, "DECODE_SHARE", 0.0)
    first = runtime.first_run
    first.expected = True
    loading = handlers.on_load(runtime, 0.2, 8, 1.0, ["vanilla", "eagle2", "lantern"])
    assert "first comparison" in LoadOutputs.unflatten(next(loading)).counters[0]
    previews = []

    def step_then_look(model, lanes):  # the decoding publishes a step, then the page takes its update
        first.publish(model, lanes)
        previews.append(LoadOutputs.unflatten(next(loading)))

    first.end(runtime.run(REQUEST, on_step=step_then_look))
    final = LoadOutputs.unflatten(next(loading))
    with pytest.raises(StopIteration):
        next(loading)
    assert len(previews) > 3
    methods = [lane.method for lane in final.run_state.lanes]
    assert previews[0].methods == methods and isinstance(previews[1].methods[0], SKIP)
    pending = handlers.render.PENDING.tolist()
    cell = 256 // TINY_GPT.grid_size
    corner = (256 - cell // 2, 256 - cell // 2)  # the last token's cell: pending until the very end
    assert previews[0].images[0][corner].tolist() == pending
    assert final.images[0][corner].tolist() != pending
    assert "tokens" in previews[-1].counters[2] and isinstance(previews[-1].length_plot, SKIP)


def test_new_methods_run_to_the_end_with_their_settings(runtime):
    request = CompareRequest(class_name="green", k=8, methods=("lantern_pp", "sjd_coupled", "gsd"),
                             lantern_variant="paper", lantern_lambda=5.0, static_tree="0 1 0.0",
                             sjd_init="above", gsd_window=3, gsd_p_gap=0.3, gsd_distance=0.5)
    final = stream(runtime, request)[-1]
    lanes = final.run_state.lanes
    assert [lane.method for lane in lanes] == ["lantern_pp", "sjd_coupled", "gsd"]
    assert all(lane.done and len(lane.tokens) == TINY_GPT.num_image_tokens for lane in lanes)
    # LANTERN++ drafts the static tree asked for: at most three drafts a step.
    assert max(len(trace.tree_tokens) - 1 for trace in lanes[0].traces) == 3
    assert "lambda = 5" in final.teaching and "GSD" in final.teaching
    assert final.statistics["request"]["static_tree"] == "0 1 0.0"
    assert final.inspect_panel == 2 and "kept code" in final.detail  # GSD: the last lossy panel


@pytest.mark.parametrize("changes, named", [
    ({"lantern_lambda": 0.5}, "lambda 0.5"), ({"lantern_variant": "draft"}, "'draft'"),
    ({"static_tree": "0 2.1"}, "'2.1'"), ({"sjd_init": "middle"}, "'middle'"),
    ({"gsd_window": 5000}, "GSD window 5000"), ({"gsd_p_gap": 2}, "GSD p gap 2"),
    ({"methods": ("vanilla", "warp", "gsd")}, "'warp'"), ({"class_name": "dragon"}, "dragon"),
])
def test_bad_values_are_refused_before_the_model_is_loaded(tiny_model, changes, named):
    loaded = []
    runtime = Runtime(loader=lambda name: loaded.append(name) or tiny_model)
    with pytest.raises(gr.Error, match=named):
        next(handlers.stream_comparison(runtime, CompareRequest(**{"model": "c2i_B_256", **changes})))
    assert loaded == []


def test_a_text_model_without_a_prompt_is_refused_before_loading(tiny_model):
    loaded = []
    runtime = Runtime(loader=lambda name: loaded.append(name) or tiny_model)
    with pytest.raises(gr.Error, match="prompt"):
        next(handlers.stream_comparison(runtime, CompareRequest(model="lantern_t2i_XL_256", prompt="  ")))
    assert loaded == []


def test_the_tree_settings_reach_the_dynamic_tree(runtime):
    request = CompareRequest(class_name="red", k=8, methods=("eagle2",), tree_depth=5, tree_top_k=2, tree_total=6,
                             tree_score="draft", tree_min_score=0.95)
    tree = request.options().tree
    assert (tree.score, tree.min_score) == ("draft", 0.95)
    lanes = stream(runtime, request)[-1].run_state.lanes
    # An untrained drafter never reaches a 0.95 chance: every tree stops after its first level.
    assert max(int(trace.tree_depths.max()) for trace in lanes[0].traces) == 1


def test_cool_sd_runs_in_a_panel_with_its_settings_and_explains_its_time(runtime):
    request = CompareRequest(class_name="green", k=8, methods=("vanilla", "eagle2", "cool_sd"), cool_w=3.0,
                             draft_top_p=0.9, static_tree="0 0.0 0.0.0")
    final = stream(runtime, request)[-1]
    cool = final.run_state.lanes[2]
    assert cool.method == "cool_sd" and cool.done and len(cool.tokens) == TINY_GPT.num_image_tokens
    assert max(len(trace.tree_tokens) - 1 for trace in cool.traces) == 3  # the chain asked for
    rows = final.statistics["methods"]
    assert final.statistics["request"]["cool_w"] == 3.0 and final.statistics["request"]["draft_top_p"] == 0.9
    for row, counters in zip(rows, final.counters):
        split = row["ms_per_pass"]
        assert set(split) == {"draft", "verify", "accept", "other", "wall"}  # the values: test_app_lanes
        assert "time-split" in counters and "limit" not in counters
    assert "Why accepted length is not speed" in final.teaching and "COOL-SD" in final.teaching
    # The ceiling verifying sets, quoted for the panel that kept the most tokens a pass, as its row has it.
    quoted = max(rows[1:], key=lambda row: row["mean_accepted_length"])
    assert "even free drafting would give at most" in final.teaching
    assert f"= {quoted['undrafted_speedup']:.2f}x." in final.teaching


def test_the_default_panels_are_vanilla_eagle2_and_lantern_as_the_mode_runs_it():
    assert CompareRequest().methods == ("vanilla", "eagle2", "lantern_static")  # what runs when sampling
    assert CompareRequest().panel_methods() == ["vanilla", "eagle2", "lantern_static"]  # sampling by default
    # Asked for at temperature 0, the explorer's LANTERN runs its dynamic tree (the menus follow the mode).
    assert CompareRequest(temperature=0.0, methods=("vanilla", "eagle2", "lantern")).panel_methods()[-1] == "lantern"
    assert handlers.follow_mode(0.0, list(CompareRequest().methods)) == ["vanilla", "eagle2", "lantern"]


def test_a_menu_choice_names_what_runs_and_the_swap_button_trades_lantern_for_cool_sd():
    assert handlers.named_for_mode("lantern", 1.0) == "lantern_static"
    assert handlers.named_for_mode("lantern", 0.0) == "lantern"
    assert handlers.named_for_mode("eagle2", 1.0) == "eagle2"
    assert handlers.swap_relaxed("lantern_static", 1.0) == "cool_sd"
    assert handlers.swap_relaxed("cool_sd", 1.0) == "lantern_static"
    assert handlers.swap_relaxed("cool_sd", 0.0) == "lantern"


def test_the_replay_slider_spans_the_inspected_panel_and_clamps_typed_steps(runtime):
    state = runtime.run(REQUEST)
    final = handlers.final_outputs(runtime, state)
    passes = state.lanes[final.inspect_panel].passes
    assert passes < state.lanes[0].passes  # LANTERN needs fewer passes than vanilla: the ranges differ
    assert final.scrubber["maximum"] == passes - 1
    for typed, shown in [(passes + 20, passes - 1), (-3, 0), ("", 0), ("2", 2)]:
        out = ComparisonOutputs.unflatten(handlers.scrub(runtime, state, final.inspect_panel, typed))
        assert out.scrubber["value"] == shown and f"(step {shown})" in out.detail
    vanilla = ComparisonOutputs.unflatten(handlers.scrub(runtime, state, 0, 5))
    assert vanilla.scrubber["maximum"] == state.lanes[0].passes - 1


def test_the_whatif_view_judges_the_runs_drafts_at_the_sliders_setting(runtime):
    request = replace(REQUEST, methods=("vanilla", "lantern"), delta=0.1, k=16)
    state = runtime.run(request)
    lane = state.lanes[1]
    final = handlers.final_outputs(runtime, state)
    recorded = np.mean([len(t.accepted_nodes) for t in lane.traces[1:]])
    kept = float(re.search(r'data-kept="([0-9.]+)"', final.whatif).group(1))
    assert kept == pytest.approx(recorded, abs=1e-4) and "run's own setting" in final.whatif
    none, wide = (handlers.whatif(state, delta, 16, "official", 3) for delta in (0.0, 1.0))
    kept_at = [float(re.search(r'data-kept="([0-9.]+)"', words).group(1)) for words, _ in (none, wide)]
    assert kept_at[0] <= recorded <= kept_at[1] and kept_at[0] < kept_at[1]  # more credit keeps more drafts
    assert "Press Run" in wide[0] and wide[1] is not None
    refused, _ = handlers.whatif(state, 1.5, 16, "official", 3)
    assert "delta 1.5" in refused  # named, as Run would name it
    alone = runtime.run(replace(REQUEST, methods=("vanilla", "eagle2")))
    assert "No panel runs" in handlers.whatif(alone, 0.3, 16, "official", 1)[0]
    assert "first comparison" in handlers.whatif(None, 0.3, 16, "official", 1)[0]
