import json

import torch

from engine.bench import format_table, run_methods, summarise
from engine.classifier import Classifier, ClassifierConfig
from engine.config import SamplingConfig, TreeConfig
from engine.drafters.eagle_net import EagleNet
from engine.methods import MethodOptions
from engine.sweep import run_sweep, write_sweep
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
        assert results[name]["mal"] >= 1.0
        assert 0.0 <= results[name]["mean_accept_prob"] <= 1.0
    vanilla = results["vanilla"]
    assert vanilla["mal"] == 1.0 and vanilla["matches_vanilla_greedy"] is None
    assert vanilla["target_forwards_per_image"] == TINY_GPT.num_image_tokens
    assert "eagle2" in format_table(results)
    json.dumps(results)  # everything is serialisable


def test_sweep_writes_json_and_chart(tiny_model, tmp_path):
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    sweep = run_sweep(tiny_model, SamplingConfig(temperature=1.0), 2,
                      MethodOptions(tree=TreeConfig(2, 2, 4)), [0.0, 0.3], [4],
                      classifier=tiny_classifier())
    assert [(p["delta"], p["k"]) for p in sweep["points"]] == [(0.0, 4), (0.3, 4)]
    html = write_sweep(sweep, tmp_path / "sweep.json")
    assert html.exists() and json.loads((tmp_path / "sweep.json").read_text())["points"]
