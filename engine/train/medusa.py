"""Train Medusa heads on the target's features of real images (both CFG rows).

Head i reads the feature that predicted token t + 1 and is trained with cross-entropy on token
t + 2 + i of the real sequence.
"""
from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from engine.drafters.medusa import MedusaConfig, MedusaHeads
from engine.loading.embedded import ASSETS, MEDUSA_FILE, load_embedded_target
from engine.model.weights import save_model
from engine.train.common import DATA_DIR, STORED_DTYPE, features_dir, fit, setup_logging, whole_number
from engine.train.features import cached_features
from engine.train.target import cached_codes

log = logging.getLogger("engine.train.medusa")


def medusa_loss(heads: MedusaHeads, tokens: torch.Tensor, feats: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """tokens (B, N); feats (B, 1 + N, D), feats[:, j] predicted tokens[:, j]."""
    logits = heads(feats)  # (B, 1 + N, H, V)
    n = tokens.shape[1]
    losses, accuracies = [], []
    for i in range(heads.cfg.num_heads):
        ahead = 1 + i  # head i at feature j predicts token j + 1 + i
        pred = logits[:, : n - ahead, i]  # (B, N - ahead, V)
        truth = tokens[:, ahead:]  # (B, N - ahead)
        losses.append(F.cross_entropy(pred.flatten(0, 1), truth.flatten()))
        accuracies.append((pred.argmax(-1) == truth).float().mean().item())
    return torch.stack(losses).mean(), accuracies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/medusa"))
    parser.add_argument("--images", type=whole_number(1), default=3000)
    parser.add_argument("--heads", type=whole_number(1), default=4)
    parser.add_argument("--steps", type=whole_number(1), default=600)
    parser.add_argument("--batch", type=whole_number(1), default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--assets", type=Path, default=ASSETS,
                        help="where the target and tokenizer are read and the heads are written")
    args = parser.parse_args(argv)
    setup_logging()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    target = load_embedded_target(args.assets)
    out = args.assets / MEDUSA_FILE
    codes, labels = cached_codes(args.data_dir, args.assets)
    data = cached_features(features_dir(args.data_dir, args.assets), target, codes, labels, args.images, args.seed)
    tokens = torch.from_numpy(np.concatenate([data["tokens"], data["tokens"]]))
    feats = torch.from_numpy(np.concatenate([data["cond"], data["null"]]))
    cfg = MedusaConfig(target.cfg.dim, target.cfg.vocab_size, args.heads)
    heads = MedusaHeads(cfg)
    with torch.no_grad():  # start each head's output layer from the target's LM head, as Medusa does
        for head in cast("Iterable[nn.Sequential]", heads.heads):
            output_layer = cast(nn.Linear, head[1])  # after the head's ResBlock
            output_layer.weight.copy_(target.output.weight)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=args.lr, weight_decay=0.0)

    def train_step(step: int) -> str:
        index = torch.randint(0, len(tokens), (args.batch,), generator=gen)
        loss, accuracies = medusa_loss(heads, tokens[index], feats[index].float())
        loss.backward()
        return f"loss {loss.item():.4f} top-1 per head " + " ".join(f"{a:.3f}" for a in accuracies)

    def save(step: int) -> None:
        save_model(heads, out, config=cfg, extra={"trained_steps": step}, param_dtype=STORED_DTYPE)

    fit(heads, optimizer, gen, args.run_dir / "checkpoint.pt", steps=args.steps, lr=args.lr, warmup=30,
        train_step=train_step, save=save)
    log.info("wrote %s", out)


if __name__ == "__main__":
    main()
