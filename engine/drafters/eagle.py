"""EAGLE-2 drafting: grow a dynamic tree with the EAGLE network, keep the most probable nodes.

Each level runs the drafter once on the current frontier (batched); every frontier node proposes its
top-k children, scored by the product of draft probabilities along the path; the best top-k become
the next frontier. At the end the best `total_tokens - 1` nodes of the whole pool form the tree.
A node's score never exceeds its parent's, and parents are created first, so a stable sort by score
keeps every kept node's ancestors. For the same reason a frontier node is only expanded while its
score beats the budget-th best of the pool: its descendants could only lose to nodes already there.
A node is also left unexpanded when its score, the estimated chance that the walk reaches it, is
below `min_score`: its children could add fewer expected tokens than the drafter call costs. Growth
stops when no frontier node is left, which spares drafter calls and rows.

A node's score is its draft probability (EAGLE-2) under `score="draft"`; under `score="rule"` (the
default) it is the rule's own estimate, from the draft distribution, of how likely the token is to
be accepted: for the exact rule that is again q(x), for LANTERN the relaxed q~(x) with the latent
neighbours' mass, which grows deeper trees where the relaxed rule accepts more.

Siblings are tried in turn, each on what its predecessors' rejections left, so a child is only
worth drafting if the rule's rejection of an earlier sibling does not rule it out. Under LANTERN a
rejection zeroes the whole neighbour set A, and the drafter's best guesses are often latent
neighbours of each other: children are therefore chosen best first, skipping any token that an
earlier sibling would rule out (estimated with the draft distribution; for the exact rule only the
sibling itself, which leaves plain top-k).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from engine.core.config import TreeConfig
from engine.core.sampling import combine_cfg, distribution
from engine.core.tree import DraftTree
from engine.drafters.base import DecodeState, Drafter
from engine.drafters.eagle_net import EagleNet, above_for_drafting
from engine.model.gpt import Rotation
from engine.rules.acceptance import BoundRule, Sampling

CANDIDATES_PER_CHILD = 4  # how far down the draft ranking children are looked for


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


@dataclass(frozen=True)
class Proposal:
    """What every drafter call of one proposal reads by position, laid out once by `_catch_up`: the
    rope rotations and the tokens above, first for the pairs it caught up on, then for tree levels
    2..depth. Passed from call to call, so that no proposal's layout outlives it."""

    caught_up: int  # pairs fed by the catch-up call
    rotations: Rotation  # (caught_up + depth - 1, 1, hd) x 2
    above: torch.Tensor | None  # (1, caught_up + depth - 1, D); None for a drafter without fc_above

    def level_rows(self, level: int) -> slice:
        """The table row of tree level `level` >= 2, whose nodes all sit level - 1 past the root."""
        return slice(self.caught_up + level - 2, self.caught_up + level - 1)


class EagleDrafter(Drafter):
    def __init__(self, net: EagleNet, tree: TreeConfig | None):
        """`tree` None: a subclass that lays out trees of its own shape (StaticTreeDrafter)."""
        self.net, self.tree_cfg = net, tree
        self.rule: BoundRule = Sampling()  # the decode's rule, set by reset

    def reset(self, state: DecodeState, prefix_hidden: torch.Tensor) -> None:
        capacity = state.target.cfg.block_size + self.draft_room() + 1
        self.cache = self.net.new_cache(state.rows, capacity)
        self.rule = state.rule
        self.committed = 0  # drafter pairs in the cache
        self.start = state.lane_start
        self.pending_position = 0  # raster index of the first pending pair's token
        if self.start == 0:
            self.pending_features = prefix_hidden[:, -1:]  # (R, 1, D): the feature that predicted x_0
            self.pending_tokens = list(state.tokens)
        else:  # a row decided in parallel: its first pair comes with its first pass (the root's feature)
            self.pending_features, self.pending_tokens = prefix_hidden[:, :0], []

    def _read_above(self, state: DecodeState) -> bool:
        """A row's first pass: make the pairs of the image decided above it, up to its first gap (what a
        raster drafter would have read), the pending ones. True when they reach the row's start: the
        root is the finished row's last token, whose pair predicts the row's first token, so drafting
        goes on as in raster order. Otherwise the root is a stand-in that no feature predicted: the
        pairs are read now, nothing is drafted, and the row's own pairs follow from its start."""
        known = state.tokens
        end = min(known.index(-1) if -1 in known else len(known), self.start)
        self.pending_tokens, self.pending_position = known[:end], 0
        self.pending_features = torch.stack([state.predicting[p] for p in range(end)], dim=1)  # (R, end, D)
        if end == self.start:
            return True
        self._catch_up(state, 0)
        self.pending_tokens, self.pending_position = [], self.start
        return False

    def observe(self, state: DecodeState, tree: DraftTree, kept: list[int], hidden: torch.Tensor,
                probs: np.ndarray) -> None:
        # Kept node i's feature predicted the token after it: the next kept token, then the bonus.
        self.pending_features = hidden[:, kept]  # (R, L, D)
        self.pending_tokens = state.tokens[-len(kept):]

    def levels(self, state: DecodeState, wanted: int, max_depth: int) -> int:
        """How many levels a proposal drafts: `wanted`, within the `max_depth` tokens left, and
        within one grid row for a drafter that reads the token above (deeper, it is not known yet)."""
        depth = min(wanted, max_depth)
        return depth if self.net.fc_above is None else min(depth, state.target.cfg.grid_size)

    @property
    def dynamic_tree(self) -> TreeConfig:
        """The shape of the trees EAGLE-2 grows; a subclass without one overrides what reads it."""
        assert self.tree_cfg is not None, "a drafter with trees of its own shape reads no TreeConfig"
        return self.tree_cfg

    def largest_tree(self) -> int:
        return self.dynamic_tree.total_tokens

    def draft_room(self) -> int:
        """Drafter cache slots a proposal may fill beyond the committed pairs."""
        return self.dynamic_tree.depth * self.dynamic_tree.top_k

    def _run(self, state: DecodeState, proposal: Proposal, tokens: torch.Tensor, features: torch.Tensor,
             rows: slice, first_slot: int, mask: torch.Tensor) -> torch.Tensor:
        """Drafter pass over tokens (T,) with parent features (R, T, D) -> predicted features.

        `rows` picks the proposal's rotation and token-above rows: T of them, or one that every
        token shares, as the nodes of one tree level do (Proposal.level_rows)."""
        device = features.device
        count = len(tokens)
        slots = torch.arange(first_slot, first_slot + count, device=device)  # (T,)
        emb = state.target.embed_tokens(tokens.to(device)).expand(state.rows, -1, -1)  # (R, T, D)
        rope = Rotation(proposal.rotations.cos[rows], proposal.rotations.sin[rows])  # (T or 1, 1, hd) x 2
        above = None if proposal.above is None else proposal.above[:, rows].expand(state.rows, count, -1)  # (R, T, D)
        # .forward: nn.Module.__call__'s bookkeeping is a measurable share of a one-token drafter call.
        return self.net.forward(emb, features, rope, self.cache, slots, mask.to(device), above)

    def _draft_probs(self, state: DecodeState, features: torch.Tensor) -> torch.Tensor:
        # The head is linear, so guiding the features first equals guiding the logits, at half the
        # head's cost; float32 is precise enough to rank drafts (the target's side stays float64).
        guided = combine_cfg(features, state.sampling.cfg_scale)  # (T, D)
        logits = state.target.logits(guided)  # (T, V)
        return distribution(logits, state.sampling, torch.float32).cpu()  # (T, V)

    def _catch_up(self, state: DecodeState, depth: int) -> tuple[Proposal, torch.Tensor]:
        """Feed the pairs the target confirmed last step; the last one ends at the root. Returns the
        proposal's layout for its later calls, and the drafter's features (R, n, D), the last of which
        predicts the root's child."""
        target = state.target
        device = self.pending_features.device
        n_pending = len(self.pending_tokens)
        mask = torch.ones(n_pending, self.committed + n_pending, dtype=torch.bool)  # (n, committed + n)
        mask[:, self.committed:].tril_()
        self.committed += n_pending
        # The image positions each call predicts: the n pairs', then tree levels 2..depth's.
        first = self.pending_position
        predicted = range(first + 1, first + n_pending + max(depth, 1))
        self.pending_position += n_pending
        offsets = torch.arange(predicted.start, predicted.stop, device=device)  # (n + depth - 1,)
        above = None
        if self.net.fc_above is not None:  # the token above the one each pair predicts
            above = above_for_drafting(target, state.tokens, predicted)  # (1, n + depth - 1, D)
        proposal = Proposal(n_pending, target.rotation_at(target.cfg.cls_token_num - 1 + offsets), above)
        return proposal, self._run(state, proposal, torch.tensor(self.pending_tokens), self.pending_features,
                                   slice(0, n_pending), self.committed - n_pending, mask)

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        cfg = self.dynamic_tree
        depth = self.levels(state, cfg.depth, max_depth)
        if not self.pending_tokens and not self._read_above(state):  # a row's stand-in root
            return DraftTree.root_only(root)
        proposal, out = self._catch_up(state, depth)
        if depth == 0:  # only the bonus token fits: the pairs are caught up, nothing is drafted
            return DraftTree.root_only(root)
        q = self._draft_probs(state, out[:, -1:])[0]  # (V,)

        k, budget = cfg.top_k, cfg.total_tokens - 1
        top_q, top_tokens, top_conf = self._children(q[None], k)
        top_q, top_tokens = top_q[0], top_tokens[0]  # (k,)
        tokens, parents, qs = top_tokens.tolist(), [-1] * k, top_q.tolist()
        scores = top_conf[0].log().tolist()
        frontier = list(range(k))  # pool indices of the nodes to expand next
        frontier_features = out[:, -1:].expand(-1, k, -1)  # (R, k, D): their parents' predictions
        fed_slot: dict[int, int] = {}  # pool index -> drafter cache slot
        least = math.log(cfg.min_score) if cfg.min_score > 0 else -math.inf
        for level in range(2, depth + 1):
            alive = self._promising(scores, frontier, budget, least)  # frontier positions
            if not alive:
                break
            if len(alive) < len(frontier):
                frontier, frontier_features = [frontier[i] for i in alive], frontier_features[:, alive]
            first_slot = self.committed + len(fed_slot)
            for i, node in enumerate(frontier):
                fed_slot[node] = first_slot + i
            mask = self._tree_mask(frontier, parents, fed_slot)
            out = self._run(state, proposal, torch.tensor([tokens[n] for n in frontier]), frontier_features,
                            proposal.level_rows(level), first_slot, mask)
            q = self._draft_probs(state, out)  # (F, V)
            child_q, child_tokens, child_conf = self._children(q, k)  # (F, k) each
            # A level scores a handful of children: on Python floats, which cost less than tensor calls.
            child_scores = [scores[n] + _log(c) for n, row in zip(frontier, child_conf.tolist()) for c in row]
            base = len(tokens)
            tokens += child_tokens.flatten().tolist()
            parents += [n for n in frontier for _ in range(k)]
            qs += child_q.flatten().tolist()
            scores += child_scores
            best = sorted(range(len(child_scores)), key=lambda i: -child_scores[i])[:k]  # ties: the earlier
            frontier = [base + i for i in best]
            frontier_features = out[:, [i // k for i in best]]  # (R, k, D)
        return self._select(root, tokens, parents, qs, scores, budget)

    @staticmethod
    def _promising(scores: list[float], frontier: list[int], budget: int, least: float) -> list[int]:
        """Positions of the frontier nodes worth a drafter call: a log score of at least `least`, and
        above the budget-th best of the pool (else no child could enter it; a tie goes to the
        earlier node)."""
        floor = sorted(scores, reverse=True)[budget - 1] if len(scores) >= budget else -math.inf
        return [i for i, node in enumerate(frontier) if scores[node] > floor and scores[node] >= least]

    def _children(self, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (F, V) -> the k children of each row (F, k), their q and their score factor (F, k):
        best first, none ruled out by an earlier one; rows short of k such children are filled up
        with the best of the rest."""
        cand_q, cand_tokens = q.topk(min(q.shape[-1], k * CANDIDATES_PER_CHILD), dim=-1)  # (F, C), q descending
        cand_conf = self._confidence(q, cand_q, cand_tokens)  # (F, C)
        if cand_conf is not cand_q:  # a score other than q: best score first
            order = cand_conf.argsort(dim=-1, descending=True, stable=True)  # (F, C)
            cand_q, cand_tokens, cand_conf = (t.gather(1, order) for t in (cand_q, cand_tokens, cand_conf))
        ruled = self.rule.rules_out(q, cand_tokens)  # (F, C, C), None: each itself alone
        if ruled is not None:
            others = ~torch.eye(ruled.shape[-1], dtype=torch.bool, device=ruled.device)  # (C, C)
            ruled = ruled if (ruled & others).any() else None
        if ruled is None:  # no rejection rules out a sibling: the k best
            return cand_q[:, :k], cand_tokens[:, :k], cand_conf[:, :k]
        picks = []
        for row in ruled.tolist():
            chosen, blocked = [], [False] * len(row)
            for candidate, rules in enumerate(row):
                if not blocked[candidate]:
                    chosen.append(candidate)
                    blocked = [b or r for b, r in zip(blocked, rules)]
                    if len(chosen) == k:
                        break
            chosen += [i for i in range(len(row)) if i not in chosen][: k - len(chosen)]
            picks.append(chosen)
        index = torch.tensor(picks)  # (F, k)
        return cand_q.gather(1, index), cand_tokens.gather(1, index), cand_conf.gather(1, index)

    def _confidence(self, q: torch.Tensor, cand_q: torch.Tensor, cand_tokens: torch.Tensor) -> torch.Tensor:
        """(F, C) score factors of the candidates: their q, or the rule's acceptance estimate."""
        if self.dynamic_tree.score == "draft":
            return cand_q
        return self.rule.draft_confidence(q, cand_tokens, cand_q)

    def _tree_mask(self, frontier: list[int], parents: list[int], fed_slot: dict[int, int]) -> torch.Tensor:
        """(F, committed + fed) mask: the committed pairs, then each node's fed ancestors and itself."""
        width = self.committed + len(fed_slot)
        mask = torch.zeros(len(frontier), width, dtype=torch.bool)
        mask[:, : self.committed] = True
        rows, slots = [], []  # one indexed write for every (node, fed ancestor) pair
        for row, node in enumerate(frontier):
            while node >= 0:
                rows.append(row)
                slots.append(fed_slot[node])
                node = parents[node]
        mask[rows, slots] = True
        return mask

    @staticmethod
    def _select(root: int, tokens: list[int], parents: list[int], qs: list[float],
                scores: list[float], budget: int) -> DraftTree:
        order = sorted(range(len(tokens)), key=lambda i: (-scores[i], i))[:budget]
        keep = sorted(order)  # creation order: parents before children, siblings best first
        index = {node: i + 1 for i, node in enumerate(keep)}
        tree_parents = [-1] + [0 if parents[n] < 0 else index[parents[n]] for n in keep]
        return DraftTree(torch.tensor([root] + [tokens[n] for n in keep]),
                         torch.tensor(tree_parents),
                         torch.tensor([1.0] + [qs[n] for n in keep], dtype=torch.float64))
