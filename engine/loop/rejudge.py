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
    exactly."""
    if trace.inputs is None:
        raise InvalidInput(f"step {trace.step} kept no inputs to judge again; decode with keep_inputs=True")
    inputs = trace.inputs
    q_dists = None if inputs.q_dists is None else torch.from_numpy(inputs.q_dists)
    tree = DraftTree(torch.from_numpy(trace.tree_tokens), torch.from_numpy(trace.tree_parents),
                     torch.from_numpy(trace.tree_q), q_dists)
    return rule.walk(tree, inputs.probs, inputs.uniforms)
