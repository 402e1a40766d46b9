"""What every training command shares: the cached dataset, seeding, resumable checkpoints."""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np
import torch

from engine.dataset import build_dataset

log = logging.getLogger("engine.train")

TRAIN_SEED = 0  # the training split
HELDOUT_SEED = 1  # held-out real images: classifier validation and the fid_proxy reference


def cached_dataset(run_dir: Path, per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Build the dataset once and keep it in the run folder; later commands reuse it."""
    path = run_dir / f"dataset_{per_class}_{seed}.npz"
    if path.exists():
        data = np.load(path)
        return data["images"], data["labels"]
    started = time.perf_counter()
    images, labels = build_dataset(per_class, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, images=images, labels=labels)
    log.info("built %d images in %.0f s -> %s", len(images), time.perf_counter() - started, path)
    return images, labels


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


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S")
