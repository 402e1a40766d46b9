"""Figures, shipped-file readers and the page's words, without a browser."""
import dataclasses
import json

import numpy as np
import pytest
import torch

from app.backend import shipped
from app.backend.lanes import run_to_end
from app.backend.request import CompareRequest
from app.views import plots, text
from app.views.detail import token_detail
from engine.core.config import SamplingConfig
from engine.drafters.eagle_net import EagleNet
from engine.methods import MethodOptions
from tests.conftest import TINY_GPT

SWEEP = {"points": [
    {"delta": 0.0, "k": 64, "speedup": 1.1, "class_accuracy": 0.9, "fid_proxy": 3.0, "mal": 1.3,
     "class_accuracy_ci": [0.7, 0.97], "logp_gap": 0.01, "logp_gap_ci": [-0.02, 0.04]},
    {"delta": 0.2, "k": 64, "speedup": 1.6, "class_accuracy": 0.85, "fid_proxy": 3.4, "mal": 1.9,
     "class_accuracy_ci": [0.64, 0.95], "logp_gap": -0.1, "logp_gap_ci": [-0.15, -0.05]},
    {"delta": 0.2, "k": 256, "speedup": 1.7, "class_accuracy": 0.84, "fid_proxy": None, "mal": 2.0,
     "class_accuracy_ci": [0.63, 0.94], "logp_gap": -0.2, "logp_gap_ci": [-0.3, -0.1]},
    {"delta": 0.4, "k": 64, "speedup": 2.0, "class_accuracy": 0.8, "fid_proxy": 4.1, "mal": 2.4,
     "class_accuracy_ci": [0.58, 0.92], "logp_gap": -0.3, "logp_gap_ci": [-0.4, -0.2]},
], "config": {"n_images": 24, "temperature": 1.0, "cfg": 4.0, "seed": 100, "draft_top_p": 0.8}}


@pytest.fixture
def lanes(tiny_model):
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    return run_to_end(tiny_model, ["vanilla", "eagle2", "lantern"], SamplingConfig(temperature=1.0, seed=4), 1,
                      MethodOptions(k=8, delta=0.3))


def test_accepted_length_chart_has_one_line_per_method(lanes):
    series = [(lane.title, [t.accepted_length for t in lane.traces[1:]]) for lane in lanes]
    fig = plots.accepted_length_figure(series, step=3)
    assert [trace.name.split(" (")[0] for trace in fig.data] == ["Vanilla", "EAGLE-2", "LANTERN"]
    assert list(fig.data[0].y) == [1] * (TINY_GPT.num_image_tokens - 1)
    assert sum(fig.data[2].y) == TINY_GPT.num_image_tokens - 1


@pytest.mark.parametrize("longest, dtick", [(1, 1), (8, 1), (17, 3), (40, 5)])
def test_accepted_length_ticks_stay_few_and_whole(longest, dtick):
    fig = plots.accepted_length_figure([("LANTERN", [1, longest, 2] * 90)])
    assert fig.layout.yaxis.dtick == dtick and longest / dtick <= plots.MAX_TICKS
    assert fig.layout.xaxis.nticks == plots.MAX_TICKS


def test_tree_figure_colours_nodes_by_verdict(lanes):
    trace = max(lanes[1].traces[1:], key=lambda t: len(t.tree_tokens))
    fig = plots.tree_figure(trace, highlight=[1])
    nodes = fig.data[1]
    assert len(nodes.x) == len(trace.tree_tokens)
    colours = list(nodes.marker.color)
    for verdict in trace.verdicts:
        assert colours[verdict.node] == (plots.ACCEPTED if verdict.accepted else plots.REJECTED)
    untested = set(range(1, len(trace.tree_tokens))) - {v.node for v in trace.verdicts}
    assert all(colours[node] == plots.UNTESTED for node in untested)


def test_a_deep_draft_chain_keeps_few_depth_ticks_and_its_codes_in_the_hover(lanes):
    trace = lanes[0].traces[1]
    for depth, labelled, dtick in ((4, True, 1), (16, False, 2)):
        chain = dataclasses.replace(trace, tree_tokens=np.arange(depth + 1), tree_parents=np.arange(-1, depth),
                                    tree_depths=np.arange(depth + 1), tree_q=np.ones(depth + 1), verdicts=[])
        fig = plots.tree_figure(chain)
        assert fig.layout.xaxis.dtick == dtick and (fig.data[1].text is not None) == labelled
        assert len(fig.data[1].hovertext) == depth + 1


def test_tree_layout_separates_nodes():
    parents, depths = np.array([-1, 0, 0, 1, 1, 2]), np.array([0, 1, 1, 2, 2, 2])
    xy = plots.tree_layout(parents, depths)
    assert len({tuple(p) for p in xy}) == len(parents)
    assert list(xy[:, 0]) == list(depths)


def test_latent_figure_marks_drafts_neighbours_and_set_a(lanes):
    coords = np.random.default_rng(0).normal(size=(TINY_GPT.vocab_size, 2))
    detail = next(d for d in (token_detail(lanes[2].traces, p) for p in range(16))
                  if any(len(c.neighbours) for c in d.candidates))
    fig = plots.latent_figure(coords, "test", detail, neighbours=np.arange(8))
    names = [trace.name for trace in fig.data]
    assert names[0] == "codebook" and len(fig.data[0].x) == TINY_GPT.vocab_size
    assert any(name.startswith("A of") for name in names)
    assert any(name.startswith("8 nearest") for name in names)
    assert fig.data[-1].name.startswith("kept") and fig.data[-1].x[0] == coords[detail.token, 0]


def test_sweep_file_renders_with_intervals_and_the_current_setting_marked(tmp_path):
    path = shipped.sweep_path("lantern_static", greedy=False, assets=tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps(SWEEP))
    points, config = shipped.load_sweep("lantern_static", greedy=False, assets=tmp_path)
    assert len(points) == 4 and config["n_images"] == 24 and points[2]["fid_proxy"] is None
    assert shipped.load_sweep("lantern_static", greedy=True, assets=tmp_path) is None  # the other mode's file
    fig = plots.tradeoff_figure(points, delta=0.21, k=200)
    marked = [trace for trace in fig.data if trace.name and trace.name.startswith("measured point nearest")]
    assert len(marked) == 2  # on both panels
    # The legend tells the measured point from the sliders' own values.
    assert marked[0].name.endswith("(sliders: 0.21, 200)") and f"k {SWEEP['points'][2]['k']}" in marked[0].name
    assert marked[0].x[0] == 1.7 and marked[0].y[0] == 0.84 and marked[1].y[0] == -0.2
    accuracy = fig.data[0]
    assert list(accuracy.error_y.array) == pytest.approx([0.07, 0.1, 0.1, 0.12])
    assert list(accuracy.error_y.arrayminus) == pytest.approx([0.2, 0.21, 0.21, 0.22])


def test_the_ring_says_when_it_marks_the_sliders_own_setting():
    point = {"delta": 0.2, "k": 256}
    assert plots.ringed_label(point, 0.2, 256) == "your setting (delta 0.2, k 256), as measured"
    assert "nearest your setting: delta 0.2, k 256 (sliders: 0.5, 256)" in plots.ringed_label(point, 0.5, 256)


def test_no_sweep_shipped_and_bad_sweeps(tmp_path):
    assert shipped.load_sweep("lantern", greedy=True, assets=tmp_path) is None
    broken = {"points": [{"delta": 0.1, "k": 8, "speedup": 1.2}]}
    with pytest.raises(shipped.SweepFormatError, match="class_accuracy"):
        shipped.parse_sweep(broken)
    with pytest.raises(shipped.SweepFormatError):
        shipped.parse_sweep({"points": []})


def test_projection_is_used_only_for_the_codebook_it_was_made_from(tmp_path):
    weights = np.random.default_rng(1).normal(size=(32, 8)).astype(np.float32)
    fallback = shipped.load_projection(weights, tmp_path)
    assert fallback.name.startswith("PCA") and fallback.coords.shape == (32, 2)
    coords = np.arange(64, dtype=np.float32).reshape(32, 2)
    np.save(tmp_path / shipped.UMAP_FILE, coords)
    (tmp_path / shipped.UMAP_META).write_text(json.dumps({"codebook_sha256": shipped.codebook_fingerprint(weights)}))
    loaded = shipped.load_projection(weights, tmp_path)
    assert loaded.name == "UMAP" and np.array_equal(loaded.coords, coords)
    assert shipped.load_projection(weights + 1, tmp_path).name.startswith("PCA")


def test_words_quote_the_live_numbers(lanes):
    lesson = text.how_it_works(lanes, CompareRequest(delta=0.3, k=8), TINY_GPT.vocab_size)
    entropy = np.mean([e for lane in lanes for t in lane.traces for e in t.entropy_bits])
    assert f"{entropy:.2f} bits" in lesson and "delta = 0.3, k = 8" in lesson
    assert "| LANTERN (relaxed) |" in lesson and "| EAGLE-2 (lossless) |" in lesson
    assert "Its entropy is typically" in text.how_it_works(None, CompareRequest(), 1024)
    from app.backend.lanes import summary

    row = summary(lanes)[2]
    counters = text.counters_html(row)
    assert f"{row['mean_accepted_length']:.2f}" in counters and f"{row['target_passes']}" in counters


def test_inspector_words_list_every_try(lanes):
    detail = next(d for d in (token_detail(lanes[2].traces, p) for p in range(1, 16)) if d.candidates)
    words = text.detail_markdown("LANTERN", detail, TINY_GPT.grid_size, np.arange(8), CompareRequest(delta=0.3, k=8))
    assert f"kept code **{detail.token}**" in words
    assert words.count("| ") >= len(detail.candidates) + 2
    assert text.detail_markdown("x", None, 4, None, CompareRequest()).startswith("Click")


def test_the_shipped_projection_belongs_to_the_shipped_tokenizer():
    from engine.loading.embedded import ASSETS, TOKENIZER_FILE

    if not (ASSETS / shipped.UMAP_FILE).exists() or not (ASSETS / TOKENIZER_FILE).exists():
        pytest.skip("no projection or tokenizer shipped in assets/")
    from engine.loading.embedded import load_embedded_tokenizer

    weights = load_embedded_tokenizer().quantize.embedding.weight.detach().float().numpy()
    projection = shipped.load_projection(weights)
    assert projection.name == "UMAP", "rerun python -m tools.precompute_umap after retraining the tokenizer"
    assert np.isfinite(projection.coords).all()


def test_every_method_is_described_once_from_the_registry():
    from engine.methods import METHODS

    lesson = text.methods_markdown()
    for method in METHODS.values():
        assert method.summary and f"**{method.title}**" in lesson and method.summary in lesson


def test_tradeoff_chart_follows_the_mode_and_the_lantern_panel(tmp_path, monkeypatch):
    from app.page import handlers

    path = shipped.sweep_path("lantern_static", greedy=False, assets=tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps(SWEEP))
    monkeypatch.setattr(handlers, "load_sweep", lambda method, greedy: shipped.load_sweep(method, greedy, tmp_path))
    panels = ["vanilla", "eagle2", "lantern"]
    fig, caption = handlers.sweep_chart(0.2, 64, 1.0, panels)  # sampling: the LANTERN panel runs its static tree
    assert fig is not None and "LANTERN (static tree), sampling" in caption and "24 images" in caption
    assert "drafts from the top-p 0.8 nucleus" in caption  # what the sweep's drafts were drawn from
    fig, caption = handlers.sweep_chart(0.2, 64, 0.0, panels)  # greedy: no sweep of the dynamic tree here
    assert fig is None and "assets/sweeps/lantern_greedy.json" in caption
    fig, caption = handlers.sweep_chart(0.2, 64, 0.0, ["vanilla", "eagle2", "sjd"])
    assert fig is None and "No panel runs a method with delta and k" in caption
    # The page hides a chart it has nothing for, instead of an empty frame with a placeholder icon.
    chart, _ = handlers.tradeoff(0.2, 64, 0.0, ["vanilla", "eagle2", "sjd"])
    assert chart["visible"] is False and chart["value"] is None
    chart, _ = handlers.tradeoff(0.2, 64, 1.0, panels)
    assert chart["visible"] is True and chart["value"] is not None


def test_panels_follow_the_mode_both_ways():
    from app.page import handlers

    assert handlers.follow_mode(0.7, ["vanilla", "eagle2", "lantern"]) == ["vanilla", "eagle2", "lantern_static"]
    assert handlers.follow_mode(0.0, ["vanilla", "eagle2", "lantern_static"]) == ["vanilla", "eagle2", "lantern"]
    assert CompareRequest(temperature=1.0, methods=("lantern",)).panel_methods() == ["lantern_static"]
    assert CompareRequest(temperature=0.0, methods=("lantern_static",)).panel_methods() == ["lantern_static"]


FRONTIER = {"vanilla": {"class_accuracy_ci": [0.8, 0.95]},
            "series": [{"label": "LANTERN", "knob": "delta",
                        "points": [{"delta": 0.1, "speedup": 1.4, "mal": 1.8, "class_accuracy": 0.9,
                                    "class_accuracy_ci": [0.8, 0.96]}]}]}


def test_titles_sit_under_the_toolbar_not_beside_it(lanes):
    """A touch screen shows Plotly's toolbar at all times over a figure's top right corner: every
    figure's title is placed under the toolbar's row, and the axes under the title."""
    series = [(lane.title, [t.accepted_length for t in lane.traces[1:]]) for lane in lanes]
    coords = np.random.default_rng(0).normal(size=(TINY_GPT.vocab_size, 2))
    tree = max(lanes[1].traces[1:], key=lambda t: len(t.tree_tokens))
    figures = [plots.accepted_length_figure(series), plots.latent_figure(coords, "PCA"), plots.tree_figure(tree),
               plots.tradeoff_figure(SWEEP["points"], 0.2, 64, "LANTERN, sampling<br><sup>size: k</sup>"),
               plots.frontier_figure(FRONTIER, "Relaxed rules, sampling")]
    for fig in figures:
        title, lines = fig.layout.title, fig.layout.title.text.count("<br>") + 1
        assert (title.yref, title.y, title.yanchor) == ("container", 1, "top"), title.text
        # Plotly lifts a title of several lines: its first line still clears the toolbar's row ...
        assert title.pad.t - (lines - 1) * plots.TITLE_LIFT >= plots.MODEBAR_HEIGHT, title.text
        # ... and its last one the axes.
        assert fig.layout.margin.t >= plots.MODEBAR_HEIGHT + lines * plots.TITLE_LINE, title.text
        # The toolbar keeps to one row on a phone's chart: no selection tools, for charts that select nothing.
        assert {"select2d", "lasso2d"} <= set(fig.layout.modebar.remove)


def test_a_draft_trees_deepest_codes_fit_beside_their_nodes(lanes):
    trace = lanes[0].traces[1]
    tokens = np.array([7, 4095, 16383, 12, 16000])  # five digits at the deepest level: LlamaGen's codebook
    chain = dataclasses.replace(trace, tree_tokens=tokens, tree_parents=np.arange(-1, 4), tree_depths=np.arange(5),
                                tree_q=np.ones(5), verdicts=[])
    fig = plots.tree_figure(chain)
    nodes = fig.data[1]
    # The deepest node's code is written right of it, past the axes: drawn there, in a margin that holds it.
    assert nodes.textposition == "middle right" and nodes.cliponaxis is False
    assert fig.layout.margin.r >= plots.label_reach(5) >= plots.NODE_SIZE / 2 + 5 * 0.6 * plots.NODE_LABEL_SIZE
