"""The frontier: speed-up against quality for the relaxed rules, each moved along its own knob.

A series is one method with some options fixed and one option (its knob) stepped through values;
every point is a benchmark of that setting, interleaved image by image with its own vanilla runs, so
that its speed-up is measured as the benchmark measures it. Vanilla's quality over the same images
(with its intervals) is the reference a relaxed point is judged against.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from engine.commands.sweep import measure_point
from engine.core.config import InvalidInput, SamplingConfig
from engine.evaluation.speed import BASELINE
from engine.loading.image_model import ImageModel
from engine.methods import MethodOptions, get_method

# The quality measures a frontier chart can put against speed-up: key, interval key, axis title.
QUALITY_MEASURES = (("class_accuracy", "class_accuracy_ci", "class accuracy"),
                    ("fid_proxy", "fid_proxy_ci", "fid_proxy (lower is better)"),
                    ("low_p_share", "low_p_share_ci", "share of tokens with p < 1e-4"),
                    ("logp_gap", "logp_gap_ci", "log p per token vs vanilla"))


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


DELTAS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.4)
SERIES = (
    Series("LANTERN (official)", "lantern_static", "delta", DELTAS, {"lantern_variant": "official"}),
    Series("LANTERN (paper)", "lantern_static", "delta", DELTAS, {"lantern_variant": "paper"}),
    Series("LANTERN++", "lantern_pp", "lantern_lambda", (1.0, 1.5, 2.0, 3.0, 5.0, 10.0)),
    Series("COOL-SD", "cool_sd", "cool_w", (1.0, 1.5, 2.0, 3.0, 4.0, 8.0)),
    Series("LANTERN (official), drafts top-p 0.8", "lantern_static", "delta", DELTAS,
           {"lantern_variant": "official", "draft_top_p": 0.8}, sampling_only=True),
    Series("COOL-SD, drafts top-p 0.8", "cool_sd", "cool_w", (1.0, 1.5, 2.0, 3.0, 4.0, 8.0),
           {"draft_top_p": 0.8}, sampling_only=True),
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
                 series: list[Series], progress=None, classifier=None) -> dict:
    """One benchmark per (series, knob value); vanilla's own quality from the first of them (its images
    are the same at every point, so they are scored once)."""
    out, reference = [], None
    for item in series:
        points = []
        for value in item.values:
            results = measure_point(model, item.method, sampling, n_images, item.options(base, value), progress,
                                    classifier, with_vanilla=reference is None)
            reference = reference or results[BASELINE]
            points.append({item.knob: value, **results[item.method]})
        out.append({"label": item.label, "method": item.method, "knob": item.knob, "fixed": item.fixed,
                    "points": points})
    return {"config": {"n_images": n_images, "temperature": sampling.temperature, "cfg": sampling.cfg_scale,
                       "seed": sampling.seed, "tree": dataclasses.asdict(base.tree)},
            "vanilla": reference, "series": out}


def inside_vanilla(point: dict, vanilla: dict) -> bool:
    """Whether a point's quality lies inside vanilla's 95 % intervals on class accuracy, fid_proxy
    and the low-p share (each measure the point and vanilla both have)."""
    for key, interval, _ in QUALITY_MEASURES[:3]:
        if point.get(key) is None or vanilla.get(interval) is None:
            continue
        low, high = vanilla[interval]
        if not low <= point[key] <= high:
            return False
    return True


def fastest_inside_vanilla(frontier: dict) -> tuple[dict, dict] | None:
    """(series, point) of the largest speed-up whose quality stays inside vanilla's intervals."""
    candidates = [(s, p) for s in frontier["series"] for p in s["points"] if inside_vanilla(p, frontier["vanilla"])]
    return max(candidates, key=lambda pair: pair[1]["speedup"], default=None)
