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
    produced = 3 * (TINY_GPT.num_image_tokens - 1)  # tokens after the three prefills
    for name in ("eagle2", "sjd"):
        assert results[name]["matches_vanilla_greedy"] is True
        assert results[name]["logp_gap"] == 0.0 and results[name]["logp_gap_ci"] == (0.0, 0.0)  # same tokens
        # Every pass after a prefill yields its accepted drafts and one token of its own, so MAL is
        # the tokens over the passes, and (greedy: each verdict 0 or 1) the accept rate is the
        # accepted drafts, tokens less passes, over the drafts tested.
        passes = sum(len(g.traces) - 1 for g in runs[name])
        tested = sum(len(t.verdicts) for g in runs[name] for t in g.traces)
        assert math.isclose(results[name]["mal"], produced / passes)
        assert math.isclose(results[name]["mean_accept_prob"], (produced - passes) / tested)
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


def _pass(drafted: int, kept: int) -> StepTrace:
    """A pass over a chain of `drafted` drafts that kept `kept` of them, with hand-set timers: drafting
    1 ms (0.5 ms of asking an empty drafter where nothing was drafted), verifying 5 ms, accepting 2 ms."""
    tree = np.arange(drafted + 1)
    return StepTrace(0, tree, tree - 1, tree, np.ones(drafted + 1), [], list(range(1, kept + 1)),
                     [0] * (kept + 1), [0] * (kept + 1), [False] * (kept + 1), [1.0],
                     draft_ms=1.0 if drafted else 0.5, verify_ms=5.0, accept_ms=2.0)


def _retimed(gen, wall_ms: float):
    """`gen` with its tokens kept, its passes and wall time replaced by hand-set ones: vanilla 8
    passes of one token, any other method 4 passes of 3 drafts keeping 1 (MAL 2)."""
    passes = [_pass(0, 0)] * 8 if gen.method == "vanilla" else [_pass(3, 1)] * 4
    return dataclasses.replace(gen, traces=[_pass(0, 0), *passes], wall_ms=wall_ms)


def test_repeats_give_median_min_max_and_a_step_cost_split(tiny_model):
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    sampling = SamplingConfig(temperature=1.0)
    options = MethodOptions(tree=TreeConfig(2, 2, 4))
    repeats = run_repeats(tiny_model, ["eagle2"], sampling, 2, options, repeats=3)
    assert len(repeats) == 3 and all(list(runs) == ["vanilla", "eagle2"] for runs in repeats)
    measured = summarise(tiny_model, repeats[0], sampling, ["vanilla", "eagle2"], tiny_classifier(),
                         repeats=repeats)
    for r in measured.values():
        assert r["repeats"] == 3 and r["repeats_agree"] is True  # seeded: every repeat draws the same tokens
        assert min(r["ms_per_step"][part] for part in ("draft", "verify", "accept", "other")) >= 0.0
    # The same tokens with hand-set times. Vanilla takes 80 ms an image; eagle2 40 and 40 ms, then 20
    # and 80, then 50 and 40: per-image ratios (2, 2), (4, 1), (1.6, 2), medians 2, 2.5, 1.8.
    method_ms = [(40.0, 40.0), (20.0, 80.0), (50.0, 40.0)]
    timed = [{"vanilla": [_retimed(g, 80.0) for g in runs["vanilla"]],
              "eagle2": [_retimed(g, ms) for g, ms in zip(runs["eagle2"], times)]}
             for runs, times in zip(repeats, method_ms)]
    results = summarise(tiny_model, timed[0], sampling, ["vanilla", "eagle2"], tiny_classifier(), repeats=timed)
    eagle, vanilla = results["eagle2"], results["vanilla"]
    assert eagle["speedup_per_repeat"] == pytest.approx([2.0, 2.5, 1.8])
    assert (eagle["speedup"], eagle["speedup_min"], eagle["speedup_max"]) == pytest.approx((2.0, 1.8, 2.5))
    assert eagle["mal"] == 2.0 and eagle["speedup_per_mal"] == pytest.approx(1.0)
    assert eagle["ms_per_image"] == pytest.approx(45.0)  # the median of the repeats' means 40, 50, 45
    # 270 ms over 24 passes: 11.25 ms a pass, of which 1 + 5 + 2 timed, 3.25 the rest.
    assert eagle["ms_per_step"] == pytest.approx({"draft": 1.0, "verify": 5.0, "accept": 2.0, "other": 3.25,
                                                  "wall": 11.25})
    # Vanilla drafts nothing: its 0.5 ms of asking is the rest's, 10 ms a pass, 3 ms of it the rest.
    assert vanilla["ms_per_step"] == pytest.approx({"draft": 0.0, "verify": 5.0, "accept": 2.0, "other": 3.0,
                                                    "wall": 10.0})
    assert vanilla["speedup_per_repeat"] == [1.0, 1.0, 1.0] and vanilla["undrafted_speedup"] == 1.0
    # With drafting free: 2 tokens for 10.25 ms against vanilla's 10 ms a token.
    assert eagle["undrafted_speedup"] == pytest.approx(2 * 10.0 / 10.25)
    table = format_table(results)
    assert "sp/MAL" in table and "no-draft" in table and "other" in table and "[1.80-2.50]" in table
    json.dumps(results)


def test_the_speedup_is_the_median_of_per_image_ratios():
    from engine.commands.bench import speedup
    from engine.evaluation.speed import median_speedup

    # Ratios 100/50, 300/200, 200/40 = 2, 1.5, 5: median 2. The ratio of the medians (200/50 = 4)
    # or of the means (600/290) would differ.
    pairs = [(100.0, 50.0), (300.0, 200.0), (200.0, 40.0)]
    assert median_speedup(pairs) == pytest.approx(2.0)
    assert median_speedup([(100.0, 50.0), (300.0, 100.0)]) == pytest.approx(2.5)  # even count: the mean of 2 and 3

    def image(ms: float):
        from engine.generation import Generation

        return Generation("x", 0, np.zeros(1, np.int64), [], ms)

    assert speedup([image(b) for b, _ in pairs], [image(m) for _, m in pairs]) == pytest.approx(2.0)


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


def test_a_method_keeping_a_less_likely_token_has_a_negative_logp_gap(tiny_model):
    """Each image's last token swapped for the one the target finds least likely there: the prefix
    is unchanged, so only the last position's log p drops, by a known amount per image."""
    from engine.core.sampling import combine_cfg

    sampling = SamplingConfig(temperature=0.0)
    runs = run_methods(tiny_model, ["vanilla"], sampling, 3, MethodOptions())
    target, n = tiny_model.target, TINY_GPT.num_image_tokens
    worse, drops = [], []
    for g in runs["vanilla"]:
        with torch.no_grad():  # the guided log p at the last position, from the unchanged prefix
            t = torch.from_numpy(g.tokens).long()[None]
            rows = torch.stack([target.training_logits(torch.tensor([g.class_id]), t),
                                target.training_logits(torch.tensor([target.null_class]), t)])
            last = combine_cfg(rows, sampling.cfg_scale).log_softmax(-1)[0, -1].double()
        least = int(last.argmin())
        drops.append(float(last[least] - last[g.tokens[-1]]) / n)  # the per-token mean moves by this
        tokens = g.tokens.copy()
        tokens[-1] = least
        worse.append(dataclasses.replace(g, method="worse", tokens=tokens))
    results = summarise(tiny_model, {"vanilla": runs["vanilla"], "worse": worse}, sampling, ["worse"],
                        tiny_classifier())
    gap, (low, high) = results["worse"]["logp_gap"], results["worse"]["logp_gap_ci"]
    assert all(drop < 0 for drop in drops) and gap < 0
    assert math.isclose(gap, sum(drops) / 3, rel_tol=1e-4)
    half = 1.96 * statistics.stdev(drops) / math.sqrt(3)  # the normal interval of the mean drop
    assert math.isclose(low, gap - half, rel_tol=1e-3, abs_tol=1e-6)
    assert math.isclose(high, gap + half, rel_tol=1e-3, abs_tol=1e-6)
    assert results["worse"]["matches_vanilla_greedy"] is False


def test_logp_gap_and_low_p_share_intervals_on_known_scores(tiny_model):
    """Target scores given per image: gaps -1.0, -1.2, -0.8 (mean -1, sd 0.2) and low-p shares 0.1,
    0.3, 0.2 (mean 0.2, sd 0.1); the intervals are mean -+ 1.96 sd / sqrt(3), computed by hand."""
    sampling = SamplingConfig(temperature=0.0)
    runs = run_methods(tiny_model, ["sjd"], sampling, 3, MethodOptions())
    vanilla_logp = np.array([-2.0, -3.0, -2.5])
    scored = {"vanilla": (vanilla_logp, np.zeros(3)),
              "sjd": (vanilla_logp + np.array([-1.0, -1.2, -0.8]), np.array([0.1, 0.3, 0.2]))}
    r = summarise(tiny_model, runs, sampling, ["sjd"], tiny_classifier(), scored=scored)["sjd"]
    assert r["logp"] == pytest.approx(-3.5) and r["logp_gap"] == pytest.approx(-1.0)
    assert r["logp_gap_ci"] == pytest.approx((-1.226321, -0.773679), abs=1e-6)  # entirely below zero
    assert r["low_p_share"] == pytest.approx(0.2)
    assert r["low_p_share_ci"] == pytest.approx((0.086839, 0.313161), abs=1e-6)


class _PointReference:
    """A classifier stand-in whose held-out features have mean (1, 0) and no spread: fid_proxy of
    features (B, 2) whose second column is 0 is then (mean - 1)^2 + the first column's variance."""

    reference_mean = torch.tensor([1.0, 0.0])
    reference_cov = torch.zeros(2, 2)


def test_the_fid_interval_is_shifted_by_the_bootstraps_bias():
    # Two images at 0 and 2: the estimate is 0^2 + 2 = 2. A resample of two repeats one image
    # (value 1 + 0 = 1) or takes both (value 0 + 2 = 2); with a share f of the latter the resamples
    # average 1 + f, a bias of f - 1, so the shifted values are 2 - f and 3 - f: the interval is
    # [2 - f, 3 - f], one wide, about [1.5, 2.5] rather than the unshifted [1, 2].
    features = np.array([[0.0, 0.0], [2.0, 0.0]])
    assert fid_proxy(_PointReference(), features) == pytest.approx(2.0)
    low, high = fid_interval(_PointReference(), features, draws=400)
    assert high - low == pytest.approx(1.0, abs=1e-6)
    assert 1.4 < low < 1.6  # f near 1/2 (400 draws: its standard error is 0.025)
