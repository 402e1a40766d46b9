"""LANTERN's latent neighbour table: for each code, its k nearest codebook entries (itself excluded).

Computed once per (codebook, metric, k) and kept as a (V, k) int64 array, nearest first, so that it
can be used directly as a gather index.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.core.config import InvalidInput

METRICS = ("l2", "cosine", "random")
CHUNK = 512


def neighbour_table(codebook: torch.Tensor, k: int, metric: str = "l2", seed: int = 0) -> np.ndarray:
    """codebook (V, d) -> (V, k) int64 indices of each entry's k nearest other entries."""
    vocab = codebook.shape[0]
    if not 1 <= k <= vocab - 1:
        raise InvalidInput(f"k {k} is out of range; allowed: 1 to {vocab - 1} (codebook size - 1)")
    if metric not in METRICS:
        raise InvalidInput(f"unknown neighbour metric {metric!r}; allowed: {', '.join(METRICS)}")
    c = codebook.detach().float().cpu()
    rng = np.random.default_rng(seed)
    rows = []
    # Row chunks keep memory at (chunk, V) even for LlamaGen's 16,384 codes.
    for start in range(0, vocab, CHUNK):
        block = c[start:start + CHUNK]  # (b, d)
        if metric == "random":  # the ablation: the same table shape, neighbours chosen at random
            scores = torch.from_numpy(rng.random((len(block), vocab))).float()
        elif metric == "l2":
            scores = torch.cdist(block, c)  # (b, V)
        else:
            unit = torch.nn.functional.normalize(c, dim=-1)
            scores = 1.0 - torch.nn.functional.normalize(block, dim=-1) @ unit.T  # (b, V)
        scores[torch.arange(len(block)), torch.arange(start, start + len(block))] = float("inf")
        rows.append(scores.topk(k, dim=-1, largest=False, sorted=True).indices)  # (b, k)
    return torch.cat(rows).numpy().astype(np.int64)
