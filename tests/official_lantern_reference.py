"""An independent re-implementation of `evaluate_posterior` in LANTERN's official code, for tests.

It follows that function's own structure (jadohu/LANTERN, models/ea_model_llamagen.py): the tree as
a padded table of root-to-leaf paths (`candidates`, -1 past a path's end) with the target's logits
at every path position; greedy decoding judges every path position at once with the total-variation
bookkeeping written as the official code writes it; sampling walks the levels, trying each distinct
child of the accepted prefix in path order. Uniform draws come from a list instead of `random`.
"""
from __future__ import annotations

import numpy as np
import torch


def paths_table(parents: list[int], tokens: list[int], lexicographic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(retrieve, candidates), both (P, L): node indices and tokens along each root-to-leaf path.
    Greedy keeps leaves in node order; sampling sorts paths lexicographically, padding last."""
    n = len(parents)
    leaves = [i for i in range(n) if i not in set(parents)]
    paths = []
    for leaf in leaves:
        path, node = [], leaf
        while node >= 0:
            path.append(node)
            node = parents[node]
        paths.append(path[::-1])
    length = max(len(p) for p in paths)
    if lexicographic:
        paths.sort(key=lambda p: p + [n + 5] * (length - len(p)))
    retrieve = torch.full((len(paths), length), -1, dtype=torch.long)
    for row, path in enumerate(paths):
        retrieve[row, : len(path)] = torch.tensor(path)
    token_table = torch.tensor(tokens + [-1])
    return retrieve, token_table[retrieve]


def greedy(logits: torch.Tensor, candidates: torch.Tensor, nearest: torch.Tensor, k: int,
           delta: float) -> tuple[int, int, int]:
    """(best path, accepted length, next token) for logits (P, L, V)."""
    gtp = torch.softmax(logits, dim=-1)
    xi = candidates[:, 1:]
    valid = xi != -1
    xi_valid = torch.where(valid, xi, torch.zeros_like(xi))
    px = gtp[:, :-1].gather(-1, xi_valid[..., None])[..., 0] * valid
    near = nearest[xi_valid][:, :, :k].clone()
    near[~valid[..., None].expand_as(near)] = 0
    near_p = gtp[:, :-1].gather(-1, near) * valid[..., None]
    cum = torch.cumsum(near_p, dim=-1)
    px_k = px[..., None].repeat(1, 1, k)
    approx = (px_k + cum) * valid[..., None]
    target_p = torch.cat([px_k, near_p], dim=-1) * valid[..., None]
    approx_full = torch.cat([approx, torch.zeros_like(near_p)], dim=-1) * valid[..., None]
    tvd = torch.nan_to_num(0.5 * torch.abs(target_p - approx_full), nan=0.0)
    tvd = tvd[:, :, :k] + torch.cumsum(tvd[:, :, k:], dim=-1)
    tvd[~valid] = float("inf")
    within = tvd <= ((delta - 1) * px[..., None] if delta > 1.0 else delta)
    index = torch.arange(k).expand_as(tvd)
    last = torch.where(within, index, torch.full_like(index, -1)).max(dim=-1).values
    has = last >= 0
    adjusted = torch.where(has, approx.gather(-1, (last * has)[..., None])[..., 0], px) * valid
    gtp[:, :-1].scatter_(-1, xi_valid[..., None], adjusted[..., None])
    top = torch.argmax(gtp, dim=-1)[:, :-1]
    lengths = torch.cumprod(((xi == top) & valid).int(), dim=1).sum(dim=1)
    accept = int(lengths.max())
    best = int(torch.argmax(lengths)) if accept > 0 else 0
    return best, accept, int(torch.argmax(logits[best, accept]))


def sampling(logits: torch.Tensor, candidates: torch.Tensor, nearest: torch.Tensor, k: int,
             delta: float, uniforms: list[float],
             drafts: torch.Tensor | None = None) -> tuple[int, int, torch.Tensor, list[float]]:
    """(best path, accepted drafts, the distribution of the next token, each tested child's
    acceptance probability) for logits (P, L, V) that need no further processing.

    Without `drafts` this is `evaluate_posterior` (a dynamic tree's deterministic drafts, q = 1);
    with the draft distribution at every path position, drafts (P, L, V), it is the sampling branch
    of `evaluate_posterior_v1` (a static tree's children drawn without replacement)."""
    draws = iter(uniforms)
    accept_length, accept_cand, best = 1, candidates[0, :1], 0
    probs_seen = []
    adjusted = False
    gtp = None
    for i in range(1, candidates.shape[1]):
        if i != accept_length:
            break
        adjusted = False
        same = (candidates[:, :accept_length] == accept_cand).all(dim=1)
        first = int(torch.nonzero(same)[0, 0])
        gtp = torch.softmax(logits[first, i - 1], dim=0)
        tried = []
        for j in range(candidates.shape[0]):
            if not same[j]:
                continue
            x = int(candidates[j, i])
            if x in tried or x == -1:
                continue
            tried.append(x)
            r = next(draws)
            px = gtp[x]
            cum = torch.cumsum(gtp[nearest[x, :k]], dim=0)
            bound = (delta - 1) * px if delta > 1.0 else delta
            inside = (cum <= bound).nonzero()[:, 0]
            last = int(inside[-1]) if inside.numel() else -1
            if last != -1:
                px = px + cum[last]
            q = None
            if drafts is not None:  # the parent's draft distribution without the siblings tried
                q = drafts[j, i - 1].clone()
                if tried[:-1]:
                    q[torch.tensor(tried[:-1])] = 0
                    q = q / q.sum()
            qx = 1.0 if q is None else q[x]
            probs_seen.append(min(1.0, float(px / qx)))
            if r <= px / qx:
                accept_cand = torch.cat([accept_cand, candidates[j, i : i + 1]])
                accept_length += 1
                best = j
                break
            if q is None:
                gtp[x] = 0
                if last != -1:
                    gtp[nearest[x, : k + 1]] = 0
            else:
                if last != -1:
                    q[nearest[x, : k + 1]] = 0
                gtp = (gtp - q).clamp(min=0)
            if gtp.sum() == 0:
                gtp = torch.ones_like(gtp)
            gtp = gtp / gtp.sum()
            adjusted = True
    if adjusted and accept_length != candidates.shape[1]:
        final = gtp
    else:
        final = torch.softmax(logits[best, accept_length - 1], dim=0)
    return best, accept_length - 1, final, probs_seen


def random_nearest(vocab: int, rng: np.random.Generator) -> torch.Tensor:
    """(V, V - 1): a random order of the other codes for each code, as a stand-in codebook's."""
    rows = []
    for code in range(vocab):
        others = np.array([c for c in range(vocab) if c != code])
        rows.append(rng.permutation(others))
    return torch.from_numpy(np.stack(rows)).long()
