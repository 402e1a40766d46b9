"""Speed-up: one definition for the benchmark, the sweep and the explorer's panels.

A method's speed-up on an image is vanilla's time for that image (same class, seed and settings)
over the method's. Over several images it is the median of the per-image ratios, so that machine
load drifting during a run affects both sides of each ratio alike.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable

BASELINE = "vanilla"  # the method every speed-up is measured against


def speedup(baseline_ms: float, method_ms: float) -> float:
    """Vanilla's time over the method's, for the same image."""
    return baseline_ms / method_ms


def median_speedup(pairs: Iterable[tuple[float, float]]) -> float:
    """The median over images of speedup(vanilla's ms, the method's ms)."""
    return statistics.median(speedup(baseline, method) for baseline, method in pairs)
