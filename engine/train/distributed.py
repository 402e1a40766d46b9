"""Train an EAGLE drafter for any target, class-conditional or text-to-image, on one process or many.

    python -m engine.train.distributed --model c2i_B_256 --weights-dir DIR --codes codes.npz
    python -m engine.train.distributed --model t2i_XL_stage1_256 --weights-dir DIR --prompts captions.txt
    torchrun --nproc_per_node 8 -m engine.train.distributed --model c2i_XL_384 --weights-dir DIR ...
    torchrun --nnodes 2 --node_rank R --master_addr HOST --nproc_per_node 8 -m engine.train.distributed ...

(`accelerate launch -m engine.train.distributed ...` sets the same environment and works alike.)
The target's features (its conditional and null rows, both as CFG sees them; for a text-to-image
target, the rows of each prompt in --prompts) are computed on the fly, so nothing is stored and each
process runs the target on its own share of every batch.
Every process draws the same global batch from the shared seed and trains on its slice;
DistributedDataParallel averages the gradients. The noise on each sample's input features comes from
a seed keyed by (step, place in the global batch), so the trained drafter does not depend on how many
processes shared the work. Resumable: the run folder keeps the last checkpoint.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from engine.core.config import InvalidInput, SamplingConfig
from engine.drafters.eagle_net import EagleNet
from engine.loading.load import load_model
from engine.model.gpt import GPT, GPTConfig
from engine.model.weights import load_module, save_model
from engine.train.common import fit, setup_logging, whole_number
from engine.train.drafter import drafter_loss
from engine.train.features import sequence_features
from engine.train.sequences import Conditions, load_codes, rows_of, save_codes, self_sample

log = logging.getLogger("engine.train.distributed")


def noise_seed(seed: int, step: int, slot: int) -> int:
    return (seed * 1_000_003 + step) * 65_537 + slot


def features_for(rows: list[tuple[GPT, int]], tokens: torch.Tensor) -> torch.Tensor:
    """Target features (B, 1 + N, D) of each row's tokens under its own (GPT, class id), one target
    pass per distinct GPT; ordinary tensors, since inference tensors cannot enter autograd."""
    groups: dict[int, list[int]] = {}
    for i, (target, _) in enumerate(rows):
        groups.setdefault(id(target), []).append(i)
    parts: dict[int, torch.Tensor] = {}
    for members in groups.values():
        target = rows[members[0]][0]
        class_ids = torch.tensor([rows[i][1] for i in members], device=tokens.device)  # (b,)
        parts.update(zip(members, sequence_features(target, class_ids, tokens[members])))
    return torch.stack([parts[i] for i in range(len(rows))]).clone()  # (B, 1 + N, D)


def train_step(net, rows: list[tuple[GPT, int]], slots: range, tokens: torch.Tensor,
               noise: float, seed: int, step: int, global_batch: int) -> torch.Tensor:
    """Forward and backward over this process's samples; returns (loss sum, top-1 sum) for logging.

    Each sample gets its own noise generator and its own backward (`no_sync` defers DDP's gradient
    all-reduce to the last one), and each loss is scaled by 1 / global batch, so that DDP's average
    over processes yields the mean over the whole global batch.
    """
    feats = features_for(rows, tokens)  # (b, 1 + N, D)
    totals = torch.zeros(2, dtype=torch.float64)
    world = dist.get_world_size() if dist.is_initialized() else 1
    for i, slot in enumerate(slots):
        gen = torch.Generator().manual_seed(noise_seed(seed, step, slot))
        last = i == len(slots) - 1
        sync = contextlib.nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync()
        with sync:
            loss, top1 = drafter_loss(net, rows[i][0], tokens[i:i + 1], feats[i:i + 1], noise, gen)
            (loss * world / global_batch).backward()
        totals += torch.tensor([loss.item(), top1], dtype=torch.float64)
    return totals


def _setup() -> tuple[int, int, torch.device]:
    """Join the process group when a launcher started us; pick this process's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if torch.cuda.is_available() else torch.device("cpu")
    if world > 1:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return (dist.get_rank() if world > 1 else 0), world, device


def _load_target(args, device: torch.device) -> tuple[GPT, Conditions, str]:
    """The target whose drafter is trained, the conditions to train on, and the target's name."""
    if args.target is not None:
        target = load_module(args.target, GPTConfig, GPT).to(device)
        model, name = None, args.target.stem
    else:
        # float32 on every device: the drafter learns to predict the target's exact features.
        model = load_model(args.model, args.weights_dir, device, "float32")
        target, name = model.target, model.name
    if model is not None and model.needs_prompt:
        if args.prompts is None:
            raise InvalidInput(f"model {name!r} is text-to-image; give captions with --prompts FILE (one per line)")
        return target, Conditions.of_prompts(model, _read_prompts(args.prompts)), name
    if args.prompts is not None:
        raise InvalidInput(f"model {name!r} is class-conditional; --prompts is for text-to-image models")
    return target, Conditions.of_classes(target), name


def _read_prompts(path: Path) -> list[str]:
    if not path.is_file():
        raise InvalidInput(f"prompts file {path} not found")
    prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not prompts:
        raise InvalidInput(f"prompts file {path} has no captions; write one per line")
    return prompts


def _sequences(args, target: GPT, conditions: Conditions, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    if args.codes is not None:
        codes, labels = load_codes(args.codes, target, len(conditions))
    else:
        sampling = SamplingConfig(temperature=args.sample_temperature, cfg_scale=args.cfg, seed=args.seed)
        codes, labels = self_sample(conditions, args.self_sample, sampling)
        if rank == 0:
            save_codes(args.run_dir / "self_sampled_codes.npz", codes, labels)
    return torch.from_numpy(codes), torch.from_numpy(labels)


def train(args) -> Path:
    rank, world, device = _setup()
    if args.batch % world:
        raise InvalidInput(f"batch {args.batch} must be a multiple of the process count {world}")
    torch.manual_seed(args.seed)  # the drafter's initial weights, the same on every process
    target, conditions, name = _load_target(args, device)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    codes, labels = _sequences(args, target, conditions, rank)
    net = EagleNet(target.cfg).to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)  # the batch schedule, shared by all processes
    wrapped = DistributedDataParallel(net) if world > 1 else net
    per_process = args.batch // world

    def step_all(step: int) -> str:
        index = torch.randint(0, 2 * len(codes), (args.batch,), generator=gen)  # (B,) global batch
        slots = range(rank * per_process, (rank + 1) * per_process)
        rows, tokens = rows_of(index[slots.start:slots.stop], codes, labels, conditions)
        totals = train_step(wrapped, rows, slots, tokens.to(device), args.noise, args.seed, step, args.batch)
        if world > 1:
            totals = totals.to(device)  # NCCL reduces device tensors only
            dist.all_reduce(totals)
        return f"loss {totals[0] / args.batch:.4f} top-1 agreement {totals[1] / args.batch:.3f}"

    def save(step: int) -> None:
        save_model(net, args.out, config=target.cfg, extra={"trained_steps": step, "target": name})

    # The checkpoint loads into the wrapped module's own parameters, on every process alike.
    fit(net, optimizer, gen, args.run_dir / "checkpoint.pt", steps=args.steps, lr=args.lr, warmup=args.warmup,
        train_step=step_all, clip=0.5, log_every=args.log_every, save_every=args.save_every, save=save,
        lead=rank == 0)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return args.out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded", help="embedded or an official LlamaGen model")
    parser.add_argument("--weights-dir", type=Path, default=None)
    parser.add_argument("--target", type=Path, default=None, help="a target GPT .safetensors (instead of --model)")
    parser.add_argument("--prompts", type=Path, default=None,
                        help="text-to-image targets: a text file of captions, one per line")
    parser.add_argument("--codes", type=Path, default=None,
                        help=".npz with codes (M, N) and labels (M,): class ids, or caption line numbers")
    parser.add_argument("--self-sample", type=whole_number(1), default=64, help="without --codes: sequences to sample")
    parser.add_argument("--sample-temperature", type=float, default=1.0)
    parser.add_argument("--cfg", type=float, default=SamplingConfig.cfg_scale, help="CFG scale of self-sampling")
    parser.add_argument("--steps", type=whole_number(1), default=1000)
    parser.add_argument("--batch", type=whole_number(1), default=16, help="global batch, over all processes")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warmup", type=whole_number(0), default=50)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=whole_number(1), default=25)
    parser.add_argument("--save-every", type=whole_number(1), default=100)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/drafter_distributed"))
    parser.add_argument("--out", type=Path, default=None,
                        help="drafter .safetensors; default: RUN_DIR/eagle_drafter_<model>.safetensors")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.out is None:
        stem = args.target.stem if args.target is not None else args.model
        args.out = args.run_dir / f"eagle_drafter_{stem}.safetensors"
    setup_logging()
    out = train(args)
    if int(os.environ.get("RANK", "0")) == 0:
        log.info("wrote %s", out)


if __name__ == "__main__":
    main()
