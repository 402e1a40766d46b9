"""A static draft tree (EAGLE-1 style), the tree LANTERN++ drafts with.

The tree's shape is fixed: a list of paths of draft ranks, e.g. (0, 1) = the second-best child of
the best child of the root. Each level runs the EAGLE network once on every node that has children
there, and each child takes the drafter's token of its rank: its top-k under greedy decoding, its
draws without replacement under sampling (as LANTERN++'s official code drafts). Unlike EAGLE-2's dynamic tree, no
confidence score decides where the tree grows, which LANTERN++ found to suit relaxed acceptance,
where a flat draft distribution says little about what will be accepted.
"""
from __future__ import annotations

import torch

from engine.core.config import InvalidInput
from engine.core.sampling import draw, nucleus
from engine.core.tree import DraftTree
from engine.drafters.base import DecodeState
from engine.drafters.eagle import EagleDrafter
from engine.drafters.eagle_net import EagleNet

Choices = tuple[tuple[int, ...], ...]


def chain(depth: int) -> Choices:
    """A chain of `depth` drafts, each the best child of the one before: (0,), (0, 0), ..."""
    return tuple((0,) * level for level in range(1, depth + 1))


# Each method's own tree, when none is given, is a chain: on a CPU every node costs verification
# time (the official code's 57-node tree suits a GPU), so siblings do not pay. LANTERN's relaxed
# rules accept most drafts, but on the 16-layer target each level costs a drafter call and each node
# a noticeable share of a pass to verify: timed against vanilla, image by image, and modelled by
# `python -m engine chain-cost`, the speed-up is flat over a few depths around six in both modes, so
# one chain of six serves both. The exact rule accepts fewer drafts in a row, so its chain stops
# earlier (docs/methods.md, "Static chains and their depths").
RELAXED_CHAIN: Choices = chain(6)
EXACT_CHAIN: Choices = chain(3)
# COOL-SD's annealed rule relaxes the first depths most, so its later drafts pass about as often as
# the exact rule's and rarely pay for their drafter calls: measured the same way, four ran fastest
# of 3, 4, 6 and 8, narrowly ahead of its neighbours.
ANNEALED_CHAIN: Choices = chain(4)
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
    """A fixed tree of rank paths. When sampling, drafts are drawn from q, or with `top_p` < 1 from q
    truncated to its top-p nucleus (renormalised), which is then the q the rule divides by: a relaxed
    rule can accept only what is drawn, so truncation keeps the drafter's tail out of the picture."""

    def __init__(self, net: EagleNet, choices: Choices = EXACT_CHAIN, top_p: float = 1.0):
        super().__init__(net, None)
        self.top_p = top_p
        self.choices = check_choices(choices)
        self.depth = max(len(c) for c in self.choices)
        self.width = max(c[-1] for c in self.choices) + 1

    def draft_room(self) -> int:
        return len(self.choices)

    def largest_tree(self) -> int:
        return len(self.choices) + 1

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        depth = self.levels(state, self.depth, max_depth)
        if not self.pending_tokens and not self._read_above(state):  # a row's stand-in root
            return DraftTree.root_only(root)
        proposal, out = self._catch_up(state, depth)  # out: (R, n, D)
        # path -> the drafter's feature at that node, (R, D)
        predicted: dict[tuple[int, ...], torch.Tensor] = {(): out[:, -1]}
        node_of: dict[tuple[int, ...], int] = {}
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[float] = []
        q_dists: list[torch.Tensor] = []
        fed_slot: dict[int, int] = {}
        for level in range(1, depth + 1):
            level_paths = [c for c in self.choices if len(c) == level and (level == 1 or c[:-1] in node_of)]
            if not level_paths:
                break
            expanding = sorted({c[:-1] for c in level_paths}, key=lambda p: (len(p), p))
            if level > 1:  # run the drafter on this level's parents, each fed its own parent's feature
                first_slot = self.committed + len(fed_slot)
                for i, path in enumerate(expanding):
                    fed_slot[node_of[path]] = first_slot + i
                rows = [node_of[p] for p in expanding]
                features = torch.stack([predicted[p[:-1]] for p in expanding], dim=1)  # (R, F, D)
                out = self._run(state, proposal, torch.tensor([tokens[n] for n in rows]), features,
                                proposal.level_rows(level), first_slot,
                                self._tree_mask(rows, parents, fed_slot))  # (R, F, D)
                predicted.update({p: out[:, i] for i, p in enumerate(expanding)})
            q = self._draft_probs(state, torch.stack([predicted[p] for p in expanding], dim=1))  # (F, V)
            children = [self._ranked_children(state, row) for row in q]
            for path in level_paths:
                ranked = children[expanding.index(path[:-1])]
                if path[-1] >= len(ranked):  # fewer possible drafts than the tree's rank
                    continue
                token, q_token, q_dist = ranked[path[-1]]
                node_of[path] = len(tokens)
                tokens.append(token)
                parents.append(node_of.get(path[:-1], -1))
                qs.append(q_token)
                if q_dist is not None:  # None when greedy, which passes the tree no distributions
                    q_dists.append(q_dist)
        return self._tree(root, tokens, parents, qs, q_dists if not state.sampling.greedy else None)

    def _ranked_children(self, state: DecodeState, q: torch.Tensor) -> list[tuple[int, float, torch.Tensor | None]]:
        """A node's children by rank from its draft distribution q (V,): (token, q(token), the
        distribution it was drawn from). Greedy: the top-k. Sampling: draws without replacement, as
        EAGLE-1 does; the r-th draw comes from q with the earlier draws removed, which is what the
        acceptance rule must judge it against."""
        # A distribution has at least one possible token, so a chain need not count them.
        width = 1 if self.width == 1 else min(self.width, int((q > 0).sum()))
        if state.sampling.greedy:
            top_q, top_tokens = q.topk(width)  # (width,)
            return [(int(t), float(p), None) for t, p in zip(top_tokens, top_q)]
        q64 = q.double()  # (V,)
        left = q64 / q64.sum() if self.top_p == 1.0 else nucleus(q64, self.top_p)  # (V,)
        if self.top_p < 1.0 and width > 1:
            width = min(width, int((left > 0).sum()))
        if width == 1:  # one inverse-CDF draw: multinomial's exponential race over V costs several times more
            drawn = [draw(left.numpy(), float(torch.rand((), generator=state.generator, dtype=torch.float64)))]
        else:
            drawn = torch.multinomial(left, width, replacement=False, generator=state.generator).tolist()  # (width,)
        ranked: list[tuple[int, float, torch.Tensor | None]] = []
        for rank, token in enumerate(drawn):
            ranked.append((token, float(left[token]), left))
            if rank + 1 < len(drawn):  # the next draw's distribution: this token removed
                left = left.clone()
                left[token] = 0.0
                left = left / left.sum() if left.sum() > 0 else left
        return ranked

    @staticmethod
    def _tree(root: int, tokens: list[int], parents: list[int], qs: list[float],
              q_dists: list[torch.Tensor] | None) -> DraftTree:
        rows = None
        if q_dists is not None and tokens:
            vocab = q_dists[0].shape[0]
            rows = torch.stack([torch.full((vocab,), 1.0 / vocab, dtype=torch.float64)] + q_dists)  # (N, V)
        return DraftTree(torch.tensor([root] + tokens),
                         torch.tensor([-1] + [p + 1 for p in parents]),
                         torch.tensor([1.0] + qs, dtype=torch.float64), rows)
