"""Train the embedded target GPT (or, with --model sps, SpS's small draft GPT) on VQ codes.

Class labels are replaced by the null class 10% of the time (LlamaGen's class dropout) so that one
network gives both the conditional and the unconditional logits that classifier-free guidance mixes.
Steps run under bfloat16 autocast (master weights and optimizer in float32): on a CPU with AVX-512
BF16 a step takes a third to a half of the float32 time. The loss on held-out emoji is logged as the
run goes and kept in the weights' metadata (`held_out_curve`), so a reader can see whether the curve
is flat. A run resumes from its checkpoint, or else from committed weights given by --init.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.data.dataset import CLASS_NAMES, to_tensor_range
from engine.data.emoji_sources import IMAGE_SETS
from engine.loading.embedded import (
    ASSETS,
    SPS_DRAFT,
    SPS_FILE,
    TARGET,
    TARGET_FILE,
    TOKENIZER_FILE,
    load_embedded_tokenizer,
)
from engine.model.gpt import GPT
from engine.model.weights import load_module, read_metadata, save_model
from engine.train.common import (
    DATA_DIR,
    HELD_OUT_DRAWS,
    STORED_DTYPE,
    TRAIN_DRAWS,
    cached_dataset,
    cached_dataset_path,
    digest,
    file_digest,
    fit,
    setup_logging,
    whole_number,
)
from engine.train.deepen import train_only

log = logging.getLogger("engine.train.target")


def cached_codes(data_dir: Path, assets: Path, split: str = "train",
                 draws: int = TRAIN_DRAWS) -> tuple[np.ndarray, np.ndarray]:
    """VQ codes (N, 256) int16 and labels (N,) of `draws` placed pictures of `split`, encoded once
    with the tokenizer in `assets` (the cache is keyed by that file's contents)."""
    tokenizer_file = assets / TOKENIZER_FILE
    path = data_dir / f"codes_{cached_dataset_path(data_dir, split, draws).stem}_{file_digest(tokenizer_file)}.npz"
    if path.exists():
        data = np.load(path)
        return data["codes"], data["labels"]
    images, labels = cached_dataset(data_dir, split, draws)
    tokenizer = load_embedded_tokenizer(assets)
    chunks = []
    with torch.inference_mode():
        for start in range(0, len(images), 256):
            chunks.append(tokenizer.encode(to_tensor_range(images[start:start + 256])).numpy())
    log.info("encoded %d %s images with %s", len(images), split, tokenizer_file)
    codes = np.concatenate(chunks).astype(np.int16)
    np.savez(path, codes=codes, labels=labels)
    return codes, labels


@torch.no_grad()
def held_out_loss(model: GPT, codes: np.ndarray, labels: np.ndarray, bf16: bool) -> float:
    """Mean next-token cross-entropy (nats) on held-out sequences under their class."""
    model.eval()
    total = 0.0
    for start in range(0, len(codes), 64):
        tokens = torch.from_numpy(codes[start:start + 64].astype(np.int64))  # (b, 256)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model.training_logits(torch.from_numpy(labels[start:start + 64]), tokens)
        total += F.cross_entropy(logits.float().flatten(0, 1), tokens.flatten(), reduction="sum").item()
    model.train()
    return total / codes.size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("target", "sps"), default="target")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/<model>")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--assets", type=Path, default=ASSETS,
                        help="where the tokenizer is read and the weights are written")
    parser.add_argument("--init", type=Path, default=None,
                        help="weights to start from when the run has no checkpoint (their trained_steps)")
    parser.add_argument("--steps", type=whole_number(1), default=6000, help="the learning-rate schedule's length")
    parser.add_argument("--stop-at", type=whole_number(1), default=None, help="end at this step of the schedule")
    parser.add_argument("--batch", type=whole_number(1), default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--class-dropout", type=float, default=0.1)
    parser.add_argument("--eval-every", type=whole_number(1), default=250)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only-new-layers", action="store_true",
                        help="train only the blocks engine.train.deepen inserted (its weights' new_layers)")
    args = parser.parse_args(argv)
    config = {"target": TARGET, "sps": SPS_DRAFT}[args.model]
    run_dir = args.run_dir or Path("runs") / args.model
    out = args.assets / {"target": TARGET_FILE, "sps": SPS_FILE}[args.model]
    setup_logging()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    codes, labels = cached_codes(args.data_dir, args.assets)
    held_codes, held_labels = (a[:1024] for a in cached_codes(args.data_dir, args.assets, "held_out", HELD_OUT_DRAWS))
    # Weights given by --init carry their own shape (a deepened target has more layers than TARGET).
    model = GPT(config) if args.init is None else load_module(args.init, type(config), GPT)
    start, curve = 0, []
    resuming = (run_dir / "checkpoint.pt").exists()
    if args.init is not None and not resuming:
        start = int(read_metadata(args.init).get("trained_steps", 0))
        log.info("starting from %s at step %d", args.init, start)
    held_out_set = digest(held_codes.tobytes())
    curve_source = out if resuming else args.init
    if curve_source is not None and curve_source.exists():
        metadata = read_metadata(curve_source)
        if metadata.get("held_out_set") == held_out_set:  # the curve so far goes on
            curve = list(metadata.get("held_out_curve", []))
        else:  # other data: a new curve, from where these weights stand on it
            log.info("the held-out set differs from %s's; the held-out curve restarts", curve_source)
            curve = [[start, round(held_out_loss(model, held_codes, held_labels, args.bf16), 4)]]
    trained = list(model.parameters())
    # The blocks engine.train.deepen inserted, as the weights say (carried on into what this run writes).
    known = curve_source is not None and curve_source.exists()
    inserted = read_metadata(curve_source).get("new_layers", []) if known else []
    if args.only_new_layers:  # the trained blocks keep what they compute; the inserted ones learn
        if not inserted:
            raise SystemExit(f"--only-new-layers: {curve_source} names no new_layers (made by engine.train.deepen?)")
        trained = train_only(model, inserted)
        log.info("training only the inserted blocks %s", inserted)
    optimizer = torch.optim.AdamW(trained, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.05)

    def train_step(step: int) -> str:
        index = torch.randint(0, len(codes), (args.batch,), generator=gen).numpy()
        tokens = torch.from_numpy(codes[index].astype(np.int64))  # (B, 256)
        class_ids = torch.from_numpy(labels[index])  # (B,)
        dropped = torch.rand(args.batch, generator=gen) < args.class_dropout
        class_ids = torch.where(dropped, torch.full_like(class_ids, model.null_class), class_ids)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model.training_logits(class_ids, tokens)  # (B, 256, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens.flatten())
        loss.backward()
        return f"loss {loss.item():.4f}"

    def after_step(step: int) -> None:
        if step % args.eval_every == 0 or step == args.steps:
            curve.append([step, round(held_out_loss(model, held_codes, held_labels, args.bf16), 4)])
            log.info("step %d: held-out loss %.4f nats/token", *curve[-1])

    def save(step: int) -> None:
        # Written beside and renamed, so a run stopped mid-write leaves the last weights whole.
        partial = out.with_suffix(".partial")
        save_model(model, partial, config=model.cfg, extra={"trained_steps": step, "held_out_curve": curve,
                                                                    "held_out_set": held_out_set,
                                                                    "class_names": CLASS_NAMES,
                                                                    "image_sets": IMAGE_SETS,
                                                                    **({"new_layers": inserted} if inserted else {})},
                   param_dtype=STORED_DTYPE)
        partial.replace(out)

    fit(model, optimizer, gen, run_dir / "checkpoint.pt", steps=args.steps, lr=args.lr, warmup=100,
        train_step=train_step, clip=1.0, log_every=25, save_every=250, save=save, after_step=after_step,
        start=start, stop=args.stop_at)
    log.info("wrote %s", out)


if __name__ == "__main__":
    main()
