"""What the decoding loop and the drafters use of a target GPT.

engine.model.gpt.GPT has this shape, and so has engine.loading.t2i.PromptTarget (a text-to-image GPT bound to one
prompt); anything else with it can be decoded from.
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from engine.model.gpt import GPTConfig, Rotation
from engine.model.kv_cache import KVCache


class Target(Protocol):
    cfg: GPTConfig  # sizes: layers, heads, vocabulary, grid, condition prefix length
    rope: torch.Tensor  # (cls_token_num + grid^2, head_dim // 2, 2) float32 cos/sin by sequence position
    output: nn.Linear  # the vocabulary projection; its weight's device and dtype are the model's

    @property
    def null_class(self) -> int:
        """The class id of CFG's null condition."""

    def rotation_at(self, positions: torch.Tensor) -> Rotation:
        """The rope rotation at sequence `positions` (T,); drafters rotate their own queries and keys by it."""

    def embed_condition(self, class_ids: torch.Tensor) -> torch.Tensor:
        """class_ids (R,) -> the condition prefix (R, cls_token_num, D)."""

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (R, T) -> embeddings (R, T, D)."""

    def __call__(self, h: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None,
                 slots: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """h (R, T, D) at sequence `positions` (T,), keys and values written to cache `slots` (T,),
        `mask` (T, S) the slots each query sees -> final-normed hidden (R, T, D)."""

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (R, T, D) -> float32 logits (R, T, V)."""
