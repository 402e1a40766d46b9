"""Token sequences to train a drafter on, and the conditions they were drawn for.

A condition is a class of a class-conditional target, or a caption of a text-to-image one (the
target bound to that prompt). A codes file is an .npz with `codes` (M, N) image tokens in raster
order and `labels` (M,) condition indices, the format `engine.train.target` caches (LlamaGen's
extract_codes_c2i.py output can be stacked into it). Without one, the target samples sequences
itself (EAGLE's self-distillation), split across the processes of a distributed run and gathered so
that every process holds the same set.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from engine.core.config import InvalidInput, SamplingConfig
from engine.model.gpt import GPT

log = logging.getLogger("engine.train.sequences")


@dataclass
class Conditions:
    """Per condition, the GPT that runs it and its class id there: every class of a class-conditional
    target (one GPT), or one prompt-bound GPT per caption of a text-to-image target (class 0 each)."""

    targets: list[GPT]
    class_ids: list[int]

    @classmethod
    def of_classes(cls, target: GPT) -> Conditions:
        return cls([target] * target.cfg.num_classes, list(range(target.cfg.num_classes)))

    @classmethod
    def of_prompts(cls, model, prompts: list[str]) -> Conditions:
        """model: an engine.loading.t2i.TextImageModel; each prompt is encoded once."""
        return cls([model.bind(prompt).target for prompt in prompts], [0] * len(prompts))

    def __len__(self) -> int:
        return len(self.targets)

    def row(self, label: int, null: bool) -> tuple[GPT, int]:
        """The GPT and class id of a training row: the condition, or CFG's null row of it."""
        target = self.targets[label]
        return target, (target.null_class if null else self.class_ids[label])


def load_codes(path: Path, target: GPT, num_conditions: int) -> tuple[np.ndarray, np.ndarray]:
    """codes (M, N) int64 and labels (M,) int64, checked against the target's vocabulary and grid
    and the number of conditions."""
    if not path.is_file():
        raise InvalidInput(f"codes file {path} not found")
    data = np.load(path)
    if "codes" not in data or "labels" not in data:
        raise InvalidInput(f"{path} needs arrays 'codes' (M, N) and 'labels' (M,); it has {list(data)}")
    codes, labels = data["codes"].astype(np.int64), data["labels"].astype(np.int64)
    cfg = target.cfg
    if codes.ndim != 2 or codes.shape[1] != cfg.num_image_tokens or len(labels) != len(codes):
        raise InvalidInput(f"{path}: codes {codes.shape} and labels {labels.shape} do not fit "
                           f"(M, {cfg.num_image_tokens}) and (M,)")
    if codes.min() < 0 or codes.max() >= cfg.vocab_size or labels.min() < 0 or labels.max() >= num_conditions:
        raise InvalidInput(f"{path}: token or condition ids out of range for vocabulary {cfg.vocab_size} "
                           f"and {num_conditions} conditions")
    return codes, labels


def self_sample(conditions: Conditions, count: int, sampling: SamplingConfig) -> tuple[np.ndarray, np.ndarray]:
    """`count` sequences sampled by the target (conditions in turn, seed = sampling.seed + index)."""
    from engine.drafters.base import Drafter
    from engine.loop.decode import decode
    from engine.rules.acceptance import ExactRule

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    mine = {}
    for i in range(rank, count, world):
        per_image = dataclasses.replace(sampling, seed=sampling.seed + i)
        label = i % len(conditions)
        traces = list(decode(conditions.targets[label], Drafter(), ExactRule(), per_image,
                             conditions.class_ids[label]))
        mine[i] = traces[-1].tokens_so_far
        log.info("sampled sequence %d/%d", i + 1, count)
    gathered = [mine]
    if world > 1:
        gathered = [{} for _ in range(world)]  # placeholders: all_gather_object replaces every entry
        dist.all_gather_object(gathered, mine)
    merged = {i: tokens for part in gathered for i, tokens in part.items()}
    codes = np.stack([merged[i] for i in range(count)]).astype(np.int64)  # (count, N)
    return codes, np.arange(count, dtype=np.int64) % len(conditions)


def save_codes(path: Path, codes: np.ndarray, labels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, codes=codes.astype(np.int16 if codes.max() < 2**15 else np.int32), labels=labels)


def rows_of(index: torch.Tensor, codes: torch.Tensor, labels: torch.Tensor,
            conditions: Conditions) -> tuple[list[tuple[GPT, int]], torch.Tensor]:
    """Dataset rows -> ((GPT, class id) per row, tokens (B, N)). Row i < M is sequence i with its
    condition; row M + i is the same sequence with the null condition, as CFG's unconditional row
    sees it."""
    m = len(codes)
    seq = index % m
    rows = [conditions.row(int(labels[s]), bool(i >= m)) for i, s in zip(index.tolist(), seq.tolist())]
    return rows, codes[seq]
