"""A static draft tree (EAGLE-1 style), the tree LANTERN++ drafts with.

The tree's shape is fixed: a list of paths of draft ranks, e.g. (0, 1) = the second-best child of
the best child of the root. Each level runs the EAGLE network once on every node that has children
there, and each child takes the drafter's token of its rank. Unlike EAGLE-2's dynamic tree, no
confidence score decides where the tree grows, which LANTERN++ found to suit relaxed acceptance,
where a flat draft distribution says little about what will be accepted.
"""
from __future__ import annotations

import torch

from engine.config import InvalidInput
from engine.drafters.base import DecodeState
from engine.drafters.eagle import EagleDrafter
from engine.drafters.eagle_net import EagleNet
from engine.tree import DraftTree

Choices = tuple[tuple[int, ...], ...]

# Chosen by measurement on the embedded model (2-core CPU): three drafter calls, seven tokens.
DEFAULT_CHOICES: Choices = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
MAX_RANK, MAX_NODES = 32, 128


def parse_choices(text: str) -> Choices:
    """'0 1 0.0 0.1' -> ((0,), (1,), (0, 0), (0, 1)): paths of ranks, dots between levels."""
    try:
        paths = tuple(tuple(int(r) for r in path.split(".")) for path in text.split())
    except ValueError:
        raise InvalidInput(f"static tree {text!r} is not a list of rank paths; allowed: e.g. "
                           "'0 1 2 0.0 0.1 1.0 0.0.0' (ranks separated by dots, paths by spaces)") from None
    return check_choices(paths)


def check_choices(paths: Choices) -> Choices:
    """Sort the paths level by level, best ranks first, after checking that they form a tree."""
    if not 1 <= len(paths) <= MAX_NODES:
        raise InvalidInput(f"static tree has {len(paths)} nodes; allowed: 1 to {MAX_NODES}")
    present = set(paths)
    for path in paths:
        if not path or any(not 0 <= r < MAX_RANK for r in path):
            raise InvalidInput(f"static tree path {'.'.join(map(str, path))!r} is out of range; "
                               f"allowed: ranks 0 to {MAX_RANK - 1}")
        if len(path) > 1 and path[:-1] not in present:
            raise InvalidInput(f"static tree path {'.'.join(map(str, path))!r} has no parent "
                               f"{'.'.join(map(str, path[:-1]))!r}")
    return tuple(sorted(present, key=lambda p: (len(p), p)))


class StaticTreeDrafter(EagleDrafter):
    def __init__(self, net: EagleNet, choices: Choices = DEFAULT_CHOICES, rule=None):
        super().__init__(net, None, rule)
        self.choices = check_choices(choices)
        self.depth = max(len(c) for c in self.choices)
        self.width = max(c[-1] for c in self.choices) + 1

    def draft_room(self) -> int:
        return len(self.choices)

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        choices = [c for c in self.choices if len(c) <= max_depth]
        out = self._catch_up(state)  # (R, n, D)
        predicted = {(): out[:, -1]}  # path -> the drafter's feature at that node, (R, D)
        node_of: dict[tuple[int, ...], int] = {}
        tokens, parents, qs = [], [], []
        fed_slot: dict[int, int] = {}
        for level in range(1, self.depth + 1):
            level_paths = [c for c in choices if len(c) == level]
            if not level_paths:
                break
            expanding = sorted({c[:-1] for c in level_paths}, key=lambda p: (len(p), p))
            if level > 1:  # run the drafter on this level's parents, each fed its own parent's feature
                first_slot = self.committed + len(fed_slot)
                for i, path in enumerate(expanding):
                    fed_slot[node_of[path]] = first_slot + i
                rows = [node_of[p] for p in expanding]
                features = torch.stack([predicted[p[:-1]] for p in expanding], dim=1)  # (R, F, D)
                out = self._run(state, torch.tensor([tokens[n] for n in rows]), features,
                                torch.full((len(rows),), level - 1),
                                first_slot, self._tree_mask(rows, parents, fed_slot))  # (R, F, D)
                predicted.update({p: out[:, i] for i, p in enumerate(expanding)})
            q = self._draft_probs(state, torch.stack([predicted[p] for p in expanding], dim=1))  # (F, V)
            top_q, top_tokens = q.topk(self.width, dim=-1)  # (F, width)
            row_of = {p: i for i, p in enumerate(expanding)}
            for path in level_paths:
                row, rank = row_of[path[:-1]], path[-1]
                node_of[path] = len(tokens)
                tokens.append(int(top_tokens[row, rank]))
                parents.append(node_of.get(path[:-1], -1))
                qs.append(float(top_q[row, rank]))
        return DraftTree(torch.tensor([root] + tokens),
                         torch.tensor([-1] + [p + 1 for p in parents]),
                         torch.tensor([1.0] + qs, dtype=torch.float64))
