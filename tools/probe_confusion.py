"""Which classes the quality probe tells apart on real held-out pictures, and which it confuses.

Class accuracy of generated images can only be read against what the probe does on real pictures of
emoji it never saw: a class the probe cannot recognise when drawn by an artist will not be
recognised when drawn by the target either. This prints, per class, the probe's accuracy on placed
held-out pictures and the classes it mistakes them for.

    python -m tools.probe_confusion                       # the shipped probe, the cached held-out draws
    python -m tools.probe_confusion --classifier runs/new/classifier.safetensors
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from engine.data.dataset import CLASS_NAMES
from engine.evaluation.quality import load_classifier, measure
from engine.loading.embedded import load_held_out_sample
from engine.train.common import DATA_DIR, HELD_OUT_DRAWS, cached_dataset_path


def confusion(predicted: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """(C, C) counts: row = true class, column = predicted class."""
    counts = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(counts, (labels, predicted), 1)
    return counts


def report(counts: np.ndarray, mistakes: int = 3) -> str:
    lines = [f"accuracy {np.trace(counts) / counts.sum():.3f} on {counts.sum()} held-out pictures"]
    for true, row in enumerate(counts):
        if row.sum() == 0:
            continue
        wrong = [c for c in np.argsort(-row, kind="stable") if c != true and row[c] > 0][:mistakes]
        taken_for = ", ".join(f"{CLASS_NAMES[c]} {row[c] / row.sum():.2f}" for c in wrong)
        lines.append(f"{CLASS_NAMES[true]:>12}  n={row.sum():4d}  {row[true] / row.sum():.2f}"
                     + (f"  taken for {taken_for}" if taken_for else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", type=Path, default=None, help="default: the shipped probe")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR,
                        help="where the training commands cached the held-out draws; without them the "
                             "32 shipped held-out pictures are used")
    args = parser.parse_args(argv)
    cached = cached_dataset_path(args.data_dir, "held_out", HELD_OUT_DRAWS)
    if cached.exists():
        with np.load(cached) as data:
            images, labels = data["images"], data["labels"]
    else:
        images, labels = load_held_out_sample()
    predicted = measure(load_classifier(args.classifier).eval(), images, labels).predicted
    print(report(confusion(predicted, labels, len(CLASS_NAMES))))


if __name__ == "__main__":
    main()
