"""The walks a bound rule takes through a verified draft tree."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.core.trace import Verdict
from engine.core.tree import DraftTree

if TYPE_CHECKING:
    from engine.rules.acceptance import BoundRule


@dataclass
class WalkResult:
    accepted_nodes: list[int]  # root excluded
    next_token: int  # bonus / correction token drawn at the deepest accepted node
    verdicts: list[Verdict]


def _recorded(verdict: Verdict, node: int) -> Verdict:
    """The verdict as the trace keeps it: placed in the tree, without its residual."""
    verdict.node, verdict.residual = node, None
    return verdict


def siblings_in_turn(tree: DraftTree, probs: np.ndarray, rule: BoundRule, uniforms: np.ndarray) -> WalkResult:
    """Descend from the root, trying each node's children in order; stop at the first node none
    of whose children is accepted and draw the next token there from the residual."""
    children = tree.children()
    tokens = tree.tokens.tolist()
    q_dists = tree.q_dists.cpu().numpy() if tree.q_dists is not None else None
    node, draws = 0, 0
    accepted: list[int] = []
    verdicts: list[Verdict] = []
    while True:
        residual = probs[node]
        moved_on = False
        judge = rule.at_depth(len(accepted) + 1)  # the children's depth in the draft
        for child in children[node]:
            verdict = judge.test(residual, tokens[child], None if q_dists is None else q_dists[child], uniforms[draws])
            draws += 1
            residual = residual if verdict.accepted else verdict.residual
            verdicts.append(_recorded(verdict, child))
            if verdict.accepted:
                node, moved_on = child, True
                accepted.append(child)
                break
        if not moved_on:
            return WalkResult(accepted, rule.next_token(probs[node], residual, uniforms[draws]), verdicts)


def longest_path(tree: DraftTree, probs: np.ndarray, rule: BoundRule) -> WalkResult:
    """Every node judged on its parent's own distribution: keep the longest run of passing nodes from
    the root along any root-to-leaf path (leaves in node order, the first path winning ties), then
    take the next token where that run ends."""
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    verdicts = [_recorded(rule.test(probs[parents[node]], tokens[node], None, 0.0), node)
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
    return WalkResult(best, rule.next_token(probs[end], probs[end], 0.0), verdicts)
