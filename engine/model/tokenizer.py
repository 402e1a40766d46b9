"""LlamaGen's VQ tokenizer: conv encoder/decoder and an l2-normalised codebook.

Module and parameter names follow LlamaGen's `vq_model.py` (`encoder.conv_blocks.{i}.res.{j}`,
`quant_conv`, `quantize.embedding`, ...) so that official tokenizers load strictly; width, depth
and codebook size are configurable so that a small one can be trained here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class VQConfig:
    codebook_size: int = 16384
    codebook_embed_dim: int = 8
    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4)
    z_channels: int = 256
    num_res_blocks: int = 2

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)


def normalize(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=32, num_channels=channels, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.norm1, self.conv1 = normalize(c_in), nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2, self.conv2 = normalize(c_out), nn.Conv2d(c_out, c_out, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.norm = normalize(c)
        self.q, self.k, self.v = nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1)
        self.proj_out = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        h = self.norm(x)
        q = self.q(h).flatten(2).transpose(1, 2)  # (B, HW, C)
        k = self.k(h).flatten(2).transpose(1, 2)  # (B, HW, C)
        v = self.v(h).flatten(2).transpose(1, 2)  # (B, HW, C)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, HW, C)
        return x + self.proj_out(y.transpose(1, 2).reshape(B, C, H, W))


class Downsample(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))  # asymmetric padding, as taming/LlamaGen


class Upsample(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Level(nn.Module):
    """One resolution of the encoder or decoder, under LlamaGen's names: residual blocks, attention
    blocks (the innermost level only) and, where the resolution changes, a resampler."""

    downsample: Downsample  # encoder levels but the last; absent otherwise (forward checks hasattr)
    upsample: Upsample  # decoder levels but the outermost; absent otherwise

    def __init__(self) -> None:
        super().__init__()
        self.res = nn.ModuleList()
        self.attn = nn.ModuleList()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for i, res in enumerate(self.res):
            h = res(h)
            if len(self.attn) > 0:
                h = self.attn[i](h)
        if hasattr(self, "downsample"):
            h = self.downsample(h)
        if hasattr(self, "upsample"):
            h = self.upsample(h)
        return h


class Encoder(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        levels = len(cfg.ch_mult)
        self.conv_in = nn.Conv2d(3, cfg.ch, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        c_in = cfg.ch
        for level, mult in enumerate(cfg.ch_mult):
            block, c_out, last = Level(), cfg.ch * mult, level == levels - 1
            for _ in range(cfg.num_res_blocks):
                block.res.append(ResnetBlock(c_in, c_out))
                c_in = c_out
                if last:
                    block.attn.append(AttnBlock(c_in))
            if not last:
                block.downsample = Downsample(c_in)
            self.conv_blocks.append(block)
        self.mid = nn.ModuleList([ResnetBlock(c_in, c_in), AttnBlock(c_in), ResnetBlock(c_in, c_in)])
        self.norm_out = normalize(c_in)
        self.conv_out = nn.Conv2d(c_in, cfg.z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for block in self.conv_blocks:
            h = block(h)
        for layer in self.mid:
            h = layer(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        levels = len(cfg.ch_mult)
        c_in = cfg.ch * cfg.ch_mult[-1]
        self.conv_in = nn.Conv2d(cfg.z_channels, c_in, 3, padding=1)
        self.mid = nn.ModuleList([ResnetBlock(c_in, c_in), AttnBlock(c_in), ResnetBlock(c_in, c_in)])
        self.conv_blocks = nn.ModuleList()
        for level in reversed(range(levels)):
            block, c_out, last = Level(), cfg.ch * cfg.ch_mult[level], level == levels - 1
            for _ in range(cfg.num_res_blocks + 1):
                block.res.append(ResnetBlock(c_in, c_out))
                c_in = c_out
                if last:
                    block.attn.append(AttnBlock(c_in))
            if level != 0:
                block.upsample = Upsample(c_in)
            self.conv_blocks.append(block)
        self.norm_out = normalize(c_in)
        self.conv_out = nn.Conv2d(c_in, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        for layer in self.mid:
            h = layer(h)
        for block in self.conv_blocks:
            h = block(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(size, dim)
        # LlamaGen keeps a rolling record of recent code indices; kept for layout compatibility.
        self.register_buffer("codebook_used", torch.zeros(65536))

    def codebook(self) -> torch.Tensor:
        return F.normalize(self.embedding.weight, dim=-1)  # (V, d)

    def nearest(self, z: torch.Tensor) -> torch.Tensor:
        """z (B, d, H, W) -> code indices (B, H, W) of the nearest normalised codebook entry."""
        flat = F.normalize(z.permute(0, 2, 3, 1), dim=-1)  # (B, H, W, d)
        # Both sides have unit norm, so the nearest entry is the one with the largest dot product.
        return torch.einsum("bhwd,vd->bhwv", flat, self.codebook()).argmax(-1)

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, H, W) -> normalised entries (B, d, H, W)."""
        return self.codebook()[codes].permute(0, 3, 1, 2)


class VQModel(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.quantize = VectorQuantizer(cfg.codebook_size, cfg.codebook_embed_dim)
        self.quant_conv = nn.Conv2d(cfg.z_channels, cfg.codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(cfg.codebook_embed_dim, cfg.z_channels, 1)

    def encode_latent(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) in [-1, 1] -> unquantised latents (B, d, H/f, W/f)."""
        return self.quant_conv(self.encoder(images))

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) in [-1, 1] -> codes (B, H/f * W/f) in raster order."""
        return self.quantize.nearest(self.encode_latent(images)).flatten(1)

    def decode_latent(self, quant: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.post_quant_conv(quant))  # (B, 3, H, W)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, grid_size: int) -> torch.Tensor:
        """codes (B, grid^2) raster order -> images (B, 3, H, W) in [-1, 1]."""
        codes = codes.view(codes.shape[0], grid_size, grid_size)  # (B, G, G)
        return self.decode_latent(self.quantize.lookup(codes)).clamp(-1, 1)
