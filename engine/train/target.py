"""Train the embedded target GPT (or, with --model sps, SpS's small draft GPT) on VQ codes.

Class labels are replaced by the null class 10% of the time (LlamaGen's class dropout) so that one
network gives both the conditional and the unconditional logits that classifier-free guidance mixes.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.dataset import to_tensor_range
from engine.embedded import ASSETS, SPS_DRAFT, SPS_FILE, TARGET, TARGET_FILE, load_embedded_tokenizer
from engine.gpt import GPT
from engine.train.common import TRAIN_SEED, cached_dataset, fit, setup_logging
from engine.weights import save_model

log = logging.getLogger("engine.train.target")


def cached_codes(run_dir: Path, per_class: int, seed: int = TRAIN_SEED) -> tuple[np.ndarray, np.ndarray]:
    """VQ codes (N, 256) int16 of the dataset drawn with `seed` (by default the training images),
    encoded once with the shipped tokenizer."""
    path = run_dir / (f"codes_{per_class}.npz" if seed == TRAIN_SEED else f"codes_{per_class}_{seed}.npz")
    if path.exists():
        data = np.load(path)
        return data["codes"], data["labels"]
    images, labels = cached_dataset(run_dir, per_class, seed)
    tokenizer = load_embedded_tokenizer()
    chunks = []
    with torch.inference_mode():
        for start in range(0, len(images), 256):
            chunks.append(tokenizer.encode(to_tensor_range(images[start:start + 256])).numpy())
            log.info("encoded %d/%d images", start + len(chunks[-1]), len(images))
    codes = np.concatenate(chunks).astype(np.int16)
    np.savez(path, codes=codes, labels=labels)
    return codes, labels


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("target", "sps"), default="target")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/<model>")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--per-class", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--class-dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="default: assets/<model file>")
    args = parser.parse_args(argv)
    config = {"target": TARGET, "sps": SPS_DRAFT}[args.model]
    args.run_dir = args.run_dir or Path("runs") / args.model
    args.out = args.out or ASSETS / {"target": TARGET_FILE, "sps": SPS_FILE}[args.model]
    setup_logging()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    codes, labels = cached_codes(args.run_dir.parent, args.per_class)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.05)

    def train_step(step: int) -> str:
        index = torch.randint(0, len(codes), (args.batch,), generator=gen).numpy()
        tokens = torch.from_numpy(codes[index].astype(np.int64))  # (B, 256)
        class_ids = torch.from_numpy(labels[index])  # (B,)
        dropped = torch.rand(args.batch, generator=gen) < args.class_dropout
        class_ids = torch.where(dropped, torch.full_like(class_ids, model.null_class), class_ids)
        logits = model.training_logits(class_ids, tokens)  # (B, 256, V)
        loss = F.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        loss.backward()
        return f"loss {loss.item():.4f} ({loss.item() / np.log(2):.1f} bits/token)"

    def save(step: int) -> None:
        save_model(model, args.out, config=config, extra={"trained_steps": step})

    fit(model, optimizer, gen, args.run_dir / "checkpoint.pt", steps=args.steps, lr=args.lr, warmup=30,
        train_step=train_step, clip=1.0, log_every=10, save_every=25, save=save)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
