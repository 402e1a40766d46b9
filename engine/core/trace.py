"""One record per decoding step: what was drafted, what the target said, what was kept.

The benchmark and the explorer read these records; nothing else about a method is special-cased.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Verdict:
    """A rule's judgement of one drafted token: what the rule saw, what it decided."""

    token: int
    accept_prob: float
    accepted: bool
    neighbours: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # tokens credited to x
    neighbour_mass: np.ndarray = field(default_factory=lambda: np.zeros(0))  # their target mass
    token_prob: float = 0.0  # the target's p(x), before any relaxation
    latent_probs: np.ndarray = field(default_factory=lambda: np.zeros(0))  # p on all k latent neighbours
    node: int = -1  # index in the draft tree, set by the walk
    # (V,) what the next try at this position is judged against (or the bonus drawn from); the walk
    # drops it once it has moved on, so that traces stay small.
    residual: np.ndarray | None = None


@dataclass
class PassInputs:
    """What a step's walk judged the drafts on, kept on request (decode's keep_inputs), so that the same
    drafts can be judged again under another rule or setting (engine.loop.rejudge) without a new pass."""

    probs: np.ndarray  # (N, V) the target's p after each node, filtered as the rule asked
    q_dists: np.ndarray | None  # (N, V) what sampled drafts were drawn from; None for deterministic ones
    uniforms: np.ndarray  # (N + 1,) float64, the walk's random draws in the order it used them


@dataclass
class StepTrace:
    step: int
    tree_tokens: np.ndarray  # (N,) root first
    tree_parents: np.ndarray  # (N,)
    tree_depths: np.ndarray  # (N,)
    tree_q: np.ndarray  # (N,) draft probability of each node
    verdicts: list[Verdict]  # one per tested node, in the order tested
    accepted_nodes: list[int]  # accepted draft nodes, root excluded, root to leaf
    new_tokens: list[int]  # tokens produced this step: accepted drafts, then the bonus token
    new_positions: list[int]  # their indices in the image's raster order
    bonus_from_draft: list[bool]  # per new token: True if it was a drafted token
    entropy_bits: list[float]  # entropy of p at each position this step decided
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    accept_ms: float = 0.0
    # (T,) the image's tokens in raster order up to the last one decided, -1 where a row-parallel
    # decode has not decided yet
    tokens_so_far: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # The node index where each tree of the pass starts: [0] in raster order, a tree per row in flight
    # when rows are decided in parallel (engine/drafters/wavefront.py)
    tree_roots: list[int] = field(default_factory=lambda: [0])
    # (N,) the raster index whose input each node is (a root's own position, then one per depth);
    # empty for a pass that decided nothing but the first token
    tree_positions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stand_ins: list[int] = field(default_factory=list)  # roots fed for a row's first token, never kept
    lanes: int = 1  # trees that decided tokens: 1 in raster order, the rows in flight when in parallel
    inputs: PassInputs | None = None  # kept only when the decode was asked to keep them

    @property
    def accepted_length(self) -> int:
        """Tokens this target pass produced (accepted drafts + 1): its mean is MAL."""
        return len(self.new_tokens)

    @property
    def decided(self) -> int:
        """Tokens decided so far (in raster order the length of tokens_so_far; rows decided in parallel
        leave -1 where a row has not caught up)."""
        return int((self.tokens_so_far >= 0).sum())

    @property
    def drafted(self) -> int:
        return len(self.tree_tokens) - len(self.tree_roots)


def mean_accepted_length(steps: Sequence[StepTrace]) -> float:
    """MAL: tokens per target pass over decoding steps (pass a run's traces[1:]: the prefill's pass
    drafts nothing)."""
    return sum(t.accepted_length for t in steps) / max(1, len(steps))
