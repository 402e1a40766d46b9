"""The decoding loop shared by every method: a drafter proposes, the target verifies, a rule accepts.

Vanilla decoding is this loop with a drafter that proposes nothing.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg, distribution, entropy_bits
from engine.core.trace import PassInputs, StepTrace
from engine.core.tree import DraftTree, causal_mask
from engine.drafters.base import DecodeState, Drafter
from engine.drafters.wavefront import Lane, Root, Wavefront
from engine.loop.verify import PREFIX, Forest, target_pass
from engine.model.attention import needs_row_exact
from engine.model.kv_cache import KVCache
from engine.model.matmul import LargeProductsInBfloat16, rounds_large_products
from engine.model.target import Target
from engine.rules.acceptance import Rule
from engine.rules.walks import WalkResult


def _elapsed_ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


@torch.inference_mode()
def decode(target: Target, drafter: Drafter, rule: Rule, sampling: SamplingConfig,
           class_id: int, keep_inputs: bool = False) -> Iterator[StepTrace]:
    """Generate one image's tokens for `class_id`, yielding a trace after every target pass. With
    `keep_inputs`, each trace also keeps what its walks judged (PassInputs: (N, V) probabilities a step)."""
    cfg, weight = target.cfg, target.output.weight
    generator = torch.Generator().manual_seed(sampling.seed)
    bound = rule.bind(sampling)  # the rule for this decode's mode, greedy or sampling
    state = DecodeState(target, class_id, 1 + sampling.uses_cfg, sampling, bound, generator, [],
                        cfg.num_image_tokens)
    wavefront = drafter.wavefront(cfg.grid_size)  # the lanes the image is decided in
    rounding = LargeProductsInBfloat16(rounds_large_products(weight, sampling.greedy))
    cache = KVCache.for_model(cfg, state.rows, cfg.block_size + drafter.largest_tree(),
                              weight.dtype, weight.device, row_exact=needs_row_exact(weight, sampling.greedy))
    judged = rule.target_sampling(sampling)  # how the rule wants the target's p filtered

    # 0. Prefill: the condition prefix gives the distribution of the first image token.
    started = time.perf_counter()
    with rounding:
        hidden, probs = _prefill(target, cache, state, judged)  # (R, P, D), (1, V)
        prefix, verify_ms = hidden.shape[1], _elapsed_ms(started)
        slot_positions = torch.full((prefix,), PREFIX, dtype=torch.long)  # (committed,) raster index of each slot
        first = bound.walk(DraftTree.root_only(0), probs, _uniforms(generator, 1))
        wavefront.lanes[0].tokens.append(first.next_token)
        state.predicting[0] = hidden[:, -1]  # (R, D)
        for lane in wavefront.lanes:
            lane.drafter.reset(_lane_state(state, wavefront, lane), hidden)
    yield _trace(0, Forest([DraftTree.root_only(first.next_token)], [Root(first.next_token, 0, True)]),
                 [first], [[0]], [probs], [0], wavefront, 0.0, verify_ms, 0.0, root_is_new=True)

    for step in itertools.count(1):
        if wavefront.done:
            return
        with rounding:  # a sampling decode's large products in bfloat16, where that pays
            # 1. Each lane deciding proposes a tree rooted at its input, no deeper than it may decide.
            started = time.perf_counter()
            deciding = wavefront.deciding()
            feeding = wavefront.unfed_finished(deciding)
            roots = [wavefront.root(i) for i in deciding]
            trees = [wavefront.lanes[i].drafter.propose(_lane_state(state, wavefront, wavefront.lanes[i]),
                                                        root.token, wavefront.room(i) - 1)
                     for i, root in zip(deciding, roots)]
            # A finished row's last token, fed alone so that the rows below see it.
            finished = [wavefront.lanes[i] for i in feeding]
            forest = Forest(trees + [DraftTree.root_only(lane.tokens[-1]) for lane in finished],
                            roots + [Root(lane.tokens[-1], lane.end - 1, True) for lane in finished])
            draft_ms = _elapsed_ms(started)

            # 2. Verify every drafted token of every lane in one target pass.
            started = time.perf_counter()
            verified = target_pass(target, cache, slot_positions, forest, judged, state.rows, prefix)
            verify_ms = _elapsed_ms(started)

            # 3. Accept: walk each lane's tree with the rule, draw the next token where the walk stops.
            started = time.perf_counter()
            tree_probs = forest.split(verified.probs)
            uniforms = [_uniforms(generator, tree.size) for tree in trees]  # (N_t + 1,) each
            results = [bound.walk(tree, p, u) for tree, p, u in zip(trees, tree_probs, uniforms)]
            accept_ms = _elapsed_ms(started)

            # 4. Keep the cache entries of the kept roots and the accepted paths, contiguously.
            kept = [[0] + result.accepted_nodes for result in results] + [[0]] * len(finished)
            kept_slots, kept_positions = _kept_entries(forest, kept, len(slot_positions))
            cache.keep(kept_slots, len(slot_positions))
            slot_positions = torch.cat([slot_positions, kept_positions])
            for root in forest.roots:
                if root.kept:
                    wavefront.cached(root.position)
            positions = []
            for i, tree, result, lane_kept, start in zip(deciding, trees, results, kept, forest.offsets):
                positions.append(wavefront.decided(i, _new_tokens(tree, result)))
                # Kept node j's feature predicted the j-th new token: the next accepted draft, then the bonus.
                features = verified.hidden[:, [start + node for node in lane_kept]]  # (R, L, D)
                for j in range(len(lane_kept)):
                    state.predicting[positions[-1] + j] = features[:, j]

            # 5. Let each lane's drafter see what the target kept.
            hidden_of = forest.split(verified.hidden.transpose(0, 1))  # per tree (N_t, R, D)
            for i, tree, lane_kept, tree_hidden, p in zip(deciding, trees, kept, hidden_of, tree_probs):
                lane = wavefront.lanes[i]
                lane.drafter.observe(_lane_state(state, wavefront, lane), tree, lane_kept,
                                     tree_hidden.transpose(0, 1), p)

        # 6. Report the step.
        trace = _trace(step, forest, results, kept, tree_probs, positions, wavefront,
                       draft_ms, verify_ms, accept_ms, root_is_new=False)
        if keep_inputs:
            trace.inputs = _pass_inputs(trees, verified.probs[: sum(t.size for t in trees)], uniforms)
        yield trace


def _lane_state(state: DecodeState, wavefront: Wavefront, lane: Lane) -> DecodeState:
    """What a lane's drafter reads: the image's tokens in raster order up to the lane's next position
    (-1 where a row above has not decided yet); in raster order, simply the tokens so far."""
    if lane.start == 0:
        return replace(state, tokens=lane.tokens)
    grid = wavefront.grid_tokens()[: lane.next_position]
    return replace(state, tokens=grid + [-1] * (lane.next_position - len(grid)), lane_start=lane.start)


def _kept_entries(forest: Forest, kept: list[list[int]], committed: int) -> tuple[list[int], torch.Tensor]:
    """The cache slots to keep (kept roots and accepted nodes, lane by lane) and their raster indices."""
    slots: list[int] = []
    positions: list[int] = []
    for tree, root, start, nodes in zip(forest.trees, forest.roots, forest.offsets, kept):
        depths = tree.depths.tolist()
        for node in nodes if root.kept else nodes[1:]:
            slots.append(committed + start + node)
            positions.append(root.position + depths[node])
    return slots, torch.tensor(positions, dtype=torch.long)  # (K,)


def _pass_inputs(trees: list[DraftTree], probs: np.ndarray, uniforms: list[np.ndarray]) -> PassInputs:
    """What the pass's walks judged. A row's root-only tree among sampled ones (its first pass drafts
    nothing) stands in its q rows with the uniform distribution: a root is never judged."""
    q_dists = None
    if any(tree.sampled for tree in trees):
        vocab = probs.shape[1]
        q_dists = torch.cat([tree.q_dists.cpu() if tree.q_dists is not None
                             else torch.full((tree.size, vocab), 1.0 / vocab, dtype=torch.float64)
                             for tree in trees]).numpy()  # (N, V)
    return PassInputs(probs, q_dists, np.concatenate(uniforms))


def _prefill(target: Target, cache: KVCache, state: DecodeState,
             judged: SamplingConfig) -> tuple[torch.Tensor, np.ndarray]:
    """Read the condition prefix into the cache: its features (R, P, D) and p of the first token (1, V)."""
    prefix = target.embed_condition(state.row_class_ids)  # (R, P, D)
    positions = torch.arange(prefix.shape[1], device=prefix.device)  # (P,)
    hidden = target(prefix, positions, cache, positions, causal_mask(prefix.shape[1], prefix.device))
    logits = combine_cfg(target.logits(hidden[:, -1:]), judged.cfg_scale)  # (1, V)
    return hidden, distribution(logits, judged).cpu().numpy()


def _new_tokens(tree: DraftTree, result: WalkResult) -> list[int]:
    """The accepted drafts, then the token drawn where the walk stopped."""
    drafted = tree.tokens.tolist()
    return [drafted[n] for n in result.accepted_nodes] + [result.next_token]


def _uniforms(generator: torch.Generator, count: int) -> np.ndarray:
    return torch.rand(count + 1, generator=generator, dtype=torch.float64).numpy()


def _trace(step: int, forest: Forest, results: list[WalkResult], kept: list[list[int]],
           tree_probs: list[np.ndarray], first_positions: list[int], wavefront: Wavefront,
           draft_ms: float, verify_ms: float, accept_ms: float, root_is_new: bool) -> StepTrace:
    """One pass's record: the forest's trees one after another, node indices counted over the forest."""
    verdicts, accepted, new_tokens, new_positions, from_draft, entropies = [], [], [], [], [], []
    for start, tree, result, nodes, p, position in zip(forest.offsets, forest.trees, results, kept,
                                                       tree_probs, first_positions):
        for verdict in result.verdicts:  # the walk's own records: renumbered over the pass's trees in place
            verdict.node += start
        verdicts += result.verdicts
        accepted += [start + node for node in result.accepted_nodes]
        tokens = _new_tokens(tree, result)
        new_tokens += tokens
        new_positions += list(range(position, position + len(tokens)))
        from_draft += [False] if root_is_new else [True] * len(result.accepted_nodes) + [False]
        entropies += entropy_bits(p[nodes]).tolist()
    return StepTrace(
        step=step,
        tree_tokens=torch.cat([t.tokens for t in forest.trees]).numpy().copy(),
        tree_parents=torch.cat([torch.where(t.parents >= 0, t.parents + start, t.parents)
                                for t, start in zip(forest.trees, forest.offsets)]).numpy(),
        tree_depths=torch.cat([t.depths for t in forest.trees]).numpy().copy(),
        tree_q=torch.cat([t.q for t in forest.trees]).numpy().copy(),
        verdicts=verdicts,
        accepted_nodes=accepted,
        new_tokens=new_tokens,
        new_positions=new_positions,
        bonus_from_draft=from_draft,
        entropy_bits=entropies,
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        accept_ms=accept_ms,
        tokens_so_far=np.asarray(wavefront.grid_tokens(), dtype=np.int64),
        tree_roots=list(forest.offsets),
        tree_positions=forest.positions.numpy().copy(),
        stand_ins=[start for start, root in zip(forest.offsets, forest.roots) if not root.kept],
        lanes=len(results),
    )
