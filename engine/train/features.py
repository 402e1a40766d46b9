"""Target features of token sequences, the training data of EAGLE and Medusa drafters.

Both CFG rows are stored: the conditional row and the null-class row see the same tokens, as they do
during guided generation. The sequences are VQ codes of real images, or sequences the target samples
itself under guidance (EAGLE's self-distillation), which are what a drafter meets when decoding.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg, distribution
from engine.core.tree import causal_mask
from engine.model.gpt import GPT
from engine.model.kv_cache import KVCache

log = logging.getLogger("engine.train.features")


@torch.inference_mode()
def sequence_features(target: GPT, class_ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """class_ids (B,), tokens (B, N) -> final-normed features (B, 1 + N, D) at the last condition
    position and at every image token position."""
    h = torch.cat([target.embed_condition(class_ids), target.embed_tokens(tokens)], dim=1)  # (B, P+N, D)
    T = h.shape[1]
    causal = causal_mask(T)
    hidden = target(h, torch.arange(T), mask=causal)  # (B, P+N, D)
    return hidden[:, target.cfg.cls_token_num - 1:]


def cached_features(run_dir: Path, target: GPT, codes: np.ndarray, labels: np.ndarray,
                    count: int, seed: int, name: str = "features") -> dict[str, np.ndarray]:
    """Features of `count` random images of `codes`, both CFG rows, stored as float16 in
    run_dir/<name>_<count>_<seed>.npz."""
    path = run_dir / f"{name}_{count}_{seed}.npz"
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
    np.savez(path, **out)  # type: ignore[arg-type]  # numpy's stub lets ** of arrays reach allow_pickle: bool
    return out


@torch.inference_mode()
def sample_with_features(target: GPT, class_ids: torch.Tensor, sampling: SamplingConfig,
                         gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The target samples one guided sequence per class id (B,), both CFG rows in one batch; returns
    tokens (B, N) and the features both rows had on the way, cond and null (B, 1 + N, D)."""
    cfg, b = target.cfg, len(class_ids)
    rows = torch.cat([class_ids, torch.full_like(class_ids, target.null_class)])  # (2B,)
    cache = KVCache.for_model(cfg, 2 * b, cfg.block_size)
    prefix = torch.arange(cfg.cls_token_num)
    causal = causal_mask(len(prefix))
    h = target(target.embed_condition(rows), prefix, cache, prefix, causal)[:, -1:]  # (2B, 1, D)
    steps: list[torch.Tensor] = [h]  # the features of each position, (2B, 1, D)
    tokens: list[torch.Tensor] = []
    for i in range(cfg.num_image_tokens):
        guided = combine_cfg(target.logits(h).view(2, b, -1), sampling.cfg_scale)  # (B, V)
        probs = distribution(guided, sampling)  # (B, V)
        token = probs.argmax(-1, keepdim=True) if sampling.greedy else torch.multinomial(probs, 1, generator=gen)
        tokens.append(token)  # (B, 1)
        position = torch.tensor([cfg.cls_token_num + i])
        visible = torch.ones(1, cfg.cls_token_num + i + 1, dtype=torch.bool)
        h = target(target.embed_tokens(token.repeat(2, 1)), position, cache, position, visible)  # (2B, 1, D)
        steps.append(h)
    feats = torch.cat(steps, dim=1)  # (2B, 1 + N, D)
    return {"tokens": torch.cat(tokens, dim=1), "cond": feats[:b], "null": feats[b:]}


def cached_sampled_features(run_dir: Path, target: GPT, count: int, sampling: SamplingConfig,
                            batch: int = 32) -> dict[str, np.ndarray]:
    """`count` sequences the target sampled (classes in turn, seeded by sampling.seed) with their
    features, as cached_features stores real ones."""
    path = run_dir / f"sampled_{count}_t{sampling.temperature:g}_cfg{sampling.cfg_scale:g}_{sampling.seed}.npz"
    if path.exists():
        return dict(np.load(path))
    gen = torch.Generator().manual_seed(sampling.seed)
    labels = np.arange(count) % target.cfg.num_classes
    parts: dict[str, list[np.ndarray]] = {"tokens": [], "cond": [], "null": []}
    started = time.perf_counter()
    for start in range(0, count, batch):
        out = sample_with_features(target, torch.from_numpy(labels[start:start + batch]), sampling, gen)
        parts["tokens"].append(out["tokens"].numpy().astype(np.int16))
        parts["cond"].append(out["cond"].half().numpy())
        parts["null"].append(out["null"].half().numpy())
        log.info("sampled %d/%d sequences (%.0f s)", start + len(out["tokens"]), count,
                 time.perf_counter() - started)
    data = {name: np.concatenate(chunks) for name, chunks in parts.items()}
    data["labels"] = labels
    run_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, **data)  # type: ignore[arg-type]  # as in cached_features
    return data
