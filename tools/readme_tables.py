"""The measured tables of README and the documentation, rendered from the shipped JSONs.

Each table sits in a Markdown file between two markers, `<!-- tables: NAME -->` and `<!-- /tables -->`;
`--write FILE ...` renders every marked table of those files again from `assets/results/` and
`assets/sweeps/`, and `--check FILE ...` fails where a file shows anything else, so that every
benchmark number in README and docs/ is one a shipped run wrote (a test runs the check). Without
either option it prints every table by name.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from app.backend.shipped import load_frontier, sweep_path
from engine import fastest_inside_vanilla, inside_vanilla, reference_of
from engine.evaluation.speed import BASELINE, undrafted_speedup
from engine.loading.embedded import ASSETS
from engine.methods import methods_taking

RESULTS = Path("results")
SAMPLING_BENCH = RESULTS / "bench_sampling.json"
GREEDY_BENCH = RESULTS / "bench_greedy.json"
NOT_RUN = "not run"  # the cell of a method that one of the two runs left out
BLOCK = re.compile(r"(<!-- tables: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /tables -->)", re.S)


def _interval(bounds: list[float], spec: str = ".2f") -> str:
    return "[" + ", ".join(format(b, spec) for b in bounds) + "]"


def _gap(entry: dict, spec: str, interval_spec: str) -> str:
    return f"{format(entry['logp_gap'], spec)} {_interval(entry['logp_gap_ci'], interval_spec)}"


def _low_p(entry: dict) -> str:
    return f"{entry['low_p_share']:.3f} {_interval(entry['low_p_share_ci'], '.3f')}"


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _cpu(config: dict) -> str:
    # Records written before the commands named the CPU say so rather than guess.
    return config.get("cpu") or "a CPU the record does not name"


def run_conditions(config: dict) -> str:
    """One sentence: what a benchmark record ran and the machine it ran on, from its own config."""
    mode = "greedy" if config["temperature"] == 0 else f"sampling at temperature {config['temperature']:g}"
    repeats = config.get("repeats", 1)
    runs = f"{repeats} repeats, the median one shown" if repeats > 1 else "one repeat"
    precision = config.get("precision", "float32")
    if config.get("large_products_in_bfloat16"):
        precision += f", products of {config['large_products_min_macs']:,} multiply-adds or more in bfloat16"
    rows = ""
    if set(config["methods"]) & set(methods_taking("row_window")):
        rows = f"; rows in parallel with a window of {config['row_window']}, at most {config['rows_in_flight']} at once"
    return (f"*{config['n_images']} images, {mode}, CFG {config['cfg']:g}, seed {config['seed']}, {runs}; "
            f"LANTERN's delta {config['delta']:g} (k {config['k']}, {config['lantern_variant']} variant), "
            f"COOL-SD's w {config['cool_w']:g}, the relaxed chains' drafts from top-p {config['draft_top_p']:g}"
            f"{rows}; measured on {_cpu(config)}, {config['threads']} thread, {precision}.*")


def headline_table(run: dict) -> str:
    """A benchmark record's methods: speed-up, MAL and quality, under the run's conditions."""
    greedy = run["config"]["temperature"] == 0
    rows = ["| method | speed-up | MAL | class acc. [95 % CI] | log p gap [95 % CI] | p < 1e-4 share [95 % CI] |"
            + (" = vanilla |" if greedy else ""),
            "|---|---|---|---|---|---|" + ("---|" if greedy else "")]
    for name, m in run["methods"].items():
        speed = "1.00x" if name == BASELINE else f"{m['speedup']:.2f}x"
        if greedy and name != BASELINE:
            speed += f" [{m['speedup_min']:.2f}-{m['speedup_max']:.2f}]"
        gap = "0" if name == BASELINE else _gap(m, "+.3f", ".3f")
        row = (f"| `{name}` | {speed} | {m['mal']:.2f} | {m['class_accuracy']:.3f} {_interval(m['class_accuracy_ci'])}"
               f" | {gap} | {_low_p(m)} |")
        if greedy:
            row += f" {({None: '-', True: 'yes', False: 'no'})[m['matches_vanilla_greedy']]} |"
        rows.append(row)
    return "\n".join(rows) + "\n\n" + run_conditions(run["config"])


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


def _no_draft(entry: dict, vanilla: dict) -> float:
    """The record's `undrafted_speedup`, or, in records written before the benchmark stored it, the
    same measure from the record's own MAL and step costs."""
    if entry.get("undrafted_speedup") is not None:
        return entry["undrafted_speedup"]
    return undrafted_speedup(entry["mal"], vanilla["ms_per_step"]["wall"], entry["ms_per_step"])


def cpu_table(records: list[dict]) -> str:
    """The same benchmark on several CPUs: what a step of vanilla costs, what verifying a tree costs in
    one-token passes, and each method's speed-up beside its ceiling with drafting free (no-draft)."""
    rows = ["| CPU | mode | vanilla ms a step | method | MAL | verifying, in one-token passes | speed-up | no-draft |",
            "|---|---|---|---|---|---|---|---|"]
    for run in records:
        config, methods = run["config"], run["methods"]
        vanilla = methods[BASELINE]
        mode = "greedy" if config["temperature"] == 0 else "sampling"
        for name, m in methods.items():
            if name == BASELINE:
                continue
            passes = m["ms_per_step"]["verify"] / vanilla["ms_per_step"]["verify"]
            rows.append(f"| {_cpu(config)} | {mode} | {vanilla['ms_per_step']['wall']:.2f} | `{name}` | "
                        f"{m['mal']:.2f} | {passes:.2f} | {m['speedup']:.2f}x | {_no_draft(m, vanilla):.2f}x |")
    return "\n".join(rows)


def sweep_table(points: list[dict], config: dict) -> str:
    """One row per delta of a sweep of the static chain: speed and quality."""
    mode = "greedy" if config["temperature"] == 0 else "sampling"
    rows = [f"| delta | `{config['method']}`, {mode}: speed-up / MAL / class acc. [95 % CI] / fid_proxy [95 % CI] / "
            "log p gap [95 % CI] / p < 1e-4 share [95 % CI] |",
            "|---|---|"]
    for a in points:
        rows.append(f"| {a['delta']:g} | {a['speedup']:.2f}x / {a['mal']:.2f} / {a['class_accuracy']:.2f} "
                    f"{_interval(a['class_accuracy_ci'])} / {a['fid_proxy']:.1f} {_interval(a['fid_proxy_ci'], '.1f')}"
                    f" / {_gap(a, '+.2f', '.2f')} / {_low_p(a)} |")
    return "\n".join(rows) + (f"\n\n*{config['n_images']} images a point, seed {config['seed']}, "
                              f"CFG {config['cfg']:g}, drafts from top-p {config['draft_top_p']:g}; "
                              f"measured on {_cpu(config)}.*")


def _vanilla_row(label: str, vanilla: dict) -> str:
    return (f"| {label} | | 1.00x / 1.00 | {vanilla['class_accuracy']:.3f} {_interval(vanilla['class_accuracy_ci'])} | "
            f"{vanilla['fid_proxy']:.1f} {_interval(vanilla['fid_proxy_ci'], '.1f')} | {_low_p(vanilla)} | 0 | |")


def frontier_table(frontier: dict, mode: str) -> str:
    """One row per point of a frontier, vanilla's first; "yes" where quality stays inside vanilla's
    intervals (class accuracy, fid_proxy, low-p share); then the fastest such point."""
    config, vanilla = frontier["config"], frontier["vanilla"]
    rows = [f"| {mode}, {config['n_images']} images a point | setting | speed-up / MAL | class acc. [95 % CI] | "
            "fid_proxy [95 % CI] | p < 1e-4 share [95 % CI] | log p gap [95 % CI] | inside vanilla's |",
            "|---|---|---|---|---|---|---|---|",
            _vanilla_row("vanilla", vanilla)]
    for series in frontier["series"]:
        reference = reference_of(frontier, series)
        if "vanilla" in series:  # ran on another CPU: its own vanilla first, which judges it
            rows.append(_vanilla_row(f"vanilla on {series['cpu']}, for {series['label']}", reference))
        for p in series["points"]:
            rows.append(f"| {series['label']} | {series['knob']} {p[series['knob']]:g} | {p['speedup']:.2f}x / "
                        f"{p['mal']:.2f} | {p['class_accuracy']:.3f} {_interval(p['class_accuracy_ci'])} | "
                        f"{p['fid_proxy']:.1f} {_interval(p['fid_proxy_ci'], '.1f')} | {_low_p(p)} | "
                        f"{_gap(p, '+.2f', '.2f')} | {'yes' if inside_vanilla(p, reference) else 'no'} |")
    best = fastest_inside_vanilla(frontier)
    verdict = ("No point stays inside vanilla's intervals." if best is None else
               f"The fastest point inside vanilla's intervals: {best[0]['label']} at {best[0]['knob']} "
               f"{best[1][best[0]['knob']]:g}, {best[1]['speedup']:.2f}x (MAL {best[1]['mal']:.2f}).")
    return "\n".join(rows) + (f"\n\n*{verdict} Each point's speed-up is the median ratio against vanilla on its "
                              f"first {config['speed_images']} images; seed {config['seed']}, CFG {config['cfg']:g}; "
                              f"measured on {_cpu(config)}{_elsewhere(frontier)}.*")


def _elsewhere(frontier: dict) -> str:
    """Which series ran on another CPU, each judged against the vanilla decoded there."""
    moved = [s["label"] for s in frontier["series"] if "vanilla" in s]
    return (f", except {', '.join(moved)}, each judged against the vanilla of the CPU its row names"
            if moved else "")


def _bench_pair(assets: Path, suffix: str = "") -> tuple[dict, dict]:
    """The sampling and the greedy record of one benchmark run (`suffix`: _xeon, _bfloat16, or none)."""
    return (_load(assets / RESULTS / f"bench_sampling{suffix}.json"),
            _load(assets / RESULTS / f"bench_greedy{suffix}.json"))


def _methods(assets: Path, suffix: str = "") -> str:
    sampling, greedy = _bench_pair(assets, suffix)
    deltas = (sampling["config"]["delta"], greedy["config"]["delta"])
    return (method_table(sampling["methods"], greedy["methods"], deltas) + "\n\n" + run_conditions(sampling["config"])
            + "\n\n" + run_conditions(greedy["config"]))


def _sweep(greedy: bool) -> Callable[[Path], str]:
    def render_sweep(assets: Path) -> str:
        data = _load(sweep_path("lantern_static", greedy=greedy, assets=assets))
        return sweep_table(data["points"], data["config"])
    return render_sweep


def _frontier(greedy: bool) -> Callable[[Path], str]:
    def render_frontier(assets: Path) -> str:
        frontier = load_frontier(greedy, assets)
        if frontier is None:
            raise FileNotFoundError(f"no {'greedy' if greedy else 'sampling'} frontier ships in {assets}")
        return frontier_table(frontier, "greedy" if greedy else "sampling")
    return render_frontier


# Every table a Markdown file may mark, by name; each reads only what ships in `assets`.
TABLES: dict[str, Callable[[Path], str]] = {
    "headline-sampling": lambda assets: headline_table(_load(assets / SAMPLING_BENCH)),
    "headline-greedy": lambda assets: headline_table(_load(assets / GREEDY_BENCH)),
    "methods": _methods,
    "costs": lambda assets: cost_table(*(run["methods"] for run in _bench_pair(assets))),
    "cpus": lambda assets: cpu_table([*_bench_pair(assets), *_bench_pair(assets, "_xeon")]),
    "costs-xeon": lambda assets: cost_table(*(run["methods"] for run in _bench_pair(assets, "_xeon"))),
    "methods-bfloat16": lambda assets: _methods(assets, "_bfloat16"),
    "sweep-sampling": _sweep(greedy=False),
    "sweep-greedy": _sweep(greedy=True),
    "frontier-sampling": _frontier(greedy=False),
    "frontier-greedy": _frontier(greedy=True),
    "rows-sampling": lambda assets: headline_table(_load(assets / RESULTS / "bench_rows_sampling.json")),
    "rows-sampling-w4": lambda assets: headline_table(_load(assets / RESULTS / "bench_rows_sampling_w4.json")),
    "rows-greedy": lambda assets: headline_table(_load(assets / RESULTS / "bench_rows_greedy.json")),
    "rows-greedy-w4": lambda assets: headline_table(_load(assets / RESULTS / "bench_rows_greedy_w4.json")),
}


def fill(text: str, assets: Path = ASSETS) -> str:
    """`text` with every marked table rendered again; an unknown name is an error, not a blank."""
    def rendered(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
        return f"{match[1]}\n{TABLES[name](assets)}\n\n{match[4]}"

    return BLOCK.sub(rendered, text)


def marked(text: str) -> list[str]:
    """The names of the tables a Markdown text marks, in order."""
    return [match["name"] for match in BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=Path, default=ASSETS, help="where the JSONs are read")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", nargs="+", type=Path, metavar="FILE", help="render the marked tables in place")
    action.add_argument("--check", nargs="+", type=Path, metavar="FILE",
                        help="exit 1 where a marked table differs from its rendering")
    args = parser.parse_args(argv)
    if not args.write and not args.check:
        print("\n\n".join(f"{name}:\n\n{render(args.assets)}" for name, render in TABLES.items()))
        return
    stale = []
    for path in args.write or args.check:
        text = path.read_text()
        if not marked(text):
            parser.error(f"{path} marks no table (<!-- tables: NAME --> ... <!-- /tables -->)")
        new = fill(text, args.assets)
        if new != text:
            stale.append(path)
            if args.write:
                path.write_text(new)
    if args.check and stale:
        sys.exit(f"stale tables in {', '.join(map(str, stale))}; run python -m tools.readme_tables --write FILE")


if __name__ == "__main__":
    main()
