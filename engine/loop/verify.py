"""Verification: one target pass over a draft tree, then the rule's walk down the tree."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg, distribution, pick
from engine.core.trace import Verdict
from engine.core.tree import DraftTree, mask_for_cache
from engine.model.gpt import GPT
from engine.model.kv_cache import KVCache
from engine.rules.acceptance import Rule


@dataclass
class TargetPass:
    probs: np.ndarray  # (N, V) target distribution after each node
    hidden: torch.Tensor  # (R, N, D) target features of each node, rows (cond, null)


def target_pass(target: GPT, cache: KVCache, committed: int, tree: DraftTree,
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


@dataclass
class WalkResult:
    accepted_nodes: list[int]  # root excluded
    next_token: int  # bonus / correction token drawn at the deepest accepted node
    verdicts: list[Verdict]


def walk(tree: DraftTree, probs: np.ndarray, rule: Rule, greedy: bool,
         uniforms: np.ndarray) -> WalkResult:
    """Decide the tree with the rule: the accepted path, then the next token where it ends."""
    if greedy and rule.judges_paths:
        return _longest_path(tree, probs, rule)
    return _siblings_in_turn(tree, probs, rule, greedy, uniforms)


def _recorded(verdict: Verdict, node: int) -> Verdict:
    """The verdict as the trace keeps it: placed in the tree, without its residual."""
    verdict.node, verdict.residual = node, None
    return verdict


def _siblings_in_turn(tree: DraftTree, probs: np.ndarray, rule: Rule, greedy: bool,
                      uniforms: np.ndarray) -> WalkResult:
    """Descend from the root, trying each node's children in order; stop at the first node none
    of whose children is accepted and draw the next token there from the residual."""
    children = tree.children()
    tokens = tree.tokens.tolist()
    q_dists = tree.q_dists.cpu().numpy() if tree.sampled else None
    node, accepted, verdicts, draws = 0, [], [], 0
    while True:
        residual = probs[node]
        moved_on = False
        for child in children[node]:
            verdict = rule.test(residual, tokens[child], None if q_dists is None else q_dists[child],
                                greedy, uniforms[draws])
            draws += 1
            residual = residual if verdict.accepted else verdict.residual
            verdicts.append(_recorded(verdict, child))
            if verdict.accepted:
                node, moved_on = child, True
                accepted.append(child)
                break
        if not moved_on:
            # Greedy decoding takes the target's own argmax, as vanilla greedy would.
            token = pick(probs[node] if greedy else residual, uniforms[draws], greedy)
            return WalkResult(accepted, token, verdicts)


def _longest_path(tree: DraftTree, probs: np.ndarray, rule: Rule) -> WalkResult:
    """Greedy, every node judged on its parent's own distribution: keep the longest run of passing
    nodes from the root along any root-to-leaf path (leaves in node order, the first path winning
    ties), then take the argmax where that run ends."""
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    verdicts = [_recorded(rule.test(probs[parents[node]], tokens[node], None, True, 0.0), node)
                for node in range(1, tree.size)]
    passes = [True] + [v.accepted for v in verdicts]
    best: list[int] = []
    for path in tree.paths():
        run = []
        for node in path[1:]:
            if not passes[node]:
                break
            run.append(node)
        if len(run) > len(best):
            best = run
    end = best[-1] if best else 0
    return WalkResult(best, pick(probs[end], 0.0, True), verdicts)
