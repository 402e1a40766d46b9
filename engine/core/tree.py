"""Draft trees: node 0 is the root (the last accepted token, not yet seen by the target).

A chain is a tree in which every node has one child; vanilla decoding drafts the root alone.
Children of a node are listed in the order the rule should try them (best draft first).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class DraftTree:
    tokens: torch.Tensor  # (N,) int64, tokens[0] = root
    parents: torch.Tensor  # (N,) int64, parents[0] = -1, parents[i] < i
    q: torch.Tensor  # (N,) float64, draft probability of each node's token (1 for the root)
    q_dists: torch.Tensor | None = None  # (N, V) the distribution each node was sampled from

    def __post_init__(self) -> None:
        self.depths = depths_of(self.parents)  # (N,)

    @classmethod
    def root_only(cls, token: int) -> DraftTree:
        return cls(torch.tensor([token]), torch.tensor([-1]), torch.ones(1, dtype=torch.float64))

    @classmethod
    def chain(cls, tokens: torch.Tensor, q: torch.Tensor, q_dists: torch.Tensor | None = None) -> DraftTree:
        """tokens (N,) with tokens[0] the root; each node the child of the one before."""
        parents = torch.arange(-1, len(tokens) - 1)
        return cls(tokens, parents, q, q_dists)

    @property
    def size(self) -> int:
        return int(self.tokens.numel())

    @property
    def sampled(self) -> bool:
        """True when the drafts were sampled from q_dists (not chosen deterministically)."""
        return self.q_dists is not None

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for node, parent in enumerate(self.parents.tolist()):
            if parent >= 0:
                kids[parent].append(node)
        return kids

    def ancestor_mask(self) -> torch.Tensor:
        return ancestor_mask(self.parents)

    def paths(self) -> list[list[int]]:
        return root_to_leaf_paths(self.parents)


def depths_of(parents: torch.Tensor) -> torch.Tensor:
    # On Python ints: trees are small, and element-wise tensor indexing costs microseconds per node.
    depths: list[int] = []
    for parent in parents.tolist():
        depths.append(depths[parent] + 1 if parent >= 0 else 0)  # parents come before children
    return torch.tensor(depths, dtype=torch.long)  # (N,)


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """(N, N) bool: row i is True at i and at every ancestor of i (what node i may attend to)."""
    n = len(parents)
    rows: list[list[bool]] = []
    for node, parent in enumerate(parents.tolist()):
        row = list(rows[parent]) if parent >= 0 else [False] * n  # parents come before children
        row[node] = True
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool).view(n, n)  # (N, N)


def root_to_leaf_paths(parents: torch.Tensor) -> list[list[int]]:
    parent_list = parents.tolist()
    is_parent = set(p for p in parent_list if p >= 0)
    paths = []
    for leaf in range(len(parent_list)):
        if leaf in is_parent:
            continue
        path, node = [], leaf
        while node >= 0:
            path.append(node)
            node = parent_list[node]
        paths.append(path[::-1])
    return paths


def causal_mask(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(n, n) bool: each position sees itself and every position before it."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def mask_for_cache(tree_mask: torch.Tensor, committed: int) -> torch.Tensor:
    """(N, committed + N): every node sees the committed prefix, then its own ancestors."""
    n = tree_mask.shape[0]
    mask = torch.ones(n, committed + n, dtype=torch.bool)  # (N, committed + N)
    mask[:, committed:] = tree_mask
    return mask

