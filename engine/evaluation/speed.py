"""Speed-up, and where a pass's time goes: one definition each for the benchmark, the sweep and the
explorer's panels.

A method's speed-up on an image is vanilla's time for that image (same class, seed and settings)
over the method's. Over several images it is the median of the per-image ratios, so that machine
load drifting during a run affects both sides of each ratio alike. A pass's time splits into the
timers every trace carries (drafting, verifying, accepting) and the rest; what is left without the
drafting bounds what any drafter could reach on the machine (`undrafted_speedup`).
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from engine.core.trace import StepTrace

BASELINE = "vanilla"  # the method every speed-up is measured against


def speedup(baseline_ms: float, method_ms: float) -> float:
    """Vanilla's time over the method's, for the same image."""
    return baseline_ms / method_ms


def median_speedup(pairs: Iterable[tuple[float, float]]) -> float:
    """The median over images of speedup(vanilla's ms, the method's ms)."""
    return statistics.median(speedup(baseline, method) for baseline, method in pairs)


PASS_PARTS = ("draft", "verify", "accept")  # the timers every StepTrace carries


def pass_split(steps: Sequence[StepTrace], wall_ms: float) -> dict[str, float]:
    """Mean ms per target pass over `steps`: the draft, verify and accept timers, and `other`, the
    rest of `wall_ms` (prefill, setup, cache bookkeeping, traces) spread over the same passes, so
    that the parts times the passes add up to `wall_ms`. `wall` is their sum.

    Steps that drafted nothing (vanilla's) have no drafting: their draft timer only measures the loop
    asking an empty drafter, so it counts as `other`, and their undrafted_speedup is their speed-up."""
    passes = max(1, len(steps))
    drafting = any(t.drafted for t in steps)
    parts = {part: sum(getattr(t, f"{part}_ms") for t in steps) / passes if drafting or part != "draft" else 0.0
             for part in PASS_PARTS}
    wall = wall_ms / passes
    return {**parts, "other": wall - sum(parts.values()), "wall": wall}


def undrafted_speedup(mal: float, one_token_ms: float, split: dict[str, float]) -> float:
    """The speed-up with drafting free: MAL tokens for a pass's verifying, accepting and the rest
    (`split` as pass_split gives it) against vanilla's one-token pass of `one_token_ms`. Where verifying
    a tree costs more than a pass, as on CPUs whose products are bound by arithmetic, this caps the
    method whatever its drafter costs."""
    return mal * one_token_ms / (split["wall"] - split["draft"])
