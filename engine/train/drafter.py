"""Train the EAGLE drafter on the target's features (both CFG rows) of real and self-sampled images.

Loss = SmoothL1(predicted feature, target feature) + 0.1 * cross-entropy against the target's own
distribution at that feature, with uniform noise on the input features (EAGLE's recipe). --guided
adds a cross-entropy between the CFG-guided distributions, the ones decoding drafts from. --depth D
also feeds the drafter its own predictions for D - 1 more draft depths, as drafting a tree does.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg
from engine.drafters.eagle_net import EagleNet, load_eagle_net, training_forward
from engine.loading.embedded import ASSETS, EAGLE_FILE, load_embedded_target
from engine.model.gpt import GPTConfig
from engine.model.weights import save_model
from engine.train.agreement import heldout_agreement
from engine.train.common import DATA_DIR, STORED_DTYPE, features_dir, fit, setup_logging, whole_number
from engine.train.features import cached_features, cached_sampled_features
from engine.train.target import cached_codes

log = logging.getLogger("engine.train.drafter")

# How much less a deeper draft's loss weighs than the one above it (EAGLE-3's training-time test).
DEPTH_DECAY = 0.8


def drafter_loss(net: EagleNet, target, tokens: torch.Tensor, feats: torch.Tensor, noise: float,
                 gen: torch.Generator, guided: float = 0.0, cfg_scale: float = SamplingConfig.cfg_scale,
                 depth: int = 1) -> tuple[torch.Tensor, float]:
    """The loss and the top-1 agreement at depth 1 of each row's own distribution.

    With `guided` > 0 the rows come in CFG pairs (the first half conditional, the second half the
    null rows of the same sequences), and a cross-entropy between the guided distributions, weighted
    by `guided`, is added: decoding drafts from u + s (c - u), which multiplies each row's error by s.
    With `depth` > 1 the drafter is also fed its own predictions, as drafting a tree feeds it, and
    the loss of depth d is weighted by DEPTH_DECAY ** (d - 1), the weights scaled to sum to one.
    """
    preds = training_forward(net, target, tokens, feats, noise, gen, depth)  # d = 1..depth: (B, N - d + 1, D)
    weights = [DEPTH_DECAY ** d for d in range(depth)]
    losses = [_depth_loss(target, pred, feats[:, 1 + d:], guided, cfg_scale) for d, pred in enumerate(preds)]
    loss = torch.stack([w * part for w, (part, _) in zip(weights, losses)]).sum() / sum(weights)
    return loss, losses[0][1]


def _depth_loss(target, pred: torch.Tensor, truth: torch.Tensor, guided: float,
                cfg_scale: float) -> tuple[torch.Tensor, float]:
    """pred, truth (B, T, D) -> the loss of one depth's predictions, and their top-1 agreement."""
    with torch.no_grad():
        target_probs = target.logits(truth).softmax(-1)  # (B, T, V)
    pred_logits = target.logits(pred)  # (B, T, V)
    loss = F.smooth_l1_loss(pred, truth) + 0.1 * _soft_cross_entropy(target_probs, pred_logits)
    if guided > 0:
        pairs = (2, len(pred) // 2, *pred.shape[1:])
        guided_logits = target.logits(combine_cfg(pred.view(pairs), cfg_scale))  # (B / 2, T, V)
        with torch.no_grad():
            guided_probs = target.logits(combine_cfg(truth.reshape(pairs), cfg_scale)).softmax(-1)  # (B / 2, T, V)
        loss = loss + guided * _soft_cross_entropy(guided_probs, guided_logits)
    top1 = (pred_logits.argmax(-1) == target_probs.argmax(-1)).float().mean().item()
    return loss, top1


def _soft_cross_entropy(probs: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of -sum p log softmax(logits): probs, logits (..., V)."""
    return -(probs * logits.log_softmax(-1)).sum(-1).mean()


def training_sources(run_dir: Path, target, images: int, sampled: int, seed: int,
                     codes_source: tuple[Path, Path] = (DATA_DIR, ASSETS)) -> dict[str, dict[str, torch.Tensor]]:
    """The training sequences by source, "real" (VQ codes of images) and "sampled" (by the target):
    tokens (M, N), and features (M, 1 + N, D) float16 under the condition ("cond") and under the
    null class ("null"), as CFG runs them. Real images come from the data folder, encoded with the
    tokenizer of the assets folder (`codes_source`)."""
    sources = {}
    if images:
        codes, labels = cached_codes(*codes_source)
        sources["real"] = cached_features(run_dir, target, codes, labels, images, seed)
    if sampled:
        sources["sampled"] = cached_sampled_features(run_dir, target, sampled, SamplingConfig(1.0, seed=seed))
    return {source: {name: torch.from_numpy(data[name]) for name in ("tokens", "cond", "null")}
            for source, data in sources.items()}


def batch_split(sources: dict, pairs: int, sampled_share: float) -> dict[str, int]:
    """How many of a batch's `pairs` sequences each source gives."""
    if len(sources) == 1:
        return {next(iter(sources)): pairs}
    sampled = round(pairs * sampled_share)
    return {"sampled": sampled, "real": pairs - sampled}


def initial_drafter(path: Path, cfg: GPTConfig) -> EagleNet:
    """The drafter in `path`, to train on: its block must have the target's width and heads (a
    deepened target keeps them, so the drafter of the target it grew from fits)."""
    net = load_eagle_net(path)
    if (net.cfg.dim, net.cfg.n_head, net.cfg.vocab_size) != (cfg.dim, cfg.n_head, cfg.vocab_size):
        raise SystemExit(f"--init {path}: its width {net.cfg.dim}, heads {net.cfg.n_head} and vocabulary "
                         f"{net.cfg.vocab_size} differ from the target's ({cfg.dim}, {cfg.n_head}, {cfg.vocab_size})")
    log.info("starting from the drafter in %s", path)
    return net.train()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/drafter"))
    parser.add_argument("--images", type=whole_number(1), default=6000, help="real training images")
    parser.add_argument("--sampled", type=whole_number(0), default=3000, help="sequences the target samples itself")
    parser.add_argument("--sampled-share", type=float, default=0.75,
                        help="share of each batch drawn from the sampled sequences, when both kinds are used")
    parser.add_argument("--above", action=argparse.BooleanOptionalAction, default=True,
                        help="also input the token one row above the predicted one")
    parser.add_argument("--guided", type=float, default=0.5, help="weight of the CFG-guided cross-entropy")
    parser.add_argument("--cfg", type=float, default=SamplingConfig.cfg_scale, help="CFG scale of the guided loss")
    parser.add_argument("--steps", type=whole_number(1), default=3000)
    parser.add_argument("--batch", type=whole_number(1), default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--depth", type=whole_number(1), default=1,
                        help="draft depths trained, deeper ones on the drafter's own predictions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init", type=Path, default=None,
                        help="a drafter to start from, such as the one trained on the target this one grew from")
    parser.add_argument("--eval-images", type=whole_number(1), default=240,
                        help="held-out images for the final agreement")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--assets", type=Path, default=ASSETS,
                        help="where the target and tokenizer are read and the drafter is written")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                        help="bfloat16 autocast for the training steps (float32 weights and optimizer)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    setup_logging()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    target = load_embedded_target(args.assets)
    out = args.assets / EAGLE_FILE
    for p in target.parameters():
        p.requires_grad_(False)
    cache = features_dir(args.data_dir, args.assets)
    sources = training_sources(cache, target, args.images, args.sampled, args.seed, (args.data_dir, args.assets))
    per_batch = batch_split(sources, args.batch // 2, args.sampled_share)
    log.info("training on %s sequences (per batch: %s), both CFG rows of each",
             {source: len(data["tokens"]) for source, data in sources.items()}, per_batch)
    net = EagleNet(target.cfg, above=args.above) if args.init is None else initial_drafter(args.init, target.cfg)
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)

    def train_step(step: int) -> str:
        # Each batch holds both CFG rows of batch / 2 sequences, so the guided loss sees whole pairs.
        picked = []
        for source, count in per_batch.items():
            index = torch.randint(0, len(sources[source]["tokens"]), (count,), generator=gen)
            picked.append({name: values[index] for name, values in sources[source].items()})
        tokens = torch.cat([p["tokens"] for p in picked]).long().repeat(2, 1)  # (B, N)
        feats = torch.cat([p[row] for row in ("cond", "null") for p in picked]).float()  # (B, 1 + N, D)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss, top1 = drafter_loss(net, target, tokens, feats, args.noise, gen, args.guided, args.cfg,
                                      args.depth)
        loss.backward()
        return f"loss {loss.item():.4f} top-1 agreement {top1:.3f}"

    def save(step: int) -> None:
        save_model(net, out, config=target.cfg, extra={"trained_steps": step, "above": net.fc_above is not None,
                                                         "depth": args.depth},
                   param_dtype=STORED_DTYPE)

    fit(net, optimizer, gen, args.run_dir / "checkpoint.pt", steps=args.steps, lr=args.lr, warmup=50,
        train_step=train_step, clip=0.5, save=save)
    log.info("wrote %s", out)
    if args.eval_images:
        for name, shares in heldout_agreement(cache, net.eval(), target, args.eval_images,
                                              args.cfg, (args.data_dir, args.assets)).items():
            log.info("agreement (CFG %g) on %s: %s", args.cfg, name, shares)


if __name__ == "__main__":
    main()
