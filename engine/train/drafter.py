"""Train the EAGLE drafter on the target's features of real images (both CFG rows).

Loss = SmoothL1(predicted feature, target feature) + 0.1 * cross-entropy against the target's own
distribution at that feature, with uniform noise on the input features (EAGLE's recipe).
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.drafters.eagle_net import EagleNet, training_forward
from engine.embedded import ASSETS, EAGLE_FILE, load_embedded_target
from engine.train.common import Checkpoint, cosine_lr, setup_logging
from engine.train.features import cached_features
from engine.train.target import cached_codes
from engine.weights import save_model

log = logging.getLogger("engine.train.drafter")


def drafter_loss(net: EagleNet, target, tokens: torch.Tensor, feats: torch.Tensor, noise: float,
                 gen: torch.Generator) -> tuple[torch.Tensor, float]:
    pred = training_forward(net, target, tokens, feats, noise, gen)  # (B, N, D)
    truth = feats[:, 1:]  # (B, N, D)
    with torch.no_grad():
        target_probs = target.logits(truth).softmax(-1)  # (B, N, V)
    pred_logits = target.logits(pred)  # (B, N, V)
    ce = -(target_probs * pred_logits.log_softmax(-1)).sum(-1).mean()
    loss = F.smooth_l1_loss(pred, truth) + 0.1 * ce
    top1 = (pred_logits.argmax(-1) == target_probs.argmax(-1)).float().mean().item()
    return loss, top1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/drafter"))
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ASSETS / EAGLE_FILE)
    args = parser.parse_args(argv)
    setup_logging()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    target = load_embedded_target()
    for p in target.parameters():
        p.requires_grad_(False)
    codes, labels = cached_codes(args.run_dir.parent, per_class=2000)
    data = cached_features(args.run_dir.parent, target, codes, labels, args.images, args.seed)
    tokens = torch.from_numpy(np.concatenate([data["tokens"], data["tokens"]]))  # (2M, N)
    feats = torch.from_numpy(np.concatenate([data["cond"], data["null"]]))  # (2M, 1+N, D) fp16
    net = EagleNet(target.cfg)
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt = Checkpoint(args.run_dir / "checkpoint.pt")
    step = ckpt.load(net, optimizer, gen)
    started = time.perf_counter()
    while step < args.steps:
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, args.steps, args.lr, warmup=50)
        index = torch.randint(0, len(tokens), (args.batch,), generator=gen)
        loss, top1 = drafter_loss(net, target, tokens[index], feats[index].float(), args.noise, gen)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        optimizer.step()
        step += 1
        if step % 25 == 0:
            log.info("step %d/%d loss %.4f top-1 agreement %.3f (%.0f s)", step, args.steps,
                     loss.item(), top1, time.perf_counter() - started)
        if step % 100 == 0 or step == args.steps:
            ckpt.save(net, optimizer, gen, step)
            save_model(net, args.out, config=target.cfg, extra={"trained_steps": step})
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
