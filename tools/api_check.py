"""The explorer's default comparison measured through its API, as a user's program would call it.

Against a running explorer (python app.py), one call per seed with the API's defaults, then the
LANTERN panel at two deltas:

    python -m tools.api_check --url http://127.0.0.1:7860/ --seeds 0,1,2,3,4 --json api_check.json

Per seed: each panel's method, MAL and speed-up against vanilla, the panels' decode time, the
server's time for the whole call and the client's. Medians over the seeds at the end.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from engine.model.matmul import cpu_model

STATISTICS_OUTPUT = 15  # the `compare` endpoint's statistics output (README, "The explorer's API")


def compare(client, **values) -> tuple[dict, float]:
    started = time.perf_counter()
    result = client.predict(api_name="/compare", **values)
    return result[STATISTICS_OUTPUT], time.perf_counter() - started



def main() -> None:
    from gradio_client import Client

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:7860/")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--deltas", default="0.05,0.5", help="LANTERN's MAL at each of these, seed 0")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    client = Client(args.url, verbose=False)
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        stats, client_s = compare(client, seed=seed)
        rows = stats["methods"]
        run = {"seed": seed, "methods": [row["method"] for row in rows],
               "mal": [row["mean_accepted_length"] for row in rows],
               "speedup": [row["speedup_vs_vanilla"] for row in rows],
               "panels_decode_ms": stats["panels_decode_ms"], "comparison_wall_ms": stats["comparison_wall_ms"],
               "client_s": round(client_s, 2)}
        run["call_over_panels"] = round(run["comparison_wall_ms"] / run["panels_decode_ms"], 3)  # the server's
        run["client_over_panels"] = round(client_s * 1000 / run["panels_decode_ms"], 3)  # the caller's
        runs.append(run)
        print(json.dumps(run))
    by_delta = {}
    for delta in (float(d) for d in args.deltas.split(",")):
        stats, _ = compare(client, seed=0, delta=delta)
        by_delta[delta] = stats["methods"][-1]["mean_accepted_length"]
    report = {"cpu": cpu_model(), "runs": runs,
              "median_last_panel_speedup": statistics.median(run["speedup"][-1] for run in runs),
              "median_call_over_panels": statistics.median(run["call_over_panels"] for run in runs),
              "median_client_over_panels": statistics.median(run["client_over_panels"] for run in runs),
              "last_panel_mal_by_delta_seed_0": by_delta}
    print(json.dumps({key: value for key, value in report.items() if key != "runs"}, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
