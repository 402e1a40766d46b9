"""Verification: one target pass over a draft tree (the bound rule then walks it, engine/rules/walks.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg, distribution
from engine.core.tree import DraftTree, mask_for_cache
from engine.model.kv_cache import KVCache
from engine.model.target import Target


@dataclass
class TargetPass:
    probs: np.ndarray  # (N, V) target distribution after each node
    hidden: torch.Tensor  # (R, N, D) target features of each node, rows (cond, null)


def target_pass(target: Target, cache: KVCache, committed: int, tree: DraftTree,
                sampling: SamplingConfig, rows: int) -> TargetPass:
    """Feed every tree node at sequence position committed + depth, cache slot committed + index."""
    device = cache.k.device
    n = tree.size
    mask = mask_for_cache(tree.ancestor_mask(), committed).to(device)  # (N, committed + N)
    positions = (committed + tree.depths).to(device)  # (N,)
    slots = torch.arange(committed, committed + n, device=device)  # (N,)
    h = target.embed_tokens(tree.tokens.to(device).expand(rows, n))  # (R, N, D)
    hidden = target(h, positions, cache, slots, mask)  # (R, N, D)
    logits = combine_cfg(target.logits(hidden), sampling.cfg_scale)  # (N, V)
    return TargetPass(distribution(logits, sampling).cpu().numpy(), hidden)
