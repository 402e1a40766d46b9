"""The frontier tab: every relaxed rule's speed-up against quality along its own knob, in the mode
the temperature sets, from the shipped frontier file (python -m engine frontier)."""
from __future__ import annotations

from pathlib import Path

from app.backend.shipped import SweepFormatError, frontier_path, load_frontier
from app.views import plots
from engine import fastest_inside_vanilla
from engine.core.config import SamplingConfig
from engine.loading.embedded import ASSETS
from engine.model.matmul import cpu_model


def frontier_chart(temperature: float, assets: Path = ASSETS) -> tuple:
    """(figure or None, caption) for the mode of `temperature`."""
    try:
        greedy = SamplingConfig(temperature=float(temperature)).greedy
    except (TypeError, ValueError):  # InvalidInput included
        return None, "The frontier follows the temperature, which is not valid."
    mode = "greedy" if greedy else "sampling"
    try:
        frontier = load_frontier(greedy, assets)
    except (SweepFormatError, ValueError) as err:
        return None, f"The shipped {mode} frontier could not be read: {err}"
    if frontier is None:
        path = frontier_path(greedy, assets)
        return None, (f"No {mode} frontier is shipped. `python -m engine frontier --temperature "
                      f"{0 if greedy else 1} --json assets/sweeps/{path.name}` makes one.")
    config = frontier["config"]
    caption = (f"**The relaxed rules, {mode}** (temperature {config.get('temperature', 0):g}, CFG "
               f"{config.get('cfg', 4):g}): each line is one rule moved along its knob, each point "
               f"{config.get('n_images', '?')} images against vanilla on the same images; bars are 95 % intervals "
               "and the grey band vanilla's own. The menu picks the quality measure.")
    elsewhere = {s["cpu"]: [] for s in frontier["series"] if "vanilla" in s}
    for series in frontier["series"]:
        if "vanilla" in series:
            elsewhere[series["cpu"]].append(series["label"])
    for cpu, labels in elsewhere.items():
        caption += (f" Dashed: {'; '.join(labels)}, run on {cpu}, whose vanilla draws other samples from the "
                    "same seeds; they are judged against that vanilla, the dashed band.")
    best = fastest_inside_vanilla(frontier)
    if best is not None:
        series, point = best
        caption += (f" Fastest with quality inside vanilla's intervals (class accuracy, fid_proxy, low-p share): "
                    f"**{series['label']}** at {series['knob']} {point[series['knob']]:g}, "
                    f"{point['speedup']:.2f}x.")
    caption += " " + _why_panels_differ(config)
    return plots.frontier_figure(frontier, f"Relaxed rules, {mode}: speed-up against quality"), caption


def _why_panels_differ(config: dict) -> str:
    """Why a panel's speed-up is not the frontier's: how many images each point's speed-up is over,
    and on which machine, against one image on this one."""
    timed, decoded = config.get("speed_images"), config.get("n_images")
    images = f"the median over {timed or decoded or 'several'} images"
    if timed and decoded and timed != decoded:
        images += f" (its quality is over all {decoded})"
    there = f"on {config['cpu']}" if config.get("cpu") else "on the machine that made this frontier"
    here = f" ({cpu_model()})" if cpu_model() else ""
    return (f"A point's speed-up is {images}, timed {there}; a panel's is one image timed on this "
            f"machine{here}. One image's ratio moves from image to image, and each CPU prices drafting and "
            "verifying differently, so the two need not agree.")
