"""README's measured tables, rendered from the shipped benchmark, sweep and frontier JSONs.

After the clean-checkout run that README's "Measured on this model" section lists, this prints the
method table, the step costs, the delta sweep and each shipped frontier exactly as README shows
them, so that the numbers in README are the ones in `assets/results/` and `assets/sweeps/` (a test
checks that they agree).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.shipped import load_frontier, sweep_path
from engine.commands.frontier import inside_vanilla
from engine.evaluation.speed import BASELINE
from engine.loading.embedded import ASSETS

SAMPLING_BENCH = Path("results/bench_sampling.json")
GREEDY_BENCH = Path("results/bench_greedy.json")
NOT_RUN = "not run"  # the cell of a method that one of the two runs left out


def _interval(bounds: list[float], spec: str = ".2f") -> str:
    return "[" + ", ".join(format(b, spec) for b in bounds) + "]"


def _gap(entry: dict, spec: str, interval_spec: str) -> str:
    return f"{format(entry['logp_gap'], spec)} {_interval(entry['logp_gap_ci'], interval_spec)}"


def _low_p(entry: dict) -> str:
    return f"{entry['low_p_share']:.3f} {_interval(entry['low_p_share_ci'], '.3f')}"


def method_table(sampling: dict[str, dict], greedy: dict[str, dict], deltas: tuple[float, float]) -> str:
    """One row per method: the sampling run's speed, acceptance and quality, the greedy run's speed;
    `deltas` are LANTERN's delta in the sampling and the greedy run."""
    rows = [f"| method | sampling, delta {deltas[0]:g}: speed-up / MAL / accept p / class acc. [95 % CI] / "
            "fid_proxy [95 % CI] / log p gap [95 % CI] / p < 1e-4 share [95 % CI] | "
            f"greedy, delta {deltas[1]:g}: speed-up [min-max] / MAL / = vanilla |",
            "|---|---|---|"]
    rows += [f"| `{name}` | {_sampling_cell(name, sampling.get(name))} | {_greedy_cell(name, greedy.get(name))} |"
             for name in _in_either(sampling, greedy)]
    return "\n".join(rows)


def _in_either(sampling: dict[str, dict], greedy: dict[str, dict]) -> list[str]:
    """The methods of either run, the sampling run's order first."""
    return list(sampling) + [name for name in greedy if name not in sampling]


def _sampling_cell(name: str, s: dict | None) -> str:
    if s is None:
        return NOT_RUN
    accept = "-" if s["mean_accept_prob"] is None else f"{s['mean_accept_prob']:.3f}"
    gap = "0" if name == BASELINE else _gap(s, ".3f", ".3f")
    return (f"{s['speedup']:.2f}x / {s['mal']:.2f} / {accept} / {s['class_accuracy']:.3f} "
            f"{_interval(s['class_accuracy_ci'])} / {s['fid_proxy']:.2f} {_interval(s['fid_proxy_ci'])} / "
            f"{gap} / {_low_p(s)}")


def _greedy_cell(name: str, g: dict | None) -> str:
    if g is None:
        return NOT_RUN
    same = {None: "-", True: "yes", False: "no"}[g["matches_vanilla_greedy"]]
    speed = "1.00x" if name == BASELINE else f"{g['speedup']:.2f}x [{g['speedup_min']:.2f}-{g['speedup_max']:.2f}]"
    return f"{speed} / {g['mal']:.2f} / {same}"


def cost_table(sampling: dict[str, dict], greedy: dict[str, dict]) -> str:
    """Milliseconds per target pass, split into draft / verify / accept / other."""
    def split(entry: dict | None) -> str:
        if entry is None:
            return NOT_RUN
        ms = entry["ms_per_step"]
        return " / ".join(f"{ms[part]:.2f}" for part in ("draft", "verify", "accept", "other")) + f" = {ms['wall']:.2f}"

    rows = ["| | sampling | greedy |", "|---|---|---|"]
    rows += [f"| {name} | {split(sampling.get(name))} | {split(greedy.get(name))} |"
             for name in _in_either(sampling, greedy)]
    return "\n".join(rows)


def sweep_table(static: list[dict]) -> str:
    """One row per delta of the static chain's sampling sweep: speed and quality."""
    rows = ["| delta | `lantern_static`, sampling: speed-up / MAL / class acc. [95 % CI] / fid_proxy [95 % CI] / "
            "log p gap [95 % CI] / p < 1e-4 share [95 % CI] |",
            "|---|---|"]
    for a in static:
        rows.append(f"| {a['delta']:g} | {a['speedup']:.2f}x / {a['mal']:.2f} / {a['class_accuracy']:.2f} "
                    f"{_interval(a['class_accuracy_ci'])} / {a['fid_proxy']:.1f} {_interval(a['fid_proxy_ci'], '.1f')}"
                    f" / {_gap(a, '+.2f', '.2f')} / {_low_p(a)} |")
    return "\n".join(rows)


def frontier_table(frontier: dict, mode: str) -> str:
    """One row per point of a frontier, vanilla's first; "yes" where quality stays inside vanilla's
    intervals (class accuracy, fid_proxy, low-p share)."""
    config, vanilla = frontier["config"], frontier["vanilla"]
    rows = [f"| {mode}, {config['n_images']} images a point | setting | speed-up / MAL | class acc. [95 % CI] | "
            "fid_proxy [95 % CI] | p < 1e-4 share [95 % CI] | log p gap [95 % CI] | inside vanilla's |",
            "|---|---|---|---|---|---|---|---|",
            f"| vanilla | | 1.00x / 1.00 | {vanilla['class_accuracy']:.3f} {_interval(vanilla['class_accuracy_ci'])} | "
            f"{vanilla['fid_proxy']:.1f} {_interval(vanilla['fid_proxy_ci'], '.1f')} | {_low_p(vanilla)} | 0 | |"]
    for series in frontier["series"]:
        for p in series["points"]:
            rows.append(f"| {series['label']} | {series['knob']} {p[series['knob']]:g} | {p['speedup']:.2f}x / "
                        f"{p['mal']:.2f} | {p['class_accuracy']:.3f} {_interval(p['class_accuracy_ci'])} | "
                        f"{p['fid_proxy']:.1f} {_interval(p['fid_proxy_ci'], '.1f')} | {_low_p(p)} | "
                        f"{_gap(p, '+.2f', '.2f')} | {'yes' if inside_vanilla(p, vanilla) else 'no'} |")
    return "\n".join(rows)


def render(assets: Path = ASSETS) -> list[str]:
    """The tables, in README's order: a frontier's only where one ships."""
    def load(path: Path):
        return json.loads(path.read_text())

    sampling_run, greedy_run = load(assets / SAMPLING_BENCH), load(assets / GREEDY_BENCH)
    sampling, greedy = sampling_run["methods"], greedy_run["methods"]
    deltas = (sampling_run["config"]["delta"], greedy_run["config"]["delta"])
    static = load(sweep_path("lantern_static", greedy=False, assets=assets))["points"]
    frontiers = [frontier_table(frontier, mode) for is_greedy, mode in ((False, "sampling"), (True, "greedy"))
                 if (frontier := load_frontier(is_greedy, assets)) is not None]
    return [method_table(sampling, greedy, deltas), cost_table(sampling, greedy), sweep_table(static), *frontiers]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--assets", type=Path, default=ASSETS, help="where the JSONs are read")
    args = parser.parse_args(argv)
    print("\n\n".join(render(args.assets)))


if __name__ == "__main__":
    main()
