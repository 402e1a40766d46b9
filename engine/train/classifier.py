"""Train the quality-probe classifier and store held-out feature statistics with it."""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.classifier import Classifier, ClassifierConfig, augment
from engine.dataset import CLASS_NAMES, to_tensor_range
from engine.embedded import ASSETS, CLASSIFIER_FILE
from engine.train.common import HELDOUT_SEED, TRAIN_SEED, Checkpoint, cached_dataset, cosine_lr, setup_logging
from engine.weights import save_model

log = logging.getLogger("engine.train.classifier")


@torch.no_grad()
def evaluate(model: Classifier, images: np.ndarray, labels: np.ndarray) -> tuple[float, torch.Tensor]:
    model.eval()
    feats = torch.cat([model.features(to_tensor_range(images[i:i + 256])) for i in range(0, len(images), 256)])
    accuracy = (model.head(feats).argmax(-1).numpy() == labels).mean()
    model.train()
    return float(accuracy), feats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/classifier"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--per-class", type=int, default=2000)
    parser.add_argument("--heldout-per-class", type=int, default=200)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ASSETS / CLASSIFIER_FILE)
    args = parser.parse_args(argv)
    setup_logging()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    images, labels = cached_dataset(args.run_dir.parent, args.per_class, TRAIN_SEED)
    held_images, held_labels = cached_dataset(args.run_dir.parent, args.heldout_per_class, HELDOUT_SEED)
    cfg = ClassifierConfig(num_classes=len(CLASS_NAMES))
    model = Classifier(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    ckpt = Checkpoint(args.run_dir / "checkpoint.pt")
    step = ckpt.load(model, optimizer, gen)
    started = time.perf_counter()
    while step < args.steps:
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, args.steps, args.lr, warmup=20)
        index = torch.randint(0, len(images), (args.batch,), generator=gen).numpy()
        x = augment(to_tensor_range(images[index]), gen)
        loss = F.cross_entropy(model(x), torch.from_numpy(labels[index]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % 100 == 0 or step == args.steps:
            accuracy, _ = evaluate(model, held_images, held_labels)
            log.info("step %d/%d loss %.3f held-out accuracy %.3f (%.0f s)", step, args.steps,
                     loss.item(), accuracy, time.perf_counter() - started)
            ckpt.save(model, optimizer, gen, step)
    accuracy, feats = evaluate(model, held_images, held_labels)
    f = feats.double()
    model.reference_mean.copy_(f.mean(0).float())
    model.reference_cov.copy_(torch.from_numpy(np.cov(f.numpy(), rowvar=False)).float())
    save_model(model.eval(), args.out, config=cfg, extra={"heldout_accuracy": accuracy})
    log.info("held-out accuracy %.3f; wrote %s", accuracy, args.out)


if __name__ == "__main__":
    main()
