"""Narrow class-conditional weights to the dataset's classes (`CLASSES`): a target, SpS draft GPT
or EAGLE drafter trained on more categories becomes one conditioned on some of them.

A class is one row of a GPT's class embedding table (the null class of CFG is the last row) and no
other weight depends on which classes exist, so keeping rows gives a model whose conditional and
unconditional distributions are exactly the source's on the classes kept, and training can go on
from there. The embedded target was made so: trained on sixteen categories, narrowed to the eight
whose members look alike, then trained on those (docs/model.md, "The classes").

    python -m engine.train.select_classes --source runs/sixteen --assets runs/new \\
        --source-classes "smiley,heart,flag,..."    # only for files that do not name their classes

Also writes the held-out sample of the new classes (`held_out_sample.npz`) beside the weights.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.data.dataset import CLASS_NAMES
from engine.loading.embedded import ASSETS, EAGLE_FILE, SPS_FILE, TARGET_FILE
from engine.model.weights import WeightsError, load_state, read_metadata
from engine.train.common import DATA_DIR, setup_logging, write_held_out_sample

log = logging.getLogger("engine.train.select_classes")

CLASS_TABLE = "cls_embedding.embedding_table.weight"  # (num_classes + 1, D), the null class last
CONDITIONED_FILES = (TARGET_FILE, SPS_FILE, EAGLE_FILE)  # files whose config names a class count


def select_classes(source: Path, out: Path, source_classes: tuple[str, ...] | None = None,
                   keep: tuple[str, ...] = CLASS_NAMES) -> None:
    """Write `source` to `out` with the class rows of `keep` (in that order) and the null row."""
    metadata = read_metadata(source)
    config = metadata["config"]
    names = tuple(metadata.get("class_names") or source_classes or ())
    if len(names) != config["num_classes"]:
        raise WeightsError(f"{source} has {config['num_classes']} classes and names {len(names)} "
                           f"({', '.join(names) or 'none'}); give their names in row order with --source-classes")
    missing = [name for name in keep if name not in names]
    if missing:
        raise WeightsError(f"{source} has no class {', '.join(missing)}; its classes: {', '.join(names)}")
    rows = [names.index(name) for name in keep] + [len(names)]  # the null row stays last
    tensors = load_state(source)
    if CLASS_TABLE in tensors:
        tensors[CLASS_TABLE] = tensors[CLASS_TABLE][torch.tensor(rows)].contiguous()  # (len(keep) + 1, D)
    narrowed = metadata | {"config": config | {"num_classes": len(keep)}, "class_names": list(keep),
                           "classes_selected_from": list(names)}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata={k: json.dumps(v) for k, v in narrowed.items()})
    log.info("%s -> %s: classes %s of %d", source, out, ", ".join(keep), len(names))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, required=True, help="folder of the weights to narrow")
    parser.add_argument("--assets", type=Path, default=ASSETS, help="where the narrowed weights are written")
    parser.add_argument("--source-classes", default=None,
                        help="comma-separated class names of the source's rows, for files that do not carry them")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    setup_logging()
    source_classes = tuple(n.strip() for n in args.source_classes.split(",")) if args.source_classes else None
    present = [name for name in CONDITIONED_FILES if (args.source / name).exists()]
    if TARGET_FILE not in present:
        raise SystemExit(f"{args.source / TARGET_FILE} not found; --source must hold a trained target")
    for name in present:
        select_classes(args.source / name, args.assets / name, source_classes)
    write_held_out_sample(args.data_dir, args.assets)


if __name__ == "__main__":
    main()
