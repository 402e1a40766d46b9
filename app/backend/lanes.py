"""Several decoding methods on the same image, interleaved step by step in one thread.

Each method runs as its own trace stream. The next step always goes to the unfinished method that has
used the least time so far, so the panels advance as if each method had its own machine: a method
that needs fewer but costlier target passes finishes first only if it is really faster. Each
method's time is the sum of its own step times, so interleaving (and rendering between steps) does
not distort it.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from engine import stream
from engine.core.config import SamplingConfig
from engine.core.trace import StepTrace, mean_accepted_length
from engine.evaluation.speed import BASELINE, pass_split, speedup, undrafted_speedup
from engine.loading.image_model import ImageModel
from engine.methods import MethodOptions, get_method


@dataclass
class Lane:
    """One method's progress through one image."""

    method: str
    title: str
    lossless: bool
    num_tokens: int
    traces: list[StepTrace] = field(default_factory=list)
    elapsed_ms: float = 0.0  # the sum of this method's own step times
    done: bool = False

    @property
    def tokens(self) -> np.ndarray:
        return self.traces[-1].tokens_so_far if self.traces else np.zeros(0, np.int64)

    @property
    def decided(self) -> int:
        """Tokens decided so far."""
        return self.traces[-1].decided if self.traces else 0

    @property
    def rows_per_pass(self) -> float:
        """The mean count of rows that decided tokens in a pass after the prefill."""
        steps = self.traces[1:]
        return sum(t.lanes for t in steps) / len(steps) if steps else 1.0

    @property
    def passes(self) -> int:
        """Target forward passes so far, the prefill included."""
        return len(self.traces)

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per target pass after the prefill (the paper's MAL); vanilla's is 1."""
        return mean_accepted_length(self.traces[1:])

    @property
    def ms_per_token(self) -> float:
        produced = self.decided
        return self.elapsed_ms / produced if produced else float("nan")

    @property
    def ms_per_pass(self) -> dict[str, float]:
        """The lane's decode time split as the benchmark splits it (engine.evaluation.speed): ms per
        target pass after the prefill, in draft, verify, accept and other (the prefill among it)."""
        return pass_split(self.traces[1:], self.elapsed_ms)

    @property
    def speedup_limit(self) -> float:
        """The speed-up the accepted length alone would give: MAL, if a pass over the tree cost what
        a one-token pass costs and drafting were free. A limit, never a measurement."""
        return self.mean_accepted_length

    @property
    def accept_probs(self) -> list[float]:
        return [v.accept_prob for t in self.traces[1:] for v in t.verdicts]


def _finished_baseline(lane: Lane, lanes: list[Lane]) -> Lane | None:
    """The vanilla lane, once it and `lane` have both finished; None before then or without one."""
    baseline = next((other for other in lanes if other.method == BASELINE), None)
    return baseline if baseline is not None and baseline.done and lane.done else None


def lane_speedup(lane: Lane, lanes: list[Lane]) -> float | None:
    """The benchmark's speed-up (engine.evaluation.speed) on this image: vanilla's decode time over this lane's,
    once both have finished; None before then or when no panel runs vanilla."""
    baseline = _finished_baseline(lane, lanes)
    return None if baseline is None else speedup(baseline.elapsed_ms, lane.elapsed_ms)


def lane_undrafted_speedup(lane: Lane, lanes: list[Lane]) -> float | None:
    """The speed-up this lane would reach with drafting free (engine.evaluation.speed), against the
    vanilla lane's one-token pass; None when lane_speedup is."""
    baseline = _finished_baseline(lane, lanes)
    if baseline is None:
        return None
    return undrafted_speedup(lane.mean_accepted_length, baseline.ms_per_pass["wall"], lane.ms_per_pass)


def interleave(model: ImageModel, methods: list[str], sampling: SamplingConfig, class_id: int,
               options: MethodOptions) -> Iterator[list[Lane]]:
    """Yield the lanes after every step of every method (the same list, updated in place).

    Every method's prefill runs before the first yield, so a method that cannot run here (an unknown
    name, a missing drafter) raises InvalidInput before any work is shown."""
    total = model.target.cfg.num_image_tokens
    lanes = [Lane(name, get_method(name).title, get_method(name).lossless, total) for name in methods]
    # Methods that read delta keep what each step was judged on, for the what-if view (app.backend.whatif).
    streams = [stream(model, name, sampling, class_id, options, keep_inputs=reads_delta(name))
               for name in methods]
    for index in range(len(lanes)):
        _advance(lanes[index], streams[index])
    yield lanes
    while True:
        waiting = [i for i, lane in enumerate(lanes) if not lane.done]
        if not waiting:
            return
        index = min(waiting, key=lambda i: lanes[i].elapsed_ms)
        if _advance(lanes[index], streams[index]):
            yield lanes


def reads_delta(method: str) -> bool:
    """Whether the method's rule reads the delta slider: its panel is the one the sweep chart and the
    what-if view follow, and its decode keeps what each step was judged on."""
    return "delta" in get_method(method).params


def _advance(lane: Lane, steps: Iterator[StepTrace]) -> bool:
    """Run one step of the lane's method; False (and the lane done) when it has finished."""
    started = time.perf_counter()
    trace = next(steps, None)
    if trace is None:
        lane.done = True
        return False
    lane.elapsed_ms += (time.perf_counter() - started) * 1000.0
    lane.traces.append(trace)
    if trace.decided >= lane.num_tokens:
        lane.done = True
    return True


def run_to_end(model: ImageModel, methods: list[str], sampling: SamplingConfig, class_id: int,
               options: MethodOptions) -> list[Lane]:
    lanes: list[Lane] = []
    for lanes in interleave(model, methods, sampling, class_id, options):  # noqa: B007 (the last one is kept)
        pass
    return lanes


def summary(lanes: list[Lane]) -> list[dict]:
    """The numbers a panel shows, one plain dict per lane (also the API's statistics output)."""
    rows = []
    for lane in lanes:
        ratio = lane_speedup(lane, lanes)
        undrafted = lane_undrafted_speedup(lane, lanes)
        probs = lane.accept_probs
        rows.append({
            "method": lane.method,
            "title": lane.title,
            "lossless": lane.lossless,
            "done": lane.done,
            "tokens": lane.decided,
            "target_passes": lane.passes,
            "mean_accepted_length": round(lane.mean_accepted_length, 3),
            "wall_ms": round(lane.elapsed_ms, 1),
            "speedup_vs_vanilla": None if ratio is None else round(ratio, 3),
            "drafts_tested": len(probs),
            "mean_accept_prob": round(float(np.mean(probs)), 4) if probs else None,
            "ms_per_pass": {part: round(ms, 3) for part, ms in lane.ms_per_pass.items()},
            "speedup_limit": round(lane.speedup_limit, 3),
            "undrafted_speedup": None if undrafted is None else round(undrafted, 3),
            # Rows deciding tokens in one pass: 1 in raster order (docs/methods.md, "Rows in parallel").
            "rows_per_pass": round(lane.rows_per_pass, 3),
            "most_rows_in_a_pass": max((t.lanes for t in lane.traces[1:]), default=1),
        })
    return rows
