"""Attention over the cache, with a row-exact form for greedy decoding with bfloat16 products.

Greedy speculative decoding claims vanilla's tokens, so a verified tree's rows must compute what
one-token passes compute. In float32 products a last-bit difference only matters at a near-tie,
which is rare. With products in bfloat16 each product rounds its input, so a last-bit difference
in the attention's output moves the next product's rounding and reaches the logits; greedy decoding
then parts from vanilla at the first near-tie (at tokens 7-223 of the 8 pictures).

SDPA on CPU orders its sums by the number of query rows and by where the visible slots lie, so a
one-token pass and a tree's batched pass differ in those bits. The row-exact form gives each row
the bits of a one-token pass (tested in tests/test_gpt.py and on the shipped model):
* two batched products, whose per-row sums run over the slots in order, whatever the number of
  rows from ROW_EXACT_MIN_ROWS up; fewer rows take kernels that sum in other orders (up to two on
  an Intel Xeon, up to three on an AMD EPYC), so a one-token pass repeats its row up to that count;
* no softmax: its vectorised sum over a row depends on where the visible slots lie, and a tree
  row's ancestors have its siblings between them. The exponentials are summed by the second
  product instead, over a column of ones that the cache keeps after the values, in the values'
  slot order;
* slots rounded up to blocks of ROW_EXACT_SLOT_BLOCK, hidden: tiny products take other kernels.
  Hidden slots contribute exact zeros;
* the second product in float64, rounded to float32 at the end: some kernels split a long sum in
  parts and add the parts, and where the parts' border falls among a tree row's visible slots
  depends on how many siblings lie between them (on an AMD EPYC the batched product splits sums
  of more than about 190 slots in halves, and float32 results part from 192 slots on). In float64
  another order moves a sum by some 2^-53 of its terms' size a term, far below a float32 unit in
  the last place (2^-24), so the rounded bits agree unless a value lies that close to a rounding
  boundary.
This costs two to three times what SDPA does (174 against 56 us a layer at one row and 130 slots,
194 against 80 at seven rows, on an Intel Xeon with the second product in float32; on an AMD EPYC
its float64 costs 271 against 186 us at one row and 321 against 211 at seven), so only greedy
decoding with bfloat16 products takes it; float64 SDPA, used before (97 and 147 us), made the
differences rarer, not absent.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.model.matmul import product_dtype

ROW_EXACT_MIN_ROWS = 4
ROW_EXACT_SLOT_BLOCK = 64


def needs_row_exact(weight: torch.Tensor, greedy: bool) -> bool:
    """Whether a float32 target whose output weight is `weight` must attend row-exactly: when decoding
    greedily with products in bfloat16. Sampling claims the target's distribution, not its bits."""
    return greedy and weight.dtype == torch.float32 and product_dtype(weight) == torch.bfloat16


def row_exact_mask(mask: torch.Tensor, capacity: int) -> torch.Tensor:
    """mask (T, S) bool -> (T, S') with S' the next multiple of ROW_EXACT_SLOT_BLOCK (at most
    `capacity`), the new slots hidden: tiny products take other kernels, which sum in other orders."""
    slots = min(-(-mask.shape[-1] // ROW_EXACT_SLOT_BLOCK) * ROW_EXACT_SLOT_BLOCK, capacity)
    return F.pad(mask, (0, slots - mask.shape[-1]), value=False)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           row_exact: bool) -> torch.Tensor:
    """q (B, H, T, hd) over k (B, H, S, hd) and v (B, H, S, hd), or row-exactly over v (B, H, S, hd + 1)
    whose last column is ones (engine.model.kv_cache), `mask` (T, S) additive -> (B, H, T, hd)."""
    if not row_exact:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    rows = q.shape[2]
    if rows < ROW_EXACT_MIN_ROWS:
        extra = ROW_EXACT_MIN_ROWS - rows
        q = torch.cat([q, q[:, :, -1:].expand(-1, -1, extra, -1)], dim=2)  # (B, H, ROW_EXACT_MIN_ROWS, hd)
        if mask is not None:
            mask = torch.cat([mask, mask[-1:].expand(extra, -1)])  # (ROW_EXACT_MIN_ROWS, S)
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))  # (B, H, T', S)
    if mask is not None:
        scores = scores + mask
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # (B, H, T', S)
    summed = torch.matmul(weights.double(), v.double())[:, :, :rows]  # (B, H, T, hd + 1)
    return (summed[..., :-1] / summed[..., -1:]).to(q.dtype)  # (B, H, T, hd)
