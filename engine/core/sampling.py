"""The one place where logits become distributions and distributions become tokens.

CFG, temperature, top-k and top-p apply the same way to the target and to every drafter. Random
draws take uniforms that the caller drew from an explicit `torch.Generator`, so a seed reproduces a
run exactly.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.core.config import SamplingConfig


def combine_cfg(logits: torch.Tensor, scale: float) -> torch.Tensor:
    """logits (R, T, V) with R = 2 (cond, null) or 1 -> guided logits (T, V): u + s (c - u).

    Works on any (R, T, X) pair of rows, such as features that a linear head turns into logits."""
    if logits.shape[0] == 1:
        return logits[0]
    cond, uncond = logits[0], logits[1]
    return uncond + scale * (cond - uncond)


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float,
                       top_p_first: bool = False) -> torch.Tensor:
    """Set logits outside the top-k and outside the top-p nucleus to -inf. logits (T, V)."""
    if top_p_first:
        return _top_k(_top_p(logits, top_p), top_k)
    return _top_p(_top_k(logits, top_k), top_p)


def _top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (T, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def _top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (T, V)
        sorted_probs = sorted_logits.softmax(-1)  # (T, V)
        # Drop a token when the mass before it already reaches top_p; the first always stays.
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def nucleus(probs: torch.Tensor, top_p: float, first_look: int = 64) -> torch.Tensor:
    """A distribution (V,) renormalised over its top-p nucleus, the tokens `_top_p` keeps: the most
    probable ones until the mass before a token reaches top_p. Only the top `first_look` are sorted
    unless the nucleus is larger: a sort of the whole codebook per drafted node costs a fifth of a
    drafter call, and a drafter's nucleus is usually a few dozen codes."""
    probs = probs / probs.sum()
    look = min(first_look, probs.shape[0])
    while True:
        top, tokens = probs.topk(look)  # (look,) most probable first
        kept = int(((top.cumsum(0) - top) < top_p).sum())
        if kept < look or look == probs.shape[0]:
            break
        look = min(4 * look, probs.shape[0])
    inside = torch.zeros_like(probs).index_copy_(0, tokens[:kept], top[:kept])  # (V,)
    return inside / inside.sum()


def distribution(logits: torch.Tensor, sampling: SamplingConfig,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Guided logits (T, V) -> probabilities (T, V), float64 unless a drafter asks for less.

    Greedy decoding (temperature 0) keeps the temperature-1 distribution: its argmax is the greedy
    token, and LANTERN's relaxation needs the probabilities themselves.
    """
    scaled = logits.float()
    if not sampling.greedy and sampling.temperature != 1.0:  # dividing by 1 would change nothing
        scaled = scaled / sampling.temperature
    filtered = filter_top_k_top_p(scaled, sampling.top_k, sampling.top_p, sampling.top_p_first)
    return filtered.to(dtype).softmax(-1)


def entropy_bits(probs: np.ndarray) -> np.ndarray:
    """Entropy in bits of each row of probs (..., V)."""
    safe = np.where(probs > 0, probs, 1.0)
    return -(probs * np.log2(safe)).sum(-1)


def draw(probs: np.ndarray, uniform: float) -> int:
    """Inverse-CDF draw from an unnormalised probability vector (V,) with one uniform in [0, 1)."""
    cumulative = np.cumsum(probs)
    index = int(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"))
    index = min(index, len(probs) - 1)
    while probs[index] <= 0:  # never land on a zero-probability token through rounding
        index -= 1
    return index


def pick(probs: np.ndarray, uniform: float, greedy: bool) -> int:
    return int(np.argmax(probs)) if greedy else draw(probs, uniform)
