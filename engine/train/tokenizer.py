"""Train the embedded VQ tokenizer: reconstruction + codebook + commitment losses.

Most steps see random 32 x 32 crops (a quarter of the cost; the network is convolutional), the
last steps whole 64 x 64 images so that the attention blocks see the full 16 x 16 latent grid.
Codebook entries unused for a while are restarted on encoder outputs, which keeps all the codes
alive: a populated codebook is what gives each code near neighbours in latent space.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.data.dataset import to_tensor_range
from engine.loading.embedded import ASSETS, TOKENIZER_FILE, VQ, load_embedded_tokenizer
from engine.model.tokenizer import VQModel
from engine.model.weights import save_model
from engine.train.common import (
    DATA_DIR,
    HELD_OUT_DRAWS,
    TRAIN_DRAWS,
    cached_dataset,
    fit,
    setup_logging,
    whole_number,
    write_held_out_sample,
)

log = logging.getLogger("engine.train.tokenizer")


def random_crops(batch: torch.Tensor, size: int, gen: torch.Generator) -> torch.Tensor:
    if size == batch.shape[-1]:
        return batch
    top, left = torch.randint(0, batch.shape[-1] - size + 1, (2,), generator=gen).tolist()
    return batch[:, :, top:top + size, left:left + size]


def vq_losses(model: VQModel, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    z = F.normalize(model.encode_latent(images), dim=1)  # (B, d, h, w)
    codes = model.quantize.nearest(z)  # (B, h, w)
    zq = model.quantize.lookup(codes)  # (B, d, h, w)
    codebook_loss = F.mse_loss(zq, z.detach())
    commit_loss = 0.25 * F.mse_loss(z, zq.detach())
    recon = model.decode_latent(z + (zq - z).detach())  # straight-through estimator
    rec_loss = F.l1_loss(recon, images) + F.mse_loss(recon, images)
    psnr = 10 * torch.log10(4.0 / F.mse_loss(recon.clamp(-1, 1), images).detach())
    return rec_loss + codebook_loss + commit_loss, codes, {"rec": rec_loss.item(), "psnr": psnr.item()}


@torch.no_grad()
def restart_dead_codes(model: VQModel, usage: torch.Tensor, latents: torch.Tensor,
                       gen: torch.Generator) -> int:
    dead = (usage == 0).nonzero().flatten()
    if dead.numel() == 0:
        return 0
    flat = F.normalize(latents.permute(0, 2, 3, 1).reshape(-1, latents.shape[1]), dim=-1)
    picks = torch.randint(0, flat.shape[0], (dead.numel(),), generator=gen)
    model.quantize.embedding.weight[dead] = flat[picks]
    return dead.numel()


@torch.no_grad()
def evaluate(model: VQModel, images) -> tuple[float, int]:
    """Mean reconstruction PSNR (dB, images in [-1, 1]) and the number of distinct codes used."""
    psnrs, used = [], set()
    for start in range(0, len(images), 128):
        x = to_tensor_range(images[start:start + 128])
        codes = model.encode(x)  # (B, 256)
        recon = model.decode(codes, int(codes.shape[1] ** 0.5))
        mse = (recon - x).pow(2).mean(dim=(1, 2, 3))
        psnrs.append(10 * torch.log10(4.0 / mse))
        used.update(codes.flatten().tolist())
    return float(torch.cat(psnrs).mean()), len(used)


def _report(args: argparse.Namespace) -> None:
    held_out, _ = cached_dataset(args.data_dir, "held_out", HELD_OUT_DRAWS)
    psnr, used = evaluate(load_embedded_tokenizer(args.assets), held_out)
    log.info("held-out PSNR %.2f dB over %d images; %d of %d codes used", psnr, len(held_out),
             used, VQ.codebook_size)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/tokenizer"))
    parser.add_argument("--steps", type=whole_number(1), default=1500)
    parser.add_argument("--full-size-steps", type=whole_number(0), default=150)
    parser.add_argument("--batch", type=whole_number(1), default=32)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--assets", type=Path, default=ASSETS, help="where the tokenizer is written")
    parser.add_argument("--evaluate", action="store_true", help="only report held-out PSNR of the written one")
    args = parser.parse_args(argv)
    setup_logging()
    if args.evaluate:
        return _report(args)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    images, _ = cached_dataset(args.data_dir, "train", TRAIN_DRAWS)
    model = VQModel(VQ)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    usage = torch.zeros(VQ.codebook_size)
    last_batch: list[torch.Tensor] = []

    def train_step(step: int) -> str:
        index = torch.randint(0, len(images), (args.batch,), generator=gen)
        batch = to_tensor_range(images[index.numpy()])
        crop = 64 if step >= args.steps - args.full_size_steps else 32
        loss, codes, stats = vq_losses(model, random_crops(batch, crop, gen))
        loss.backward()
        usage.add_(torch.bincount(codes.flatten(), minlength=VQ.codebook_size))
        last_batch[:] = [batch]
        return f"loss {loss.item():.4f} psnr {stats['psnr']:.2f} dB"

    def after_step(step: int) -> None:
        # Every 50 steps of the cropped phase, codes unused since the last check restart on encoder
        # outputs of the latest batch.
        if step % 50 == 0 and step < args.steps - args.full_size_steps:
            with torch.no_grad():
                latents = model.encode_latent(last_batch[0])
            restarted = restart_dead_codes(model, usage, latents, gen)
            log.info("step %d: codes used %d, restarted %d", step, int((usage > 0).sum()), restarted)
            usage.zero_()

    fit(model, optimizer, gen, args.run_dir / "checkpoint.pt", steps=args.steps, lr=args.lr, warmup=50,
        train_step=train_step, log_every=50, after_step=after_step)
    out = args.assets / TOKENIZER_FILE
    save_model(model, out, config=VQ)
    write_held_out_sample(args.data_dir, args.assets)
    log.info("wrote %s and a held-out sample", out)
    _report(args)


if __name__ == "__main__":
    main()
