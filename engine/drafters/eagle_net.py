"""The EAGLE drafter network: one Llama block over (token embedding, target feature) pairs.

Input at image position t is concat(embed(x_t), f_{t-1}), where f_{t-1} is the target's final-normed
hidden state at the position before (the one that predicted x_t). The output estimates f_t, and the
target's own LM head turns it into a distribution over x_{t+1}. The embedding and the head are the
target's, frozen and not stored with the drafter.
"""
from __future__ import annotations

import torch
from torch import nn

from engine.gpt import GPT, GPTConfig, TransformerBlock
from engine.kv_cache import KVCache


class EagleNet(nn.Module):
    """Configured by the target's own GPTConfig: its block has the target's width and heads."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(2 * cfg.dim, cfg.dim, bias=True)
        self.layer = TransformerBlock(cfg)
        # EAGLE's block has no input norm: the fused features enter attention as they are.
        self.layer.attention_norm = nn.Identity()

    def forward(self, token_embeddings: torch.Tensor, features: torch.Tensor, rope: torch.Tensor,
                cache: KVCache | None, slots: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """token_embeddings, features (R, T, D) -> predicted next features (R, T, D)."""
        h = self.fc(torch.cat([token_embeddings, features], dim=-1))  # (R, T, D)
        return self.layer(h, rope, 0, cache, slots, mask)

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        cfg = self.cfg
        weight = self.fc.weight
        return KVCache(1, rows, cfg.n_head, capacity, cfg.head_dim, dtype=weight.dtype, device=weight.device)


def training_forward(net: EagleNet, target: GPT, tokens: torch.Tensor, features: torch.Tensor,
                     noise: float, gen: torch.Generator | None) -> torch.Tensor:
    """Teacher-forced drafter features for whole sequences.

    tokens (B, N) image tokens; features (B, 1 + N, D) target features at the condition position and
    every image position. Row t pairs token x_t with f_{t-1} and is trained to predict f_t.
    """
    prev = features[:, :-1]  # (B, N, D)
    if noise > 0:
        prev = prev + (torch.rand(prev.shape, generator=gen).to(prev.device) * 2 - 1) * noise
    n = tokens.shape[1]
    positions = target.cfg.cls_token_num + torch.arange(n)  # x_t sits at sequence index cls + t
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return net(target.embed_tokens(tokens), prev, target.rope[positions], None, None, causal)
