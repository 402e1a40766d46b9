"""The decoding loop shared by every method: a drafter proposes, the target verifies, a rule accepts.

Vanilla decoding is this loop with a drafter that proposes nothing.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg, distribution, entropy_bits
from engine.core.trace import PassInputs, StepTrace
from engine.core.tree import DraftTree, causal_mask
from engine.drafters.base import DecodeState, Drafter
from engine.loop.verify import target_pass
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
    `keep_inputs`, each trace also keeps what its walk judged (PassInputs: (N, V) probabilities a step)."""
    cfg, weight = target.cfg, target.output.weight
    generator = torch.Generator().manual_seed(sampling.seed)
    bound = rule.bind(sampling)  # the rule for this decode's mode, greedy or sampling
    state = DecodeState(target, class_id, 1 + sampling.uses_cfg, sampling, bound, generator, [],
                        cfg.num_image_tokens)
    rounding = LargeProductsInBfloat16(rounds_large_products(weight, sampling.greedy))
    cache = KVCache.for_model(cfg, state.rows, cfg.block_size + drafter.largest_tree(),
                              weight.dtype, weight.device, row_exact=needs_row_exact(weight, sampling.greedy))
    judged = rule.target_sampling(sampling)  # how the rule wants the target's p filtered

    # 0. Prefill: the condition prefix gives the distribution of the first image token.
    started = time.perf_counter()
    with rounding:
        hidden, probs = _prefill(target, cache, state, judged)  # (R, P, D), (1, V)
        committed, verify_ms = hidden.shape[1], _elapsed_ms(started)
        first = bound.walk(DraftTree.root_only(0), probs, _uniforms(generator, 1))
        state.tokens.append(first.next_token)
        drafter.reset(state, hidden)
    yield _trace(0, DraftTree.root_only(first.next_token), first, probs, state, 0.0, verify_ms, 0.0,
                 position=0, root_is_new=True)

    for step in itertools.count(1):
        if len(state.tokens) >= state.num_tokens:
            return
        with rounding:  # a sampling decode's large products in bfloat16, where that pays
            # 1. Propose a tree rooted at the last token; no deeper than the image has tokens left.
            started = time.perf_counter()
            tree = drafter.propose(state, state.tokens[-1], state.num_tokens - len(state.tokens))
            draft_ms = _elapsed_ms(started)

            # 2. Verify every drafted token in one target pass.
            started = time.perf_counter()
            verified = target_pass(target, cache, committed, tree, judged, state.rows)
            verify_ms = _elapsed_ms(started)

            # 3. Accept: walk the tree with the rule, draw the next token where the walk stops.
            started = time.perf_counter()
            uniforms = _uniforms(generator, tree.size)  # (N + 1,)
            result = bound.walk(tree, verified.probs, uniforms)
            accept_ms = _elapsed_ms(started)

            # 4. Keep the cache entries of the root and the accepted path, contiguously.
            kept = [0] + result.accepted_nodes
            cache.keep([committed + node for node in kept], committed)
            committed += len(kept)
            position = len(state.tokens)
            state.tokens.extend(_new_tokens(tree, result)[: state.num_tokens - position])

            # 5. Let the drafter see what the target kept.
            drafter.observe(state, tree, kept, verified.hidden, verified.probs)

        # 6. Report the step.
        trace = _trace(step, tree, result, verified.probs[kept], state, draft_ms, verify_ms,
                       accept_ms, position=position, root_is_new=False)
        if keep_inputs:
            q_dists = None if tree.q_dists is None else tree.q_dists.cpu().numpy()
            trace.inputs = PassInputs(verified.probs, q_dists, uniforms)
        yield trace


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


def _trace(step: int, tree: DraftTree, result: WalkResult, decided_probs: np.ndarray,
           state: DecodeState, draft_ms: float, verify_ms: float, accept_ms: float,
           position: int, root_is_new: bool) -> StepTrace:
    produced = len(state.tokens) - position
    new_tokens = state.tokens[position:]
    from_draft = ([False] if root_is_new else
                  [True] * len(result.accepted_nodes) + [False])[:produced]
    return StepTrace(
        step=step,
        tree_tokens=tree.tokens.numpy().copy(),
        tree_parents=tree.parents.numpy().copy(),
        tree_depths=tree.depths.numpy().copy(),
        tree_q=tree.q.numpy().copy(),
        verdicts=result.verdicts,
        accepted_nodes=result.accepted_nodes,
        new_tokens=list(new_tokens),
        new_positions=list(range(position, position + produced)),
        bonus_from_draft=from_draft,
        entropy_bits=entropy_bits(decided_probs).tolist()[:produced],
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        accept_ms=accept_ms,
        tokens_so_far=np.asarray(state.tokens, dtype=np.int64),
    )
