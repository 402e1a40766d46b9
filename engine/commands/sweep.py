"""The delta x k sweep: LANTERN's speed-up against quality, written as JSON and a Plotly chart."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from engine.commands.bench import run_methods, summarise
from engine.core.config import SamplingConfig
from engine.evaluation.speed import BASELINE
from engine.loading.image_model import ImageModel
from engine.methods import MethodOptions

# What each sweep point keeps of its benchmark result.
SWEEP_FIELDS = ("speedup", "speedup_min", "speedup_max", "mal", "mean_accept_prob", "class_accuracy",
                "class_accuracy_ci", "fid_proxy", "fid_proxy_ci", "logp_gap", "logp_gap_ci", "low_p_share",
                "low_p_share_ci")


def parse_grid(text: str, cast) -> list:
    return [cast(v) for v in text.split(",") if v.strip()]


def measure_point(model: ImageModel, method: str, sampling: SamplingConfig, n_images: int, options: MethodOptions,
                  progress=None, classifier=None, with_vanilla: bool = False) -> dict[str, dict]:
    """One benchmark of `method` at `options`, interleaved with its own vanilla runs: the SWEEP_FIELDS
    of the method and, if `with_vanilla`, of vanilla's images too (scored only when asked for)."""
    runs = run_methods(model, [method], sampling, n_images, options, progress)
    measured = [BASELINE, method] if with_vanilla else [method]
    results = summarise(model, runs, sampling, measured, classifier)
    return {name: {key: results[name][key] for key in SWEEP_FIELDS} for name in measured}


def run_sweep(model: ImageModel, sampling: SamplingConfig, n_images: int, base: MethodOptions,
              deltas: list[float], ks: list[int], method: str = "lantern", progress=None,
              classifier=None) -> dict:
    """One benchmark per (delta, k), each interleaved with its own vanilla runs."""
    points = []
    for k in ks:
        for delta in deltas:
            options = dataclasses.replace(base, delta=delta, k=k)
            result = measure_point(model, method, sampling, n_images, options, progress, classifier)[method]
            points.append({"delta": delta, "k": k, **result})
    return {"config": {"method": method, "n_images": n_images, "temperature": sampling.temperature,
                       "cfg": sampling.cfg_scale, "seed": sampling.seed, "draft_top_p": base.draft_top_p,
                       "tree": dataclasses.asdict(base.tree)},
            "points": points}


def write_sweep(sweep: dict, json_path: Path) -> Path:
    """Write the JSON and, next to it, an HTML chart of speed-up against class accuracy."""
    import plotly.graph_objects as go

    json_path.write_text(json.dumps(sweep, indent=2))
    fig = go.Figure()
    for k in sorted({p["k"] for p in sweep["points"]}):
        pts = [p for p in sweep["points"] if p["k"] == k]
        fig.add_trace(go.Scatter(
            x=[p["speedup"] for p in pts], y=[p["class_accuracy"] for p in pts], mode="lines+markers+text",
            text=[f"δ={p['delta']:g}" for p in pts], textposition="top center", name=f"k = {k}",
            customdata=[[p["mal"], p["fid_proxy"]] for p in pts],
            hovertemplate="speed-up %{x:.2f}x<br>class accuracy %{y:.3f}<br>MAL %{customdata[0]:.2f}"
                          "<br>fid_proxy %{customdata[1]:.2f}"))
    config = sweep["config"]
    fig.update_layout(title=f"{config['method']}: speed-up vs quality (temperature {config['temperature']:g}, "
                            f"{config['n_images']} images per point)",
                      xaxis_title="speed-up over vanilla (x)", yaxis_title="class accuracy")
    html_path = json_path.with_suffix(".html")
    fig.write_html(str(html_path), include_plotlyjs=True)
    return html_path
