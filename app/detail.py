"""What happened at one token position: the drafts tried there, what the target said, what was kept."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.render import step_of_position
from engine.trace import StepTrace


@dataclass
class Candidate:
    """One drafted token tested at the position, in the order the rule tried it."""

    node: int  # index in that step's draft tree
    token: int
    accept_prob: float  # min(1, relaxed p(x) / q(x)); 0 or 1 under greedy decoding
    accepted: bool
    used: np.ndarray  # LANTERN's A \ {x}: neighbours whose target mass moved onto x
    used_mass: np.ndarray  # their target probabilities
    token_prob: float  # the target's p(x) before relaxation
    latent_probs: np.ndarray  # the target's p on all k latent neighbours of x, nearest first


@dataclass
class TokenDetail:
    step: int
    position: int
    token: int  # the token finally placed at the position
    from_draft: bool  # an accepted draft (True) or the target's own bonus/correction draw
    candidates: list[Candidate]
    tree_nodes: list[int]  # nodes of the step's tree that decided this position

    @property
    def drafted(self) -> int | None:
        """The drafter's first guess for this position (None when nothing was drafted)."""
        return self.candidates[0].token if self.candidates else None


def token_detail(traces: Sequence[StepTrace], position: int) -> TokenDetail | None:
    """The story of `position`; None while it has not been produced."""
    found = step_of_position(traces, position)
    if found is None:
        return None
    step, offset = found
    trace = traces[step]
    # The position's drafts are the children of the node accepted just before it (the root first).
    parent = 0 if offset == 0 else trace.accepted_nodes[offset - 1]
    candidates = [Candidate(v.node, v.token, float(v.accept_prob), bool(v.accepted),
                            np.asarray(v.neighbours, np.int64), np.asarray(v.neighbour_mass, float),
                            float(v.token_prob), np.asarray(v.latent_probs, float))
                  for v in trace.verdicts if int(trace.tree_parents[v.node]) == parent]
    return TokenDetail(step, position, int(trace.new_tokens[offset]), bool(trace.bonus_from_draft[offset]),
                       candidates, [c.node for c in candidates])


def first_position(trace: StepTrace) -> int | None:
    """The first position a step decided: where the scrubber points the inspector."""
    return trace.new_positions[0] if trace.new_positions else None
