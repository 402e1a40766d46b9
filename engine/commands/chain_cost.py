"""How deep a method's static chain should be, from what drafting and verifying cost on this machine.

Sequoia's idea (choose the tree from the hardware's measured costs and the method's measured
acceptance) for the chains the relaxed rules draft. The method runs at several chain depths,
interleaved image by image with vanilla; from the traces come
  * the acceptance a_d of a draft at depth d once its parent is accepted (from the deepest chain),
  * the cost of one drafter call (draft time per pass over the levels drafted),
  * the cost of verifying n nodes, fitted as a line a + b n over every run's passes,
  * the rest of a pass (accepting, bookkeeping, the prefill spread over the passes).
A chain of L drafts then gives E(L) = 1 + sum_{d<=L} prod_{j<=d} a_j tokens a pass for
T(L) = L t_draft + a + b (L + 1) + t_rest ms, and the depth to draft is the one with the most
tokens per ms. Each depth's measured speed-up is reported beside the model's, so the model is checked.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from engine.commands.bench import run_methods, speedup
from engine.core.config import InvalidInput, SamplingConfig
from engine.core.trace import StepTrace
from engine.drafters.static_tree import chain
from engine.evaluation.speed import BASELINE, pass_split
from engine.loading.image_model import ImageModel
from engine.methods import MethodOptions, get_method


def acceptance_by_depth(steps: Sequence[StepTrace]) -> np.ndarray:
    """(L,) a_d: of the passes that tested a draft at depth d (its parent accepted, the chain that
    deep), the share that accepted it; L the deepest tree drafted. Depths never tested give 0."""
    deepest = max((int(t.tree_depths.max()) for t in steps), default=0)
    reached, kept = np.zeros(deepest), np.zeros(deepest)
    for trace in steps:
        depth, accepted = int(trace.tree_depths.max()), len(trace.accepted_nodes)
        for d in range(1, min(depth, accepted + 1) + 1):  # tested: d - 1 accepted before it
            reached[d - 1] += 1
            kept[d - 1] += accepted >= d
    return np.divide(kept, reached, out=np.zeros(deepest), where=reached > 0)


def expected_tokens(acceptance: np.ndarray, depth: int) -> float:
    """E(L): the bonus token plus each depth's chance that it and every draft before it are accepted."""
    return 1.0 + float(np.cumprod(acceptance[:depth]).sum())


def fit_verify_cost(steps: Sequence[StepTrace]) -> tuple[float, float]:
    """(a, b) of verify ms ~ a + b n over passes verifying n nodes (root included)."""
    nodes = np.array([len(t.tree_tokens) for t in steps], dtype=float)
    ms = np.array([t.verify_ms for t in steps])
    if len(set(nodes.tolist())) < 2:
        return float(ms.mean()), 0.0
    slope, intercept = np.polyfit(nodes, ms, 1)
    return float(intercept), float(slope)


def chain_costs(model: ImageModel, method: str, depths: Sequence[int], sampling: SamplingConfig,
                n_images: int, base: MethodOptions, progress=None) -> dict:
    """Run `method` with a chain of each depth against vanilla; the measured and modelled costs."""
    if "static_tree" not in get_method(method).params:
        raise InvalidInput(f"method {method!r} drafts no static tree; allowed: methods with a static chain")
    depths = sorted(set(depths))
    if not depths or depths[0] < 1:
        raise InvalidInput(f"chain depths {depths} are out of range; allowed: 1 or more")
    runs = {depth: run_methods(model, [method], sampling, n_images,
                               dataclasses.replace(base, static_tree=chain(depth)), progress) for depth in depths}
    passes = {depth: [t for g in r[method] for t in g.traces[1:]] for depth, r in runs.items()}
    everything = [t for steps in passes.values() for t in steps]
    vanilla = [g for r in runs.values() for g in r[BASELINE]]
    one_token_ms = pass_split([t for g in vanilla for t in g.traces[1:]], sum(g.wall_ms for g in vanilla))["wall"]
    acceptance = acceptance_by_depth(passes[depths[-1]])
    verify_a, verify_b = fit_verify_cost(everything)
    draft_calls = sum(int(t.tree_depths.max()) for t in everything)
    draft_ms = sum(t.draft_ms for t in everything) / max(1, draft_calls)
    splits = [pass_split(passes[d], sum(g.wall_ms for g in runs[d][method])) for d in depths]
    rest_ms = float(np.mean([split["accept"] + split["other"] for split in splits]))
    rows = []
    for depth in range(1, len(acceptance) + 1):
        pass_ms = depth * draft_ms + verify_a + verify_b * (depth + 1) + rest_ms
        tokens = expected_tokens(acceptance, depth)
        row = {"depth": depth, "expected_tokens": tokens, "pass_ms": pass_ms,
               "modelled_speedup": tokens * one_token_ms / pass_ms}
        if depth in runs:
            row["measured_speedup"] = speedup(runs[depth][BASELINE], runs[depth][method])
            row["measured_mal"] = float(np.mean([t.accepted_length for t in passes[depth]]))
        rows.append(row)
    best = max(rows, key=lambda row: row["modelled_speedup"])
    return {"method": method, "n_images": n_images, "temperature": sampling.temperature,
            "one_token_pass_ms": one_token_ms, "draft_call_ms": draft_ms, "verify_ms": [verify_a, verify_b],
            "rest_ms": rest_ms, "acceptance_by_depth": acceptance.tolist(), "depths": rows,
            "best_depth": best["depth"]}
