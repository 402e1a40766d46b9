"""The same drafts judged again: a decoded step's tree, target probabilities and random draws walked
by another rule or setting, with no new target pass.

What a step would have kept under another delta or k, all else equal. The decode itself would differ
from that step on (other tokens, other drafts), so this answers "how would these drafts fare", not
"what would that decode do": only a new decode answers that.
"""
from __future__ import annotations

import torch

from engine.core.config import InvalidInput
from engine.core.trace import StepTrace
from engine.core.tree import DraftTree
from engine.rules.acceptance import BoundRule
from engine.rules.walks import WalkResult


def rejudge(trace: StepTrace, rule: BoundRule) -> WalkResult:
    """`rule`'s walk over the step's own tree, target probabilities and random draws. At the decode's
    own rule and setting (engine.methods.bound_rule makes it) it gives the step's recorded verdicts
    exactly. A pass of several rows (engine/drafters/wavefront.py) walks each row's tree: their accepted
    drafts and verdicts joined, numbered over the pass's trees, with the last row's next token."""
    walks = rejudge_rows(trace, rule)
    return WalkResult([node for walk in walks for node in walk.accepted_nodes], walks[-1].next_token,
                      [verdict for walk in walks for verdict in walk.verdicts])


def rejudge_rows(trace: StepTrace, rule: BoundRule) -> list[WalkResult]:
    """One walk per tree that decided tokens in the step (one in raster order), nodes numbered over
    the step's trees as its trace numbers them."""
    if trace.inputs is None:
        raise InvalidInput(f"step {trace.step} kept no inputs to judge again; decode with keep_inputs=True")
    inputs = trace.inputs
    ends = [*trace.tree_roots[1:], len(trace.tree_tokens)]
    walks, drawn = [], 0
    for start, end in list(zip(trace.tree_roots, ends))[: trace.lanes]:
        parents = torch.from_numpy(trace.tree_parents[start:end]).clone()  # (n,)
        parents[parents >= 0] -= start
        q_dists = None if inputs.q_dists is None else torch.from_numpy(inputs.q_dists[start:end])
        tree = DraftTree(torch.from_numpy(trace.tree_tokens[start:end]), parents,
                         torch.from_numpy(trace.tree_q[start:end]), q_dists)
        walk = rule.walk(tree, inputs.probs[start:end], inputs.uniforms[drawn:drawn + tree.size + 1])
        drawn += tree.size + 1
        for verdict in walk.verdicts:
            verdict.node += start
        walks.append(WalkResult([start + node for node in walk.accepted_nodes], walk.next_token, walk.verdicts))
    return walks
