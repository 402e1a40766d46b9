"""Checks on the weights and results shipped in assets/ (slower than the tiny-model tests, still seconds)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.data.dataset import CLASS_NAMES, to_tensor_range
from engine.evaluation.quality import load_classifier, measure
from engine.loading.embedded import ASSETS, load_embedded, load_embedded_tokenizer, load_held_out_sample
from tools.probe_confusion import confusion, report
from tools.readme_tables import BLOCK, TABLES, fill, marked

ROOT = Path(__file__).resolve().parent.parent


def test_tokenizer_round_trips_real_images():
    tokenizer = load_embedded_tokenizer()
    images = to_tensor_range(load_held_out_sample()[0])  # emoji the tokenizer never saw
    codes = tokenizer.encode(images)  # (N, 256)
    assert codes.shape == (len(images), 256) and int(codes.max()) < 4096
    recon = tokenizer.decode(codes, 16)
    psnr = 10 * torch.log10(4.0 / (recon - images).pow(2).mean())
    assert psnr > 20.0
    again = tokenizer.encode(recon)
    assert (again == codes).float().mean() > 0.6  # decoded images map back to mostly the same codes


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_generate_command_writes_an_image_and_tokens(tmp_path):
    out, tokens = tmp_path / "image.png", tmp_path / "tokens.npy"
    result = run_cli("generate", "--class-id", "heart", "--seed", "3", "--temperature", "1.0",
                     "--cfg", "4.0", "--top-k", "0", "--top-p", "1.0", "--method", "vanilla",
                     "--out", str(out), "--tokens-out", str(tokens))
    assert result.returncode == 0, result.stderr
    saved = np.load(tokens)
    assert saved.shape == (256,) and out.stat().st_size > 0
    from PIL import Image

    assert Image.open(out).size == (64, 64)


def test_samples_command_draws_a_labelled_row_per_class(tmp_path):
    from PIL import Image

    out = tmp_path / "grid.png"
    result = run_cli("samples", "--classes", "smiley,heart", "--per-class", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    with Image.open(out) as grid:
        assert grid.size == (110 + 2 * 64, 2 * 64)
    assert run_cli("samples", "--classes", "dragon", "--out", str(out)).returncode == 2


@pytest.mark.parametrize("args, message", [
    (["--class-id", "99"], "class id 99 is out of range; allowed: 0 to 7"),
    (["--temperature", "-1"], "temperature -1.0 is out of range"),
    (["--top-p", "0"], "top-p 0.0 is out of range; allowed: (0, 1]"),
    (["--method", "turbo"], "unknown method 'turbo'"),
    (["--method", "lantern", "--delta", "1.5"], "delta 1.5 is out of range; allowed: 0 to 1"),
    (["--method", "relaxed_sjd", "--k", "5000"], "k 5000 is out of range; allowed: 1 to 4095"),
    (["--method", "eagle2", "--tree-depth", "0"], "tree depth 0 is out of range"),
])
def test_bad_command_line_values_get_one_clear_error(tmp_path, args, message):
    result = run_cli("generate", "--out", str(tmp_path / "x.png"), *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_weight_file_is_reported_with_its_path(tmp_path):
    from engine.model.weights import WeightsError

    with pytest.raises(WeightsError, match="target.safetensors not found"):
        load_embedded(tmp_path)


def test_shipped_model_generates_reproducibly():
    from engine.core.config import SamplingConfig
    from engine.generation import generate

    model = load_embedded()
    first = generate(model, "vanilla", SamplingConfig(temperature=1.0, seed=11), "smiley")
    second = generate(model, "vanilla", SamplingConfig(temperature=1.0, seed=11), "smiley")
    assert np.array_equal(first.tokens, second.tokens)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16-matmul"])
def test_greedy_eagle2_on_the_shipped_model_is_vanilla_token_for_token(dtype):
    """On the 16-layer model, near-ties come early: with bfloat16 products and float32 attention
    these two pictures part from vanilla at tokens 18 and 7. The trained drafter's drafts are accepted
    (measured: 142 to 160 of each picture's 256 tokens), so the accepted path is what is checked."""
    from engine.core.config import SamplingConfig
    from engine.generation import generate
    from engine.loading.load import load_model

    model = load_model(dtype=dtype)
    for class_id in (1, 7):
        vanilla = generate(model, "vanilla", SamplingConfig(temperature=0.0), class_id)
        eagle2 = generate(model, "eagle2", SamplingConfig(temperature=0.0), class_id)
        assert np.array_equal(vanilla.tokens, eagle2.tokens), f"class {class_id}"
        assert sum(len(t.accepted_nodes) for t in eagle2.traces) >= 100


MARKED_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_marked_table_is_the_shipped_results():
    for page in MARKED_PAGES:
        text = page.read_text()
        assert fill(text) == text, f"{page.name} differs; run python -m tools.readme_tables --write {page.name}"


def test_every_shipped_table_is_shown_somewhere():
    shown = [name for page in MARKED_PAGES for name in marked(page.read_text())]
    assert sorted(set(shown)) == sorted(TABLES), set(TABLES) ^ set(shown)
    assert {"headline-sampling", "headline-greedy"} <= set(marked((ROOT / "README.md").read_text()))


def test_a_stale_table_is_rendered_again_and_an_unknown_one_refused():
    stale = "before\n<!-- tables: costs -->\n| vanilla | 9.99x |\n<!-- /tables -->\nafter\n"
    again = fill(stale)
    assert "9.99x" not in again and TABLES["costs"](ASSETS) in again
    assert again.startswith("before\n") and again.endswith("<!-- /tables -->\nafter\n")
    assert fill(again) == again
    with pytest.raises(KeyError, match="unknown table 'speed'"):
        fill("<!-- tables: speed -->\n<!-- /tables -->")


def test_the_headline_tables_name_the_cpu_their_runs_recorded():
    readme = (ROOT / "README.md").read_text()
    for record in ("bench_sampling.json", "bench_greedy.json"):
        cpu = json.loads((ASSETS / "results" / record).read_text())["config"]["cpu"]
        assert f"measured on {cpu}," in readme, record


def test_no_speedup_is_written_by_hand():
    """Outside the rendered tables, a figure like 1.23x would be one no shipped run vouches for."""
    for page in MARKED_PAGES:
        by_hand = BLOCK.sub("", page.read_text())
        assert not re.findall(r"\b\d+\.\d+x\b", by_hand), page.name


def test_probe_confusion_counts_every_held_out_picture_once():
    images, labels = load_held_out_sample()
    quality = measure(load_classifier().eval(), images, labels)
    counts = confusion(quality.predicted, labels, len(CLASS_NAMES))
    assert counts.sum() == len(labels)
    assert np.array_equal(counts.sum(1), np.bincount(labels, minlength=len(CLASS_NAMES)))
    assert np.trace(counts) / counts.sum() == quality.class_accuracy
    first_line = f"accuracy {quality.class_accuracy:.3f} on {len(labels)} held-out pictures"
    assert report(counts).splitlines()[0] == first_line
