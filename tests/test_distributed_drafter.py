"""Drafter training for any target: two processes under torchrun (gloo, DistributedDataParallel) give
the one-process drafter, and a resumed run continues exactly where it stopped."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engine.drafters.eagle_net import EagleNet
from engine.model.gpt import GPTConfig
from engine.model.weights import load_module, save_model
from engine.train import distributed
from tests.conftest import TINY_GPT, tiny_gpt

ROOT = Path(__file__).resolve().parent.parent


def _args(target: Path, run_dir: Path, steps: int) -> list[str]:
    return ["--target", str(target), "--self-sample", "6", "--steps", str(steps), "--batch", "4", "--lr", "3e-3",
            "--warmup", "1", "--save-every", "2", "--log-every", "1", "--run-dir", str(run_dir)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("drafter")
    target = root / "tiny.safetensors"
    save_model(tiny_gpt(), target, config=TINY_GPT)
    distributed.main(_args(target, root / "one", steps=4))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "engine.train.distributed", *_args(target, root / "two", steps=4)]
    for _attempt in range(2):  # a second go only for the rendezvous: its free port can be taken meanwhile
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        if run.returncode == 0 or "rendezvous" not in run.stderr.lower() and "address" not in run.stderr.lower():
            break
    assert run.returncode == 0, run.stderr[-3000:]
    distributed.main(_args(target, root / "resumed", steps=2))
    distributed.main(_args(target, root / "resumed", steps=4))
    return {name: root / name / "eagle_drafter_tiny.safetensors" for name in ("one", "two", "resumed")}


def test_two_processes_train_the_same_drafter_as_one(runs):
    one, two = load_file(str(runs["one"])), load_file(str(runs["two"]))
    torch.manual_seed(0)
    initial = EagleNet(TINY_GPT).state_dict()
    assert set(one) == set(two) == set(initial)
    for key in one:
        # Rounding only: the all-reduce's order, and the target's products, which take oneDNN or MKL
        # by batch size (engine/model/matmul.py) and so differ between one process and two.
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-4)
    moved = max((one[k] - initial[k]).abs().max().item() for k in one)
    assert moved > 1e-3  # the drafter did train


def test_both_runs_trained_on_the_same_sampled_sequences(runs):
    one = np.load(runs["one"].parent / "self_sampled_codes.npz")
    two = np.load(runs["two"].parent / "self_sampled_codes.npz")
    assert one["codes"].shape == (6, TINY_GPT.num_image_tokens)
    assert np.array_equal(one["codes"], two["codes"]) and np.array_equal(one["labels"], two["labels"])


def test_resumed_run_equals_an_uninterrupted_one(runs):
    one, resumed = load_file(str(runs["one"])), load_file(str(runs["resumed"]))
    for key in one:
        torch.testing.assert_close(resumed[key], one[key], rtol=0, atol=0)


def test_trained_drafter_loads_as_an_eagle_drafter(runs):
    net = load_module(runs["two"], GPTConfig, EagleNet)
    assert net.cfg == TINY_GPT


def test_a_text_to_image_target_trains_on_prompts_and_its_drafter_loads(tmp_path):
    from engine.loading.load import load_model
    from tests.official_files import write_lantern_t2i_folder

    weights = write_lantern_t2i_folder(tmp_path / "weights")
    prompts = tmp_path / "captions.txt"
    prompts.write_text("a photo of cat\n\nan astronaut riding horse\n")  # blank lines are skipped
    run = tmp_path / "run"
    distributed.main(["--model", "lantern_t2i_XL_256", "--weights-dir", str(weights), "--prompts", str(prompts),
                      "--self-sample", "3", "--steps", "2", "--batch", "2", "--warmup", "1", "--run-dir", str(run)])
    sampled = np.load(run / "self_sampled_codes.npz")
    assert sampled["labels"].tolist() == [0, 1, 0]  # the captions in turn
    trained = run / "eagle_drafter_lantern_t2i_XL_256.safetensors"
    (weights / trained.name).write_bytes(trained.read_bytes())
    model = load_model("lantern_t2i_XL_256", weights)  # a drafter in the weights folder replaces the published one
    state = load_file(str(trained))
    for key, value in model.drafters["eagle"].state_dict().items():
        torch.testing.assert_close(value, state[key])


def test_prompts_for_a_class_conditional_target_are_refused(tmp_path):
    from engine.core.config import InvalidInput

    target = tmp_path / "tiny.safetensors"
    save_model(tiny_gpt(), target, config=TINY_GPT)
    (tmp_path / "p.txt").write_text("a cat\n")
    with pytest.raises(InvalidInput, match="class-conditional"):
        distributed.main(["--target", str(target), "--prompts", str(tmp_path / "p.txt"), "--run-dir", str(tmp_path)])
