"""Token sequences to train a drafter on: VQ codes of real images from a file, or the target's own samples.

A codes file is an .npz with `codes` (M, N) image tokens in raster order and `labels` (M,) class ids,
the format `engine.train.target` caches (LlamaGen's extract_codes_c2i.py output can be stacked into
it). Without one, the target samples sequences itself (EAGLE's self-distillation), split across the
processes of a distributed run and gathered so that every process holds the same set.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from engine.config import InvalidInput, SamplingConfig
from engine.gpt import GPT

log = logging.getLogger("engine.train.sequences")


def load_codes(path: Path, target: GPT) -> tuple[np.ndarray, np.ndarray]:
    """codes (M, N) int64 and labels (M,) int64, checked against the target's vocabulary and grid."""
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
    if codes.min() < 0 or codes.max() >= cfg.vocab_size or labels.min() < 0 or labels.max() >= cfg.num_classes:
        raise InvalidInput(f"{path}: token or class ids out of range for vocabulary {cfg.vocab_size} "
                           f"and {cfg.num_classes} classes")
    return codes, labels


def self_sample(target: GPT, count: int, sampling: SamplingConfig) -> tuple[np.ndarray, np.ndarray]:
    """`count` sequences sampled by the target (classes in turn, seed = sampling.seed + index)."""
    from engine.acceptance import ExactRule
    from engine.decode import decode
    from engine.drafters.base import Drafter

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    num_classes = target.cfg.num_classes
    mine = {}
    for i in range(rank, count, world):
        per_image = SamplingConfig(sampling.temperature, sampling.top_k, sampling.top_p, sampling.cfg_scale,
                                   sampling.seed + i)
        traces = list(decode(target, Drafter(), ExactRule(), per_image, i % num_classes))
        mine[i] = traces[-1].tokens_so_far
        log.info("sampled sequence %d/%d", i + 1, count)
    gathered = [mine]
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
    merged = {i: tokens for part in gathered for i, tokens in part.items()}
    codes = np.stack([merged[i] for i in range(count)]).astype(np.int64)  # (count, N)
    return codes, np.arange(count, dtype=np.int64) % num_classes


def save_codes(path: Path, codes: np.ndarray, labels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, codes=codes.astype(np.int16 if codes.max() < 2**15 else np.int32), labels=labels)


def rows_of(index: torch.Tensor, codes: torch.Tensor, labels: torch.Tensor,
            null_class: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dataset rows -> (class ids (B,), tokens (B, N)). Row i < M is sequence i with its class; row
    M + i is the same sequence with the null class, as CFG's unconditional row sees it."""
    m = len(codes)
    seq = index % m
    class_ids = torch.where(index < m, labels[seq], torch.full_like(seq, null_class))
    return class_ids, codes[seq]
