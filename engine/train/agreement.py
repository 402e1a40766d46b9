"""How often the EAGLE drafter's guess matches the target's, per depth of the draft, on held-out data.

Depth 1 is the drafter fed the target's true features; depth 2 is the drafter fed its own depth-1
prediction, as the second level of an EAGLE-2 tree is. Both rows of classifier-free guidance run,
and agreement is measured on the guided distributions (scale --cfg), as decoding sees them: top-k
agreement is the share of positions where the target's greedy token is among the drafter's k best.
Two held-out sets: VQ codes of real images the drafter never trained on, and sequences the target
sampled itself (temperature 1, CFG 4) with a seed no training run uses, which are closer to what
the drafter meets when decoding.

    python -m engine.train.agreement --drafter assets/eagle_drafter.safetensors --images 240
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg
from engine.drafters.eagle_net import EagleNet, training_forward
from engine.loading.embedded import ASSETS, EAGLE_FILE
from engine.model.gpt import GPT
from engine.train.common import DATA_DIR, HELD_OUT_DRAWS, features_dir, setup_logging, whole_number
from engine.train.features import cached_features, cached_sampled_features
from engine.train.target import cached_codes

log = logging.getLogger("engine.train.agreement")

HELDOUT_SEED = 1  # which held-out images are picked
HELDOUT_SEED_SAMPLES = 1_000_003  # training runs sample with their own --seed


@torch.no_grad()
def agreement(net: EagleNet, target: GPT, data: dict[str, np.ndarray], cfg_scale: float = SamplingConfig.cfg_scale,
              depth: int = 2, top: tuple[int, ...] = (1, 3), batch: int = 16) -> dict[str, float]:
    """{"depth1_top1": ..., "depth1_top3": ..., "depth2_top1": ...}: shares over every position of
    every image in `data` (tokens (M, N), cond and null features (M, 1 + N, D)); with, per depth,
    "depth{d}_accept", the exact rule's mean chance of accepting a draft sampled from the drafter
    (sum over x of min(p, q), at temperature 1), and "target_top1_prob", the target's mean largest
    probability, which says how flat its next-token distributions are."""
    hits = np.zeros((depth, len(top)))
    accepted = np.zeros(depth)
    top1_prob = 0.0
    counts = np.zeros(depth)
    for start in range(0, len(data["tokens"]), batch):
        tokens = torch.from_numpy(data["tokens"][start:start + batch].astype(np.int64))  # (b, N)
        rows = [torch.from_numpy(data[name][start:start + batch]).float() for name in ("cond", "null")]
        feats = torch.cat(rows)  # (2b, 1 + N, D): the cond rows, then the null rows
        preds = training_forward(net, target, torch.cat([tokens, tokens]), feats, 0.0, None, depth)
        b = len(tokens)
        for d, pred in enumerate(preds):
            guided = combine_cfg(pred.view(2, b, *pred.shape[1:]), cfg_scale)  # (b, N - d, D)
            truth = combine_cfg(feats[:, 1 + d:].view(2, b, -1, feats.shape[-1]), cfg_scale)  # (b, N - d, D)
            p = target.logits(truth).float().softmax(-1)  # (b, N - d, V)
            q = target.logits(guided).float().softmax(-1)  # (b, N - d, V)
            best = p.argmax(-1, keepdim=True)  # (b, N - d, 1)
            ranked = q.topk(max(top), dim=-1).indices  # (b, N - d, K)
            for i, k in enumerate(top):
                hits[d, i] += (ranked[..., :k] == best).any(-1).sum().item()
            accepted[d] += torch.minimum(p, q).sum(-1).sum().item()
            if d == 0:
                top1_prob += p.max(-1).values.sum().item()
            counts[d] += best.numel()
    shares = {f"depth{d + 1}_top{k}": round(float(hits[d, i] / counts[d]), 4)
              for d in range(depth) for i, k in enumerate(top)}
    return {**shares, **{f"depth{d + 1}_accept": round(float(accepted[d] / counts[d]), 4) for d in range(depth)},
            "target_top1_prob": round(float(top1_prob / counts[0]), 4)}


def heldout_features(run_dir: Path, target: GPT, images: int,
                     codes_source: tuple[Path, Path]) -> dict[str, np.ndarray]:
    """Target features of `images` held-out images (both CFG rows), cached in run_dir; the images
    come from the data folder, encoded with the tokenizer of the assets folder (`codes_source`)."""
    codes, labels = cached_codes(*codes_source, "held_out", HELD_OUT_DRAWS)
    return cached_features(run_dir, target, codes, labels, images, HELDOUT_SEED, name="heldout")


def heldout_samples(run_dir: Path, target: GPT, count: int) -> dict[str, np.ndarray]:
    """`count` sequences the target sampled itself (temperature 1, CFG 4) with a seed no training
    run uses, and their features."""
    sampling = SamplingConfig(1.0, seed=HELDOUT_SEED_SAMPLES)
    return cached_sampled_features(run_dir, target, count, sampling)


def heldout_agreement(run_dir: Path, net: EagleNet, target: GPT, count: int,
                      cfg_scale: float = SamplingConfig.cfg_scale,
                      codes_source: tuple[Path, Path] = (DATA_DIR, ASSETS)) -> dict[str, dict[str, float]]:
    """Agreement on `count` held-out images and on `count` held-out samples (data cached in run_dir)."""
    return {"held-out images": agreement(net, target, heldout_features(run_dir, target, count, codes_source),
                                         cfg_scale),
            "held-out samples": agreement(net, target, heldout_samples(run_dir, target, count), cfg_scale)}


def main(argv: list[str] | None = None) -> None:
    from engine.drafters.eagle_net import load_eagle_net
    from engine.loading.embedded import load_embedded_target

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=Path, default=ASSETS, help="the target, tokenizer and drafter")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--images", type=whole_number(1), default=240, help="held-out images, and as many samples")
    parser.add_argument("--cfg", type=float, default=SamplingConfig.cfg_scale)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    setup_logging()
    target = load_embedded_target(args.assets)
    drafter = args.assets / EAGLE_FILE
    result = heldout_agreement(features_dir(args.data_dir, args.assets), load_eagle_net(drafter), target,
                               args.images, args.cfg,
                               (args.data_dir, args.assets))
    for name, shares in result.items():
        log.info("%s on %s: %s", drafter, name, shares)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
