"""Target features of real token sequences, the training data of EAGLE and Medusa drafters.

Both CFG rows are stored: the conditional row and the null-class row see the same tokens, as they do
during guided generation.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from engine.gpt import GPT

log = logging.getLogger("engine.train.features")


@torch.inference_mode()
def sequence_features(target: GPT, class_ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """class_ids (B,), tokens (B, N) -> final-normed features (B, 1 + N, D) at the last condition
    position and at every image token position."""
    h = torch.cat([target.embed_condition(class_ids), target.embed_tokens(tokens)], dim=1)  # (B, P+N, D)
    T = h.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    hidden = target(h, torch.arange(T), mask=causal)  # (B, P+N, D)
    return hidden[:, target.cfg.cls_token_num - 1:]


def cached_features(run_dir: Path, target: GPT, codes: np.ndarray, labels: np.ndarray,
                    count: int, seed: int) -> dict[str, np.ndarray]:
    """Features of `count` random training images, both CFG rows, stored as float16."""
    path = run_dir / f"features_{count}_{seed}.npz"
    if path.exists():
        return dict(np.load(path))
    pick = np.random.default_rng(seed).choice(len(codes), size=count, replace=False)
    tokens = codes[pick].astype(np.int64)
    rows = {"cond": labels[pick], "null": np.full(count, target.null_class)}
    out = {"tokens": tokens, "labels": labels[pick]}
    started = time.perf_counter()
    for name, class_ids in rows.items():
        chunks = []
        for start in range(0, count, 32):
            feats = sequence_features(target, torch.from_numpy(class_ids[start:start + 32]),
                                      torch.from_numpy(tokens[start:start + 32]))
            chunks.append(feats.half().numpy())
            log.info("%s features %d/%d (%.0f s)", name, start + len(feats), count,
                     time.perf_counter() - started)
        out[name] = np.concatenate(chunks)
    run_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out
