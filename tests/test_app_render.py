"""Pictures and token details drawn from real traces of the tiny random model."""
import dataclasses

import numpy as np
import pytest
import torch

from app.backend.lanes import run_to_end
from app.backend.runtime import padded_tokens
from app.views import render
from app.views.detail import first_position, token_detail
from engine.core.config import SamplingConfig
from engine.drafters.eagle_net import EagleNet
from engine.evaluation.quality import LOW_P
from engine.methods import MethodOptions
from tests.conftest import TINY_GPT

GRID = TINY_GPT.grid_size
TOTAL = TINY_GPT.num_image_tokens
DELTA = 0.3


@pytest.fixture
def lanes(tiny_model):
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    return run_to_end(tiny_model, ["vanilla", "eagle2", "lantern"], SamplingConfig(temperature=1.0, seed=4), 1,
                      MethodOptions(k=8, delta=DELTA))


def test_partial_images_grey_out_exactly_the_cells_not_yet_generated():
    image = np.random.default_rng(0).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    out = render.grey_out(image, render.known_cells(np.arange(5), GRID), size=64)
    assert out.shape == (64, 64, 3)
    cell = 16
    for position in range(TOTAL):
        row, col = divmod(position, GRID)
        block = out[row * cell:(row + 1) * cell, col * cell:(col + 1) * cell]
        source = render.upscale(image, 64)[row * cell:(row + 1) * cell, col * cell:(col + 1) * cell]
        if position < 5:
            assert np.array_equal(block, source)
        else:
            colours = {tuple(c) for c in block.reshape(-1, 3)}
            assert colours == {tuple(render.PENDING), tuple(render.PENDING_EDGE)}


def test_padding_keeps_the_known_prefix():
    padded = padded_tokens(np.array([7, 8, 9]), TOTAL, filler=0)
    assert padded.tolist()[:4] == [7, 8, 9, 0] and len(padded) == TOTAL


def test_vanilla_tokens_are_all_the_targets_own_draws(lanes):
    codes = render.acceptance_codes(lanes[0].traces, TOTAL)
    assert (codes == render.BONUS).all()


def test_acceptance_codes_match_the_traces(lanes):
    for lane in lanes[1:]:
        codes = render.acceptance_codes(lane.traces, TOTAL)
        drafted = sum(len(t.accepted_nodes) for t in lane.traces)
        assert (codes == render.DRAFTED).sum() == drafted
        assert (codes != render.NOT_YET).all()
        midway = len(lane.traces) // 2
        partial = render.acceptance_codes(lane.traces, TOTAL, upto=midway)
        assert (partial != render.NOT_YET).sum() == (render.tokens_after(lane.traces, midway) >= 0).sum()


def test_acceptance_map_colours_and_highlight():
    codes = np.array([render.DRAFTED, render.BONUS] + [render.NOT_YET] * (TOTAL - 2), np.int8)
    picture = render.acceptance_map(codes, GRID, highlight=[1], size=64)
    assert picture.shape == (64, 64, 3)
    assert np.array_equal(picture[8, 8], render.MAP_COLOURS[render.DRAFTED])
    assert np.array_equal(picture[40, 40], render.MAP_COLOURS[render.NOT_YET])
    assert np.array_equal(picture[8, 16], render.HIGHLIGHT)  # the left edge of highlighted cell 1
    assert np.array_equal(picture[8, 24], render.MAP_COLOURS[render.BONUS])


def test_pixels_map_to_the_cells_under_them():
    assert render.position_of_pixel(0, 0, GRID) == 0
    assert render.position_of_pixel(255, 0, GRID) == GRID - 1
    assert render.position_of_pixel(70, 130, GRID) == 2 * GRID + 1
    assert render.position_of_pixel(999, 999, GRID) == TOTAL - 1


def test_each_position_is_produced_by_exactly_one_step(lanes):
    for lane in lanes:
        for position in range(TOTAL):
            step, offset = render.step_of_position(lane.traces, position)
            assert lane.traces[step].new_positions[offset] == position


def test_token_details_tell_the_story_of_every_position(lanes):
    for lane in lanes[1:]:
        tokens = lane.tokens
        for position in range(TOTAL):
            detail = token_detail(lane.traces, position)
            assert detail.token == tokens[position]
            accepted = [c for c in detail.candidates if c.accepted]
            if detail.from_draft:
                assert len(accepted) == 1 and accepted[0].token == detail.token
                assert detail.candidates[-1].accepted  # nothing is tried after an acceptance
            else:
                assert not accepted
            for cand in detail.candidates:
                assert cand.neighbour_mass.sum() <= DELTA + 1e-9
                if lane.lossless:
                    assert len(cand.neighbours) == 0


def test_relaxed_lane_credits_neighbours_somewhere(lanes):
    credited = [c for position in range(TOTAL) for c in token_detail(lanes[2].traces, position).candidates
                if len(c.neighbours)]
    assert credited, "LANTERN with delta 0.3 should move some neighbour mass onto some draft"


def test_first_position_of_a_step(lanes):
    lane = lanes[1]
    assert first_position(lane.traces[0]) == 0
    assert first_position(lane.traces[1]) == 1
    assert token_detail(lane.traces, TOTAL + 3) is None


def test_grids_that_do_not_divide_256_draw_whole_cells():
    grid = 24  # LlamaGen's 384-pixel models
    assert render.display_size(grid) == 264 and render.display_size(16) == 256
    image = np.random.default_rng(0).integers(0, 255, (4 * grid, 4 * grid, 3), dtype=np.uint8)
    picture = render.grey_out(image, render.known_cells(np.arange(30), grid))
    assert picture.shape == (288, 288, 3)  # 96 px shown 3x: each token is 12 x 12 pixels
    np.testing.assert_array_equal(picture[:12, :12], image[:4, :4].repeat(3, 0).repeat(3, 1))
    assert render.acceptance_map(np.zeros(grid * grid, np.int8), grid).shape == (264, 264, 3)
    assert render.position_of_pixel(287, 287, grid, 288) == grid * grid - 1
    assert render.position_of_pixel(12, 0, grid, 288) == 1


def test_accepted_drafts_the_target_finds_unlikely_are_marked(lanes):
    trace = next(t for lane in lanes[1:] for t in lane.traces if t.accepted_nodes)
    first = trace.accepted_nodes[0]
    position = trace.new_positions[0]  # where the first accepted draft went
    before = render.acceptance_codes([trace], TOTAL)
    unlikely = dataclasses.replace(trace, verdicts=[dataclasses.replace(v, token_prob=LOW_P / 2) if v.node == first
                                                    else v for v in trace.verdicts])
    after = render.acceptance_codes([unlikely], TOTAL)
    assert after[position] == render.UNLIKELY
    others = np.arange(TOTAL) != position
    assert np.array_equal(after[others], before[others])
    likely = dataclasses.replace(trace, verdicts=[dataclasses.replace(v, token_prob=1.0) for v in trace.verdicts])
    assert render.acceptance_codes([likely], TOTAL)[position] == render.DRAFTED
    cell = 64 // GRID
    picture = render.acceptance_map(after, GRID, size=64)
    row, col = divmod(position, GRID)
    assert np.array_equal(picture[row * cell + cell // 2, col * cell + cell // 2], render.MAP_COLOURS[render.UNLIKELY])
