"""What every training command shares: the cached dataset, seeding, resumable checkpoints, the loop."""
from __future__ import annotations

import argparse
import hashlib
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from engine.core.config import InvalidInput, check_count
from engine.data.dataset import CLASSES, build_dataset
from engine.data.emoji_sources import PACKAGES
from engine.loading.embedded import HELD_OUT_SAMPLE_FILE, TARGET_FILE

log = logging.getLogger("engine.train")

DATA_DIR = Path("runs/data")  # the packed image sets and every cached draw of them
TRAIN_DRAWS = 40000  # placed pictures the tokenizer, the target and the drafters train on
HELD_OUT_DRAWS = 2000  # placed held-out pictures: validation, the fid_proxy reference


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type for a count of `minimum` or more (steps, batch, depth): a bad one is refused at
    the command line, naming the value and what is allowed, rather than failing deep in training."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        try:
            return check_count("", value, minimum)  # argparse names the argument
        except InvalidInput as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def digest(data: bytes) -> str:
    """A short fingerprint of some bytes, so that what was made from them is not mistaken for another's."""
    return hashlib.sha256(data).hexdigest()[:12]


def file_digest(path: Path) -> str:
    """A short fingerprint of a weights file, so that caches made from it are not reused for another."""
    return digest(path.read_bytes())


def features_dir(data_dir: Path, assets: Path) -> Path:
    """Where the target's features (drafter and Medusa training data) are cached: one folder per
    target file, shared by the commands that train on them."""
    return data_dir / f"features_{file_digest(assets / TARGET_FILE)}"


def cached_dataset_path(data_dir: Path, split: str, draws: int, seed: int = 0) -> Path:
    """Where `cached_dataset` keeps `draws` placed pictures of `split`, named also by the classes
    and image sets they were drawn from, so that draws of another dataset are never reused."""
    return data_dir / f"{split}_{draws}_{seed}_{digest(repr((CLASSES, PACKAGES)).encode())}.npz"


def cached_dataset(data_dir: Path, split: str, draws: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Build `draws` placed pictures of `split` once and keep them in `data_dir`; later commands reuse them."""
    path = cached_dataset_path(data_dir, split, draws, seed)
    if path.exists():
        data = np.load(path)
        return data["images"], data["labels"]
    started = time.perf_counter()
    images, labels = build_dataset(data_dir / "packages", split, draws, seed)
    data_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, images=images, labels=labels)
    log.info("built %d %s images in %.0f s -> %s", len(images), split, time.perf_counter() - started, path)
    return images, labels


def write_held_out_sample(data_dir: Path, assets: Path, per_class: int = 2) -> None:
    """The first `per_class` held-out images of each class, shipped for checks that run offline."""
    images, labels = cached_dataset(data_dir, "held_out", HELD_OUT_DRAWS)
    keep = np.concatenate([np.flatnonzero(labels == c)[:per_class] for c in np.unique(labels)])
    np.savez_compressed(assets / HELD_OUT_SAMPLE_FILE, images=images[keep], labels=labels[keep])


def cosine_lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


class Checkpoint:
    """Model + optimizer + step + generator state in one file, written atomically."""

    def __init__(self, path: Path):
        self.path = path

    def load(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             generator: torch.Generator) -> int:
        if not self.path.exists():
            return 0
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        log.info("resumed from %s at step %d", self.path, state["step"])
        return int(state["step"])

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             generator: torch.Generator, step: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "generator": generator.get_state(), "step": step}, tmp)
        tmp.replace(self.path)


# The embedded model's learned parts are stored in bfloat16: training already runs their products in
# it, and it halves the repository's assets (the shipped target's held-out loss is unchanged to 4
# decimals). Drafters of official models stay float32, as their targets' published weights are.
STORED_DTYPE = torch.bfloat16


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, gen: torch.Generator, checkpoint: Path, *,
        steps: int, lr: float, warmup: int, train_step: Callable[[int], str], clip: float | None = None,
        log_every: int = 25, save_every: int = 100, save: Callable[[int], None] | None = None,
        after_step: Callable[[int], None] | None = None, lead: bool = True, start: int = 0,
        stop: int | None = None) -> int:
    """The loop of every training command, resumed from `checkpoint` where one exists.

    Each step sets the cosine learning rate, calls `train_step(step)` (forward and backward of one
    batch, on the zeroed gradients; it returns what to log), clips the gradient norm to `clip`, steps
    the optimizer, then calls `after_step(steps done)`. Every `log_every` steps the last report is
    logged; every `save_every` steps and at the end the checkpoint is written and `save(steps done)`
    called (for the shipped weights). Only the `lead` process of a distributed run logs and saves.
    Without a checkpoint the run starts at step `start` (weights committed by an earlier run), its
    learning rate warming up again over `warmup` steps. `stop` ends the run early, at that step of
    the `steps`-step schedule.
    Returns the step reached.
    """
    ckpt = Checkpoint(checkpoint)
    step = ckpt.load(model, optimizer, gen) if ckpt.path.exists() else start
    started, first = time.perf_counter(), step
    # Started from committed weights, the optimizer's moments begin at zero again: Adam's first
    # updates are then full steps along the gradient's sign, so the rate warms up afresh.
    rewarm = warmup if step > 0 and not ckpt.path.exists() else 0
    last = min(steps, stop or steps)
    while step < last:
        rate = cosine_lr(step, steps, lr, warmup)
        if step - first < rewarm:
            rate *= (step - first + 1) / rewarm
        for group in optimizer.param_groups:
            group["lr"] = rate
        optimizer.zero_grad(set_to_none=True)
        report = train_step(step)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        step += 1
        if after_step is not None:
            after_step(step)
        if lead and (step % log_every == 0 or step == last):
            elapsed = time.perf_counter() - started
            log.info("step %d/%d %s (%.0f s, %.2f steps/s)", step, steps, report, elapsed,
                     (step - first) / elapsed)
        if lead and (step % save_every == 0 or step == last):
            ckpt.save(model, optimizer, gen, step)
            if save is not None:
                save(step)
    return step


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S")
