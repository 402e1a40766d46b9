"""The drafter interface and the empty drafter of vanilla decoding."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.tree import DraftTree
from engine.drafters.wavefront import Wavefront
from engine.model.target import Target
from engine.rules.acceptance import BoundRule


@dataclass
class DecodeState:
    """What a drafter may read: the target, the tokens so far, the sampling setup and the rule."""

    target: Target
    class_id: int
    rows: int  # 2 with CFG (cond, null), else 1
    sampling: SamplingConfig
    rule: BoundRule  # the rule judging this decode's drafts
    generator: torch.Generator
    tokens: list[int]  # the image's tokens in raster order up to the lane's next position
    num_tokens: int  # tokens in a whole image
    lane_start: int = 0  # raster index of the first token the drafter's lane decides (a row's, in parallel)
    # The target feature (R, D) that predicted each decided position, by raster index: where a row
    # decided in parallel learns what was decided above it.
    predicting: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def row_class_ids(self) -> torch.Tensor:
        ids = [self.class_id, self.target.null_class][: self.rows]
        return torch.tensor(ids, device=self.target.output.weight.device)


class Drafter:
    """Proposes a tree rooted at the last accepted token. The base class drafts nothing."""

    def reset(self, state: DecodeState, prefix_hidden: torch.Tensor) -> None:
        """Called after the target has read the condition; prefix_hidden is (R, P, D)."""

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        return DraftTree.root_only(root)

    def largest_tree(self) -> int:
        """The most nodes, root included, one pass may verify: the target's cache keeps room for them."""
        return 1

    def wavefront(self, grid: int) -> Wavefront:
        """The lanes an image of grid x grid tokens is decided in, each with its drafter: one lane in
        raster order, drafted by this drafter (engine.drafters.rows drafts a lane per row)."""
        return Wavefront.raster(grid * grid, self)

    def observe(self, state: DecodeState, tree: DraftTree, kept: list[int], hidden: torch.Tensor,
                probs: np.ndarray) -> None:
        """Called after verification with the kept nodes (root first), the target features of every
        tree node, hidden (R, N, D), and the target distribution after every node, probs (N, V)."""
