"""The frontier of the relaxed rules: measured along each rule's knob, read back, charted, and the
fastest setting whose quality stays inside vanilla's intervals picked from it."""
import json

import numpy as np
import pytest

from app.backend import shipped
from app.backend.request import ALTERNATIVE_RELAXED, RELAXED_DEFAULTS, CompareRequest
from app.views import frontier_view, plots, text
from engine.commands.frontier import SERIES, Series, run_frontier, series_for
from engine.core.config import InvalidInput, SamplingConfig
from engine.evaluation.quality import fastest_inside_vanilla, inside_vanilla
from engine.methods import MethodOptions, get_method
from engine.model.matmul import cpu_model
from tests.test_bench import tiny_classifier

SAMPLING = SamplingConfig(temperature=1.0, seed=5)


def test_series_suit_the_mode_and_every_setting_is_checked_first():
    assert [s.label for s in series_for(SAMPLING)] == [s.label for s in SERIES]
    greedy = [s.label for s in series_for(SamplingConfig(temperature=0.0))]
    assert greedy and not any("top-p" in label for label in greedy)  # greedy drafts are never sampled
    with pytest.raises(InvalidInput, match="unknown frontier series"):
        series_for(SAMPLING, ["LANTERN (imaginary)"])
    bad = Series("too strong", "cool_sd", "cool_w", (50.0,))
    with pytest.raises(InvalidInput, match="COOL-SD w 50"):
        bad.options(MethodOptions(), 50.0)


def test_a_frontier_is_measured_point_by_point_and_read_back(tiny_eagle, tmp_path):
    series = [Series("COOL-SD", "cool_sd", "cool_w", (1.0, 4.0)),
              Series("LANTERN (paper)", "lantern_static", "delta", (0.0, 0.3), {"lantern_variant": "paper", "k": 8})]
    frontier = run_frontier(tiny_eagle, SAMPLING, 2, MethodOptions(k=8), series, classifier=tiny_classifier(),
                            speed_images=1)
    assert [s["label"] for s in frontier["series"]] == ["COOL-SD", "LANTERN (paper)"]
    assert frontier["config"]["n_images"] == 2 and frontier["config"]["speed_images"] == 1
    assert frontier["config"]["cpu"] == cpu_model()  # the machine that timed it, which the caption names
    cool = frontier["series"][0]["points"]
    assert [p["cool_w"] for p in cool] == [1.0, 4.0]
    assert all(key in p for p in cool for key in ("speedup", "mal", "class_accuracy", "low_p_share", "low_p_share_ci"))
    assert cool[1]["mal"] >= cool[0]["mal"]  # a larger w accepts at least as much on the same drafts
    assert frontier["vanilla"]["low_p_share"] is not None and frontier["vanilla"]["speedup"] == 1.0
    path = shipped.frontier_path(greedy=False, assets=tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps(frontier))
    assert shipped.load_frontier(greedy=False, assets=tmp_path)["series"][1]["knob"] == "delta"
    assert shipped.load_frontier(greedy=True, assets=tmp_path) is None
    figure, caption = frontier_view.frontier_chart(1.0, tmp_path)
    assert figure is not None and "2 images" in caption
    best = fastest_inside_vanilla(frontier)  # which series is fastest depends on the timing
    assert best is None or best[0]["label"] in caption
    menu = figure.layout.updatemenus[0]
    assert [b.label for b in menu.buttons][0] == "class accuracy" and len(menu.buttons) >= 3
    traces = len(figure.data) // len(menu.buttons)
    assert traces == 2 and sum(trace.visible for trace in figure.data) == 2
    none, note = frontier_view.frontier_chart(0.0, tmp_path)
    assert none is None and "No greedy frontier" in note


def test_a_frontier_times_no_more_images_than_it_decodes(tiny_eagle):
    series = [Series("COOL-SD", "cool_sd", "cool_w", (1.0,))]
    with pytest.raises(InvalidInput, match="speed-images 3 is out of range; allowed: 1 to n-images \\(2\\)"):
        run_frontier(tiny_eagle, SAMPLING, 2, MethodOptions(k=8), series, speed_images=3)


def test_the_fastest_setting_inside_vanillas_intervals():
    vanilla = {"class_accuracy_ci": (0.8, 0.95), "fid_proxy_ci": (5.0, 9.0), "low_p_share_ci": (0.005, 0.02)}
    good = {"cool_w": 2.0, "speedup": 1.4, "class_accuracy": 0.9, "fid_proxy": 7.0, "low_p_share": 0.01}
    faster_but_speckled = {"cool_w": 8.0, "speedup": 2.0, "class_accuracy": 0.88, "fid_proxy": 8.0,
                           "low_p_share": 0.2}
    slow = {"cool_w": 1.0, "speedup": 0.9, "class_accuracy": 0.9, "fid_proxy": 6.0, "low_p_share": 0.01}
    assert inside_vanilla(good, vanilla) and not inside_vanilla(faster_but_speckled, vanilla)
    frontier = {"vanilla": vanilla, "series": [{"label": "COOL-SD", "knob": "cool_w",
                                                "points": [slow, good, faster_but_speckled]}]}
    series, point = fastest_inside_vanilla(frontier)
    assert series["label"] == "COOL-SD" and point is good
    assert fastest_inside_vanilla({"vanilla": vanilla, "series": [{"label": "x", "knob": "cool_w",
                                                                   "points": [faster_but_speckled]}]}) is None


def test_a_broken_frontier_file_is_named(tmp_path):
    path = shipped.frontier_path(greedy=False, assets=tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps({"series": [], "vanilla": {}}))
    with pytest.raises(shipped.SweepFormatError, match="no 'series'"):
        shipped.load_frontier(greedy=False, assets=tmp_path)
    figure, note = frontier_view.frontier_chart(1.0, tmp_path)
    assert figure is None and "could not be read" in note


def test_chain_costs_model_each_depth_from_measured_parts(tiny_eagle):
    from engine.commands.chain_cost import acceptance_by_depth, chain_costs, expected_tokens

    costs = chain_costs(tiny_eagle, "cool_sd", [1, 3], SAMPLING, 1, MethodOptions(cool_w=3.0))
    assert len(costs["acceptance_by_depth"]) == 3 and all(0 <= a <= 1 for a in costs["acceptance_by_depth"])
    assert [row["depth"] for row in costs["depths"]] == [1, 2, 3]
    assert {"measured_speedup", "measured_mal"} <= set(costs["depths"][0])
    assert "measured_speedup" not in costs["depths"][1]
    assert costs["best_depth"] in (1, 2, 3) and costs["draft_call_ms"] > 0 and costs["one_token_pass_ms"] > 0
    assert expected_tokens(np.array([0.5, 0.5]), 2) == 1.75 and expected_tokens(np.array([1.0, 0.0]), 2) == 2.0
    with pytest.raises(InvalidInput, match="no static tree"):
        chain_costs(tiny_eagle, "eagle2", [2], SAMPLING, 1, MethodOptions())
    assert acceptance_by_depth([]).shape == (0,)


def test_the_relaxed_alternative_starts_on_the_shipped_frontiers_fastest_point_inside_vanilla():
    series, point = fastest_inside_vanilla(shipped.load_frontier(greedy=False))
    request = CompareRequest()
    assert not request.sampling().greedy  # the page opens in the frontier's mode
    assert ALTERNATIVE_RELAXED == series["method"]
    chosen = {**series["fixed"], series["knob"]: point[series["knob"]]}
    assert {name: getattr(request.options(), name) for name in chosen} == chosen
    assert RELAXED_DEFAULTS == chosen
    assert f"When to reach for {get_method(series['method']).title}" in text.relaxed_alternative_sentence()


def _pass(depth: int, accepted: int, draft_ms: float, verify_ms: float, accept_ms: float):
    """A synthetic pass over a chain of `depth` drafts, of which the first `accepted` were kept."""
    from engine.core.trace import StepTrace

    nodes = np.arange(depth + 1)
    return StepTrace(0, nodes, nodes - 1, nodes, np.ones(depth + 1), [], list(range(1, accepted + 1)),
                     [0] * (accepted + 1), [0] * (accepted + 1), [False] * (accepted + 1), [],
                     draft_ms=draft_ms, verify_ms=verify_ms, accept_ms=accept_ms)


# Accepted drafts of ten passes over a 3-deep chain: 8 of 10 keep the first draft, 4 of those 8 the
# second and 2 of those 4 the third, so a_d = (0.8, 0.5, 0.5).
ACCEPTED = [0, 0, 1, 1, 1, 1, 2, 2, 3, 3]


def _fake_run_methods(model, methods, sampling, n_images, options, progress=None):
    """One image per method with hand-set costs: a drafter call 0.1 ms, verifying n nodes 2 + 0.5 n ms,
    accepting 1 ms, and 0.5 ms of the rest a pass; vanilla 15 passes of 4 ms."""
    from engine.generation import Generation

    depth = len(options.static_tree)
    prefill = _pass(0, 0, 0.0, 0.0, 0.0)
    passes = [_pass(depth, min(a, depth), 0.1 * depth, 2 + 0.5 * (depth + 1), 1.0) for a in ACCEPTED]
    method_ms = len(passes) * (0.1 * depth + 2 + 0.5 * (depth + 1) + 1.0 + 0.5)
    vanilla = [_pass(0, 0, 0.0, 2.5, 1.0) for _ in range(15)]
    tokens = np.zeros(16, np.int64)
    return {"vanilla": [Generation("vanilla", 0, tokens, [prefill, *vanilla], 15 * 4.0)],
            methods[0]: [Generation(methods[0], 0, tokens, [prefill, *passes], method_ms)]}


def test_chain_costs_recover_the_hand_set_costs_and_pick_the_best_depth(monkeypatch):
    from engine.commands import chain_cost

    monkeypatch.setattr(chain_cost, "run_methods", _fake_run_methods)
    costs = chain_cost.chain_costs(None, "cool_sd", [3, 1], SAMPLING, 1, MethodOptions())
    assert costs["acceptance_by_depth"] == pytest.approx([0.8, 0.5, 0.5])
    assert costs["verify_ms"] == pytest.approx([2.0, 0.5])  # a + b n over chains of 2 and 4 nodes
    assert costs["draft_call_ms"] == pytest.approx(0.1)
    assert costs["rest_ms"] == pytest.approx(1.5)  # accepting 1 ms + the rest 0.5 ms
    assert costs["one_token_pass_ms"] == pytest.approx(4.0)
    # By hand: E(L) = 1.8, 2.2, 2.4 tokens for 0.6 L + 4 ms = 4.6, 5.2, 5.8 ms a pass, against 4 ms a
    # token: 1.565, 1.692, 1.655; depth 2 is best although it was never run.
    rows = costs["depths"]
    assert [row["expected_tokens"] for row in rows] == pytest.approx([1.8, 2.2, 2.4])
    assert [row["pass_ms"] for row in rows] == pytest.approx([4.6, 5.2, 5.8])
    assert [row["modelled_speedup"] for row in rows] == pytest.approx([7.2 / 4.6, 8.8 / 5.2, 9.6 / 5.8])
    assert costs["best_depth"] == 2
    # Measured: vanilla's 60 ms over 46 ms (depth 1) and 58 ms (depth 3); MAL 1.8 and 2.4.
    assert rows[0]["measured_speedup"] == pytest.approx(60 / 46) and rows[0]["measured_mal"] == pytest.approx(1.8)
    assert rows[2]["measured_speedup"] == pytest.approx(60 / 58) and rows[2]["measured_mal"] == pytest.approx(2.4)
    assert "measured_speedup" not in rows[1]


def test_the_verify_cost_fit_recovers_a_known_line():
    from engine.commands.chain_cost import fit_verify_cost

    steps = [_pass(n - 1, 0, 0.0, 3.0 + 0.25 * n, 0.0) for n in (1, 2, 5, 9, 9)]
    a, b = fit_verify_cost(steps)
    assert a == pytest.approx(3.0) and b == pytest.approx(0.25)
    # One tree size gives no slope: the mean cost, flat.
    assert fit_verify_cost([_pass(2, 0, 0.0, ms, 0.0) for ms in (4.0, 6.0)]) == pytest.approx((5.0, 0.0))


def test_a_frontier_grows_by_series_of_the_same_images_only():
    from engine.commands.frontier import add_series

    def frontier(labels, seed=0, accuracy=0.9, cpu=None):
        config = {"n_images": 128, "speed_images": 16, "temperature": 1.0, "cfg": 4.0, "seed": seed}
        if cpu:
            config["cpu"] = cpu
        return {"config": config, "vanilla": {"class_accuracy": accuracy, "fid_proxy_ci": [9.0, 17.5]},
                "series": [{"label": label, "points": [label]} for label in labels]}

    grown = add_series(frontier(["a", "b"]), frontier(["b", "c"], accuracy=0.9 + 1e-12, cpu="AMD EPYC"))
    assert [s["label"] for s in grown["series"]] == ["a", "b", "c"]
    assert [s.get("cpu") for s in grown["series"]] == [None, "AMD EPYC", "AMD EPYC"]
    assert "cpu" not in grown["config"]  # the first run's CPU stays unnamed
    with pytest.raises(InvalidInput, match="seed"):
        add_series(frontier(["a"]), frontier(["c"], seed=1))
    with pytest.raises(InvalidInput, match="vanilla's quality differs and the new run names no CPU"):
        add_series(frontier(["a"]), frontier(["c"], accuracy=0.8))


def test_a_series_from_another_cpu_is_judged_against_that_cpus_vanilla(tmp_path):
    from engine.commands.frontier import add_series

    config = {"n_images": 128, "speed_images": 16, "temperature": 1.0, "cfg": 4.0, "seed": 0,
              "tree": {"depth": 16}}
    here = {"class_accuracy": 0.92, "class_accuracy_ci": [0.86, 0.96]}
    there = {"class_accuracy": 0.95, "class_accuracy_ci": [0.90, 0.97]}
    point = {"row_window": 8.0, "speedup": 2.0, "mal": 1.9, "class_accuracy": 0.88}  # inside here's interval only
    existing = {"config": config, "vanilla": here,
                "series": [{"label": "COOL-SD", "knob": "cool_w", "points": [{**point, "cool_w": 4.0,
                                                                               "speedup": 1.4}]}]}
    new = {"config": {**config, "cpu": "AMD EPYC", "tree": {"depth": 6}}, "vanilla": there,
           "series": [{"label": "ZipAR", "knob": "row_window", "points": [point]}]}
    grown = add_series(existing, new)
    added = grown["series"][1]
    assert added["vanilla"] == there and added["cpu"] == "AMD EPYC" and added["tree"] == {"depth": 6}
    assert "vanilla" not in grown["series"][0] and grown["vanilla"] == here
    # ZipAR's 0.88 is inside the first CPU's interval but not its own: the faster point does not count.
    series, best = fastest_inside_vanilla(grown)
    assert series["label"] == "COOL-SD" and best["speedup"] == 1.4
    figure = plots.frontier_figure(grown, "frontier")
    dashed = [shape for shape in figure.layout.shapes if shape.line.dash == "dash"]
    assert [(shape.y0, shape.y1) for shape in dashed] == [(0.90, 0.97)]
    assert [trace.line.dash for trace in figure.data] == ["solid", "dash"]
    path = shipped.frontier_path(greedy=False, assets=tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps(grown))
    _, caption = frontier_view.frontier_chart(1.0, tmp_path)
    assert "Dashed: ZipAR, run on AMD EPYC" in caption
