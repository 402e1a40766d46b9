"""Make a trained GPT deeper without changing what it computes, so that training continues.

Each trained block is followed by `--factor - 1` new blocks whose output projections (attention's
`wo`, the feed-forward's `w2`) are zero: a zeroed block adds nothing to the residual stream, so the
deeper model's logits equal the trained model's, while gradients reach the new blocks through those
projections from the first step. The new blocks' other weights are copies of the block before them
(a start the residual stream already suits, rather than noise at a scale it never saw).
The written file keeps the trained weights' step count, held-out curve and other metadata.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import logging
from pathlib import Path

import torch

from engine.model.gpt import GPT, GPTConfig, TransformerBlock
from engine.model.weights import load_module, read_metadata, save_model
from engine.train.common import STORED_DTYPE, setup_logging, whole_number

log = logging.getLogger("engine.train.deepen")


def zeroed_copy(block: TransformerBlock) -> TransformerBlock:
    """A copy of `block` whose contribution to the residual stream is zero."""
    new = copy.deepcopy(block)
    with torch.no_grad():
        new.attention.wo.weight.zero_()
        new.feed_forward.w2.weight.zero_()
    return new


def new_layers(trained: int, factor: int) -> list[int]:
    """The indices of the zeroed blocks `deepen` inserts: all but every `factor`-th."""
    return [i for i in range(trained * factor) if i % factor]


def train_only(model: GPT, layers: list[int]) -> list[torch.nn.Parameter]:
    """Freeze every parameter but those of blocks `layers` (the inserted ones); return those."""
    model.requires_grad_(False)
    for index in layers:
        model.layers[index].requires_grad_(True)
    return [p for p in model.parameters() if p.requires_grad]


def deepen(model: GPT, factor: int) -> GPT:
    """`model` with `factor` times its layers: each trained block, then `factor - 1` zeroed copies."""
    if factor < 1:
        raise ValueError(f"factor {factor} must be at least 1")
    config = dataclasses.replace(model.cfg, n_layer=model.cfg.n_layer * factor)
    deeper = GPT(config)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("layers.")}
    deeper.load_state_dict(state, strict=False)
    blocks = []
    for block in model.layers:
        assert isinstance(block, TransformerBlock)
        blocks.append(copy.deepcopy(block))
        blocks.extend(zeroed_copy(block) for _ in range(factor - 1))
    deeper.layers = torch.nn.ModuleList(blocks)
    return deeper.eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", type=Path, required=True, help="trained target weights")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--factor", type=whole_number(1), default=2,
                        help="the deeper model has this many times the layers")
    args = parser.parse_args(argv)
    setup_logging()
    model = load_module(args.source, GPTConfig, GPT)
    deeper = deepen(model, args.factor)
    extra = {k: v for k, v in read_metadata(args.source).items() if k != "config"}
    extra["new_layers"] = new_layers(model.cfg.n_layer, args.factor)
    save_model(deeper, args.out, config=deeper.cfg, extra=extra, param_dtype=STORED_DTYPE)
    log.info("wrote %s: %d layers from %d", args.out, deeper.cfg.n_layer, model.cfg.n_layer)


if __name__ == "__main__":
    main()
