"""What happened at one token position: the drafts tried there, what the target said, what was kept."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.views.render import step_of_position
from engine.core.trace import StepTrace, Verdict


@dataclass
class TokenDetail:
    step: int
    position: int
    token: int  # the token finally placed at the position
    from_draft: bool  # an accepted draft (True) or the target's own bonus/correction draw
    candidates: list[Verdict]  # the drafts tried at the position, in the order the rule tried them
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
    # The position's drafts are the nodes placed there whose parent was kept: a tree's root (a row's,
    # when rows are decided in parallel) or an accepted draft.
    kept = set(trace.tree_roots) | set(trace.accepted_nodes)
    candidates = [v for v in trace.verdicts
                  if int(trace.tree_positions[v.node]) == position and int(trace.tree_parents[v.node]) in kept]
    return TokenDetail(step, position, int(trace.new_tokens[offset]), bool(trace.bonus_from_draft[offset]),
                       candidates, [c.node for c in candidates])


def first_position(trace: StepTrace) -> int | None:
    """The first position a step decided: where the scrubber points the inspector."""
    return trace.new_positions[0] if trace.new_positions else None
