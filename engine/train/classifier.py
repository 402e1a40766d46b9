"""Train the quality-probe classifier and store held-out feature statistics with it."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.data.dataset import CLASS_NAMES, to_tensor_range
from engine.evaluation.classifier import Classifier, ClassifierConfig, augment
from engine.loading.embedded import ASSETS, CLASSIFIER_FILE
from engine.model.weights import save_model
from engine.train.common import DATA_DIR, HELD_OUT_DRAWS, TRAIN_DRAWS, cached_dataset, fit, setup_logging, whole_number

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
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--steps", type=whole_number(1), default=3000)
    parser.add_argument("--batch", type=whole_number(1), default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--widths", type=lambda v: tuple(int(w) for w in v.split(",")),
                        default=ClassifierConfig.widths, help="channels per stage, comma-separated")
    parser.add_argument("--assets", type=Path, default=ASSETS, help="where the classifier is written")
    args = parser.parse_args(argv)
    setup_logging()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    images, labels = cached_dataset(args.data_dir, "train", TRAIN_DRAWS)
    held_images, held_labels = cached_dataset(args.data_dir, "held_out", HELD_OUT_DRAWS)
    cfg = ClassifierConfig(num_classes=len(CLASS_NAMES), widths=args.widths)
    model = Classifier(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)

    def train_step(step: int) -> str:
        index = torch.randint(0, len(images), (args.batch,), generator=gen).numpy()
        x = augment(to_tensor_range(images[index]), gen)
        loss = F.cross_entropy(model(x), torch.from_numpy(labels[index]))
        loss.backward()
        return f"loss {loss.item():.3f}"

    def report(step: int) -> None:
        accuracy, _ = evaluate(model, held_images, held_labels)
        log.info("step %d held-out accuracy %.3f", step, accuracy)

    fit(model, optimizer, gen, args.run_dir / "checkpoint.pt", steps=args.steps, lr=args.lr, warmup=20,
        train_step=train_step, log_every=100, save=report)
    accuracy, feats = evaluate(model, held_images, held_labels)
    f = feats.double()
    model.reference_mean.copy_(f.mean(0).float())
    model.reference_cov.copy_(torch.from_numpy(np.cov(f.numpy(), rowvar=False)).float())
    out = args.assets / CLASSIFIER_FILE
    save_model(model.eval(), out, config=cfg, extra={"heldout_accuracy": accuracy})
    log.info("held-out accuracy %.3f; wrote %s", accuracy, out)


if __name__ == "__main__":
    main()
