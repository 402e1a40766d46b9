import dataclasses
import json
import math
import statistics

import numpy as np
import pytest
import torch

from engine.commands.bench import format_table, run_methods, run_repeats, summarise
from engine.commands.sweep import run_sweep, write_sweep
from engine.core.config import InvalidInput, SamplingConfig, TreeConfig
from engine.core.trace import StepTrace
from engine.drafters.eagle_net import EagleNet
from engine.evaluation.classifier import Classifier, ClassifierConfig
from engine.evaluation.quality import fid_interval, fid_proxy
from engine.evaluation.speed import pass_split
from engine.methods import MethodOptions
from tests.conftest import TINY_GPT


def tiny_classifier() -> Classifier:
    torch.manual_seed(0)
    return Classifier(ClassifierConfig(num_classes=3, widths=(32, 32))).eval()


def test_bench_interleaves_methods_and_reports_every_field(tiny_model):
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    sampling = SamplingConfig(temperature=0.0)
    options = MethodOptions(k=8, tree=TreeConfig(2, 2, 4))
    runs = run_methods(tiny_model, ["eagle2", "sjd"], sampling, 3, options)
    assert list(runs) == ["vanilla", "eagle2", "sjd"]
    assert [g.class_id for g in runs["sjd"]] == [0, 1, 2]
    results = summarise(tiny_model, runs, sampling, ["vanilla", "eagle2", "sjd"], tiny_classifier())
    for name in ("eagle2", "sjd"):
        assert results[name]["matches_vanilla_greedy"] is True
        assert results[name]["logp_gap"] == 0.0 and results[name]["logp_gap_ci"] == (0.0, 0.0)  # same tokens
        assert results[name]["mal"] >= 1.0
        assert 0.0 <= results[name]["mean_accept_prob"] <= 1.0
    vanilla = results["vanilla"]
    assert vanilla["mal"] == 1.0 and vanilla["matches_vanilla_greedy"] is None
    assert vanilla["target_forwards_per_image"] == TINY_GPT.num_image_tokens
    assert "eagle2" in format_table(results)
    json.dumps(results)  # everything is serialisable


def test_one_image_is_measured_without_a_covariance(tiny_model):
    """A single image has no feature covariance: no fid_proxy, shown as '-', everything else kept."""
    sampling = SamplingConfig(temperature=0.0)
    runs = run_methods(tiny_model, ["sjd"], sampling, 1, MethodOptions())
    results = summarise(tiny_model, runs, sampling, ["vanilla", "sjd"], tiny_classifier())
    assert results["sjd"]["fid_proxy"] is None and results["sjd"]["class_accuracy"] in (0.0, 1.0)
    row = format_table(results).splitlines()[-1].split()
    # fid_proxy and its interval, before the log p gap, its interval, the low-p share, its interval,
    # H and = vanilla
    assert row[0] == "sjd" and row[-8] == row[-7] == "-"
    assert json.loads(json.dumps(results))["sjd"]["fid_proxy_ci"] is None


def test_quality_progress_counts_every_image_scored(tiny_model):
    """The target scores every run (vanilla's too), the classifier only the requested methods."""
    import io

    from tqdm import tqdm

    sampling = SamplingConfig(temperature=0.0)
    runs = run_methods(tiny_model, ["sjd"], sampling, 2, MethodOptions())
    with tqdm(file=io.StringIO()) as progress:
        summarise(tiny_model, runs, sampling, ["sjd"], tiny_classifier(), progress=progress)
        assert progress.total == 2 + 2 + 2 and progress.n == progress.total


def test_the_fid_interval_holds_the_estimate_and_narrows_with_more_images():
    classifier = tiny_classifier()
    dim = classifier.reference_mean.shape[0]
    rng = np.random.default_rng(0)
    intervals = {}
    for n in (40, 640):
        features = rng.normal(0.5, 1.0, (n, dim))  # (n, F): shifted from the reference
        low, high = fid_interval(classifier, features)
        assert low <= fid_proxy(classifier, features) <= high
        intervals[n] = high - low
    assert intervals[640] < intervals[40] / 2  # about 1 / sqrt(n): a quarter, with room for chance


def test_sweep_writes_json_and_chart(tiny_model, tmp_path):
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    sweep = run_sweep(tiny_model, SamplingConfig(temperature=1.0), 2,
                      MethodOptions(tree=TreeConfig(2, 2, 4), draft_top_p=0.8), [0.0, 0.3], [4],
                      classifier=tiny_classifier())
    assert [(p["delta"], p["k"]) for p in sweep["points"]] == [(0.0, 4), (0.3, 4)]
    assert sweep["config"]["draft_top_p"] == 0.8  # the app's caption names the drafts' nucleus
    html = write_sweep(sweep, tmp_path / "sweep.json")
    assert html.exists() and json.loads((tmp_path / "sweep.json").read_text())["points"]


def test_repeats_give_median_min_max_and_a_step_cost_split(tiny_model):
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    sampling = SamplingConfig(temperature=1.0)
    options = MethodOptions(tree=TreeConfig(2, 2, 4))
    repeats = run_repeats(tiny_model, ["eagle2"], sampling, 2, options, repeats=3)
    assert len(repeats) == 3 and all(list(runs) == ["vanilla", "eagle2"] for runs in repeats)
    results = summarise(tiny_model, repeats[0], sampling, ["vanilla", "eagle2"], tiny_classifier(),
                        repeats=repeats)
    for r in results.values():
        assert r["repeats"] == 3 and len(r["speedup_per_repeat"]) == 3
        assert r["speedup_min"] <= r["speedup"] <= r["speedup_max"]
        assert r["speedup"] == statistics.median(r["speedup_per_repeat"])
        assert r["repeats_agree"] is True  # seeded: every repeat draws the same tokens
        assert math.isclose(r["speedup_per_mal"], r["speedup"] / r["mal"])
        step = r["ms_per_step"]
        assert set(step) == {"draft", "verify", "accept", "other", "wall"}
        assert min(step["draft"], step["verify"], step["accept"]) >= 0.0
        assert step["other"] >= 0.0  # the timed parts lie inside each image's wall time
        assert math.isclose(step["draft"] + step["verify"] + step["accept"] + step["other"], step["wall"])
    assert results["vanilla"]["speedup_per_repeat"] == [1.0, 1.0, 1.0]
    # Vanilla drafts nothing: no drafting part, and drafting free leaves its speed-up where it is.
    assert results["vanilla"]["ms_per_step"]["draft"] == 0.0 and results["vanilla"]["undrafted_speedup"] == 1.0
    one_token = results["vanilla"]["ms_per_step"]["wall"]
    for r in results.values():  # with drafting free: MAL over a pass's verifying, accepting and rest
        step = r["ms_per_step"]
        rest = step["verify"] + step["accept"] + step["other"]
        assert math.isclose(r["undrafted_speedup"], r["mal"] * one_token / rest)
    table = format_table(results)
    assert "sp/MAL" in table and "no-draft" in table and "other" in table and "[" in table
    json.dumps(results)


def _step(drafted: int, draft_ms: float) -> StepTrace:
    """A pass that drafted `drafted` tokens in `draft_ms`, verified in 2 ms and accepted in 1 ms."""
    tree = np.arange(drafted + 1)
    return StepTrace(0, tree, tree - 1, tree, np.ones(drafted + 1), [], [], [0], [0], [False], [],
                     draft_ms=draft_ms, verify_ms=2.0, accept_ms=1.0)


def test_a_pass_splits_into_drafting_only_where_something_was_drafted():
    drafting = pass_split([_step(3, 0.5), _step(0, 0.1)], wall_ms=10.0)
    assert {part: round(ms, 6) for part, ms in drafting.items()} == {"draft": 0.3, "verify": 2.0, "accept": 1.0,
                                                                    "other": 1.7, "wall": 5.0}
    # The loop still asks an empty drafter, and times it: that time is the rest of the loop's.
    undrafted = pass_split([_step(0, 0.5), _step(0, 0.1)], wall_ms=10.0)
    assert undrafted["draft"] == 0.0 and math.isclose(undrafted["other"], 2.0) and undrafted["wall"] == 5.0


def test_repeats_that_disagree_are_flagged_and_bad_counts_refused(tiny_model):
    sampling = SamplingConfig(temperature=0.0)
    options = MethodOptions()
    first = run_methods(tiny_model, ["vanilla"], sampling, 2, options)
    same, other = first["vanilla"]
    changed = dataclasses.replace(other, tokens=other.tokens + 1)
    results = summarise(tiny_model, first, sampling, ["vanilla"], tiny_classifier(),
                        repeats=[first, {"vanilla": [same, changed]}])
    assert results["vanilla"]["repeats_agree"] is False
    with pytest.raises(InvalidInput):
        run_repeats(tiny_model, ["vanilla"], sampling, 1, options, repeats=0)


def test_bench_command_line_takes_repeats():
    from engine.commands.cli import build_parser

    assert build_parser().parse_args(["bench"]).repeats == 3
    assert build_parser().parse_args(["bench", "--repeats", "5"]).repeats == 5


@pytest.mark.parametrize("argv, message", [
    (["bench", "--n-images", "0"], "n-images 0 is out of range; allowed: 1 or more"),
    (["bench", "--repeats", "-2"], "repeats -2 is out of range; allowed: 1 or more"),
    (["generate", "--threads", "0"], "threads 0 is out of range; allowed: 1 or more"),
    (["samples", "--per-class", "0"], "per class 0 is out of range; allowed: 1 or more"),
])
def test_the_command_line_refuses_a_bad_count_in_one_line(argv, message, capsys):
    from engine.commands.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_target_logp_is_the_guided_log_probability_of_each_token(tiny_model):
    import numpy as np

    from engine.core.sampling import combine_cfg
    from engine.evaluation.quality import low_p_shares, target_logp, target_token_logp

    target = tiny_model.target
    tokens = np.random.default_rng(0).integers(0, TINY_GPT.vocab_size, (2, TINY_GPT.num_image_tokens))
    token_logp = target_token_logp(target, tokens, np.array([0, 2]), cfg_scale=3.0)
    scores = target_logp(token_logp)
    with torch.no_grad():  # one image, one prefix at a time
        t = torch.from_numpy(tokens[1]).long()[None]
        rows = torch.stack([target.training_logits(torch.tensor([2]), t),
                            target.training_logits(torch.tensor([target.null_class]), t)])
        expected = combine_cfg(rows, 3.0).log_softmax(-1)[0, torch.arange(t.shape[1]), t[0]].mean()
    assert scores.shape == (2,) and math.isclose(scores[1], float(expected), rel_tol=1e-5)
    # The low-p share counts exactly the tokens below the threshold, image by image.
    threshold = float(np.exp(np.median(token_logp)))
    assert np.allclose(low_p_shares(token_logp, threshold), (token_logp < np.log(threshold)).mean(-1))
    assert np.all(low_p_shares(token_logp, 1.0) == 1.0) and np.all(low_p_shares(token_logp, 1e-300) == 0.0)


def test_quality_intervals():
    from engine.evaluation.quality import mean_interval, share_interval

    low, high = share_interval(8, 10)  # Wilson's interval, as tabulated
    assert math.isclose(low, 0.490, abs_tol=1e-3) and math.isclose(high, 0.943, abs_tol=1e-3)
    assert share_interval(0, 16)[0] == 0.0 and share_interval(16, 16)[1] == 1.0
    low, high = mean_interval([1.0, 2.0, 3.0])
    assert math.isclose((low + high) / 2, 2.0) and math.isclose(high - 2.0, 1.96 / math.sqrt(3))
