"""The frontier: speed-up against quality for the relaxed rules, each moved along its own knob.

A series is one method with some options fixed and one option (its knob) stepped through values;
every point is a benchmark of that setting. Vanilla's images are the same at every point (same
classes and seeds), so they are decoded once, and their quality (with its intervals) is the reference
a relaxed point is judged against. A point's speed-up is measured as the benchmark measures it, the
median of per-image ratios against vanilla runs interleaved image by image, on its first
`speed_images` images: timing vanilla on all of them would double the frontier's cost for a speed-up
that a few dozen ratios already pin down.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from engine.commands.bench import decode_image, image_plan, summarise, target_scores
from engine.commands.sweep import SWEEP_FIELDS
from engine.core.config import InvalidInput, SamplingConfig
from engine.evaluation.quality import load_classifier
from engine.evaluation.speed import BASELINE
from engine.loading.image_model import ImageModel
from engine.methods import MethodOptions, get_method
from engine.model.matmul import cpu_model


@dataclass(frozen=True)
class Series:
    label: str
    method: str
    knob: str  # the MethodOptions field stepped through `values`
    values: tuple[float, ...]
    fixed: dict = field(default_factory=dict)  # other MethodOptions fields, set for every point
    sampling_only: bool = False  # meaningful only when drafts are sampled (truncated drafting)

    def options(self, base: MethodOptions, value: float) -> MethodOptions:
        changes: dict[str, Any] = {**self.fixed, self.knob: value}
        return dataclasses.replace(base, **changes)


# Five settings a series, none at the knob's neutral value: there every rule is the exact one, whose
# speed-up (below 1x on this chain) the sweeps already show.
DELTAS = (0.02, 0.05, 0.1, 0.2, 0.4)
COOL_WS = (1.5, 2.0, 3.0, 4.0, 8.0)
# Truncated drafts rarely reach the target's tail, so they stay within its quality further out.
TRUNCATED_COOL_WS = (2.0, 4.0, 8.0, 12.0, 16.0)
ROW_WINDOWS = (2, 4, 6, 8, 12)
SERIES = (
    Series("LANTERN (official)", "lantern_static", "delta", DELTAS, {"lantern_variant": "official"}),
    Series("LANTERN (paper)", "lantern_static", "delta", DELTAS, {"lantern_variant": "paper"}),
    Series("LANTERN++", "lantern_pp", "lantern_lambda", (1.5, 2.0, 3.0, 5.0, 10.0)),
    Series("COOL-SD", "cool_sd", "cool_w", COOL_WS),
    Series("LANTERN (official), drafts top-p 0.8", "lantern_static", "delta", DELTAS,
           {"lantern_variant": "official", "draft_top_p": 0.8}, sampling_only=True),
    Series("COOL-SD, drafts top-p 0.8", "cool_sd", "cool_w", TRUNCATED_COOL_WS, {"draft_top_p": 0.8},
           sampling_only=True),
    # Rows in parallel, along ZipAR's window (the grid's 16 would be raster order).
    Series("ZipAR", "zipar", "row_window", ROW_WINDOWS),
    Series("LANTERN, rows in parallel", "rows_lantern", "row_window", ROW_WINDOWS,
           {"lantern_variant": "official", "draft_top_p": 0.8}),
    # COOL-SD at the sampling frontier's point inside vanilla's intervals, in each row.
    Series("COOL-SD, rows in parallel", "rows_cool_sd", "row_window", ROW_WINDOWS,
           {"cool_w": 4.0, "draft_top_p": 0.8}),
    Series("PJD", "pjd", "row_window", ROW_WINDOWS),
    # The other two row-parallel knobs: how many rows may run at once (ZipAR at window 2, where up to
    # eight could), and how many guesses PJD's Jacobi window holds in each row (its window 8).
    Series("ZipAR (rows in flight)", "zipar", "rows_in_flight", (2, 3, 4, 6, 8), {"row_window": 2}),
    Series("PJD (Jacobi window)", "pjd", "window", (2, 4, 8, 12, 16)),
)


def series_for(sampling: SamplingConfig, names: list[str] | None = None) -> list[Series]:
    """The series that mean something in this mode (greedy drafts are never sampled, so truncation
    changes nothing), optionally only those labelled in `names`."""
    chosen = [s for s in SERIES if not (s.sampling_only and sampling.greedy)]
    if names:
        known = {s.label: s for s in chosen}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise InvalidInput(f"unknown frontier series {unknown}; allowed: {', '.join(known)}")
        chosen = [known[name] for name in names]
    for series in chosen:
        get_method(series.method)
        for value in series.values:
            series.options(MethodOptions(), value)  # every setting checked before any work
    return chosen


def run_frontier(model: ImageModel, sampling: SamplingConfig, n_images: int, base: MethodOptions,
                 series: list[Series], progress=None, classifier=None, speed_images: int = 32) -> dict:
    """One benchmark per (series, knob value) over the same `n_images` images, vanilla's decoded once
    for quality and timed again, interleaved, on each point's first `speed_images` images."""
    if not 1 <= speed_images <= n_images:
        raise InvalidInput(f"speed-images {speed_images} is out of range; allowed: 1 to n-images ({n_images})")
    plan = image_plan(n_images, len(model.class_names), sampling.seed)
    classifier = classifier or load_classifier()
    vanilla = [decode_image(model, BASELINE, sampling, image, base, progress) for image in plan]
    scored = {BASELINE: target_scores(model, vanilla, sampling)}
    reference = summarise(model, {BASELINE: vanilla}, sampling, [BASELINE], classifier, scored=scored)[BASELINE]
    out = []
    for item in series:
        points = []
        for value in item.values:
            options = item.options(base, value)
            timed, gens = [], []
            for number, image in enumerate(plan):
                if number < speed_images:
                    timed.append(decode_image(model, BASELINE, sampling, image, options, progress))
                gens.append(decode_image(model, item.method, sampling, image, options, progress))
            results = summarise(model, {BASELINE: vanilla, item.method: gens}, sampling, [item.method], classifier,
                                repeats=[{BASELINE: timed, item.method: gens[:speed_images]}], scored=scored)
            points.append({item.knob: value, **{key: results[item.method][key] for key in SWEEP_FIELDS}})
        out.append({"label": item.label, "method": item.method, "knob": item.knob, "fixed": item.fixed,
                    "points": points})
    # The CPU sets the speed-ups (docs/cpus.md, "Why the ratios differ"): the explorer's caption names it.
    return {"config": {"n_images": n_images, "speed_images": speed_images, "temperature": sampling.temperature,
                       "cfg": sampling.cfg_scale, "seed": sampling.seed, "tree": dataclasses.asdict(base.tree),
                       "cpu": cpu_model()},
            "vanilla": {key: reference[key] for key in SWEEP_FIELDS}, "series": out}


SAME_IMAGES = ("n_images", "speed_images", "temperature", "cfg", "seed")  # what makes two frontiers' images one set


def add_series(existing: dict, new: dict) -> dict:
    """`existing` with `new`'s series added (a series of the same label replaced): a frontier grown run
    by run. Both must be of the same images: the same count, mode, CFG, seed and speed images. Each added
    series records the CPU it ran on; where vanilla's quality differs (another CPU's arithmetic draws
    other samples from the same seeds) it also keeps its own vanilla, which judges it; where the tree
    differs, its tree."""
    differing = [key for key in SAME_IMAGES if existing["config"].get(key) != new["config"].get(key)]
    if differing:
        raise InvalidInput(f"the frontiers differ in {', '.join(differing)}; allowed: runs of the same images")
    own = {} if _close(existing["vanilla"], new["vanilla"]) else {"vanilla": new["vanilla"]}
    if own and not new["config"].get("cpu"):
        raise InvalidInput("vanilla's quality differs and the new run names no CPU; allowed: a run of the "
                           "same images on the same CPU, or one that names its CPU")
    if new["config"].get("tree") != existing["config"].get("tree"):
        own["tree"] = new["config"].get("tree")  # the drafts' tree of the run it came from
    labels = {item["label"] for item in new["series"]}
    added = [{**item, "cpu": new["config"].get("cpu"), **own} for item in new["series"]]
    return {**existing, "series": [s for s in existing["series"] if s["label"] not in labels] + added}


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b
