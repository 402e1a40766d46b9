"""The page's handlers called directly (no server), on the tiny random model with a random drafter."""
import gradio as gr
import numpy as np
import pytest
import torch

from app import handlers
from app.request import CompareRequest
from app.runtime import Runtime
from engine.drafters.eagle_net import EagleNet
from tests.conftest import TINY_GPT

REQUEST = CompareRequest(class_name="blue", k=8, delta=0.3)
OUTPUTS = 3 * handlers.PANELS + len(handlers.AFTER_PANELS)


@pytest.fixture
def runtime(tiny_model):
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    return Runtime(loader=lambda name: tiny_model)


def test_compare_streams_previews_then_everything(runtime, monkeypatch):
    monkeypatch.setattr(handlers, "MIN_UPDATE_S", 0.0)  # a preview after every step
    monkeypatch.setattr(handlers, "DECODE_SHARE", 0.0)
    updates = list(handlers.compare(runtime, REQUEST))
    assert all(len(update) == OUTPUTS for update in updates)
    previews, final = updates[:-1], updates[-1]
    assert len(previews) > 3
    first = previews[0]
    assert all(isinstance(image, np.ndarray) and image.shape == (256, 256, 3) for image in first[:3])
    # While decoding, the heavy outputs are left alone.
    assert all(isinstance(value, type(gr.skip())) for value in first[3 * handlers.PANELS:])
    state = final[-2]
    assert [lane.method for lane in state.lanes] == ["vanilla", "eagle2", "lantern"]
    assert all(lane.done for lane in state.lanes)
    statistics = final[OUTPUTS - 3]
    assert [row["tokens"] for row in statistics["methods"]] == [TINY_GPT.num_image_tokens] * 3
    assert final[-1] == 2  # the inspector starts on the relaxed (LANTERN) panel


def test_counters_and_maps_stream_even_when_image_previews_are_too_costly(runtime, monkeypatch):
    monkeypatch.setattr(handlers, "MIN_UPDATE_S", 0.0)
    monkeypatch.setattr(handlers, "DECODE_SHARE", 1e6)  # a decoder so slow that one preview uses the budget
    previews = list(handlers.compare(runtime, REQUEST))[:-1]
    skip = type(gr.skip())
    with_images = [update for update in previews if not isinstance(update[0], skip)]
    assert len(with_images) == 1 and with_images[0] is previews[0]  # the first update only
    assert len(previews) > 3 and all(isinstance(update[6], str) for update in previews)  # counters
    assert sum(not isinstance(update[3 + 2], skip) for update in previews) > 3  # LANTERN's map moves on


def test_bad_values_become_gr_errors_naming_them(runtime):
    for request, named in [(CompareRequest(class_name="dragon"), "dragon"),
                           (CompareRequest(class_name="red", k=900), "900"),
                           (CompareRequest(class_name="red", methods=("vanilla", "sps", "sjd")), "sps")]:
        with pytest.raises(gr.Error, match=named):
            next(handlers.compare(runtime, request))


def test_scrubbing_replays_a_step_from_the_traces(runtime):
    state = runtime.run(REQUEST)
    step = 2
    out = handlers.scrub(runtime, state, 2, step)
    assert len(out) == 2 * handlers.PANELS + 1 + len(handlers.INSPECTOR)
    for lane, image in zip(state.lanes, out[:3]):
        known = len(lane.traces[min(step, len(lane.traces) - 1)].tokens_so_far)
        cell = 256 // TINY_GPT.grid_size
        row, col = divmod(known, TINY_GPT.grid_size)  # the first cell not yet generated at that step
        if known < TINY_GPT.num_image_tokens:
            pending = image[row * cell + cell // 2, col * cell + cell // 2]
            assert pending.tolist() == handlers.render.PENDING.tolist()
    assert f"(step {step})" in out[-1]


def test_clicking_a_token_inspects_it(runtime):
    state = runtime.run(REQUEST)
    latent, tree, words, panel = handlers.select(runtime, state, 1, x=200, y=10)
    assert panel == 1 and "row 0, column 3" in words
    assert latent.data[0].name == "codebook"


def test_page_load_without_a_start_up_run(runtime):
    updates = list(handlers.on_load(runtime, 0.2, 8))
    assert len(updates) == 2 and all(len(u) == OUTPUTS + handlers.PANELS + 2 for u in updates)
    latent = updates[0][3 * handlers.PANELS + handlers.AFTER_PANELS.index("latent_plot")]
    assert len(latent.data[0].x) == TINY_GPT.vocab_size
    assert "Press Run" in updates[1][6]


def test_page_load_shows_the_start_up_run(runtime):
    runtime.start(warm=True, request=REQUEST).join(timeout=120)
    updates = list(handlers.on_load(runtime, 0.2, 64))
    final = updates[-1]
    assert final[3 * handlers.PANELS + handlers.AFTER_PANELS.index("run_state")].lanes[0].method == "vanilla"
    assert final[OUTPUTS:OUTPUTS + 3] == [lane.method for lane in runtime.cached_run(0).lanes]
