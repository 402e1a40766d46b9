"""Command line: `python -m engine generate ...` and `python -m engine bench ...`."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

import numpy as np
import torch

from engine.commands.arguments import add_decoding_arguments, method_options, sampling_config
from engine.core.config import InvalidInput, check_count
from engine.loading.image_model import ImageModel
from engine.loading.load import load_model, resolve_device, resolve_precision
from engine.methods import METHODS, MethodOptions, methods_taking
from engine.model import matmul
from engine.model.weights import WeightsError

log = logging.getLogger("engine")


def _load_model(args) -> ImageModel:
    torch.set_num_threads(check_count("threads", args.threads))
    model = load_model(args.model, args.weights_dir, args.device, args.dtype)
    if model.needs_prompt and not args.prompt:
        raise InvalidInput(f"model {args.model!r} is text-to-image; give a caption with --prompt")
    if args.prompt and not model.needs_prompt:
        raise InvalidInput(f"model {args.model!r} is class-conditional; use --class-id, not --prompt")
    return model.bind(args.prompt)


def cmd_generate(args) -> None:
    from engine.generation import generate, tokens_to_image

    model = _load_model(args)
    result = generate(model, args.method, sampling_config(args), args.class_id, method_options(args))
    tokens_to_image(model, result.tokens).save(args.out)
    if args.tokens_out:
        np.save(args.tokens_out, result.tokens)
    print(f"{args.method}: class {result.class_id} ({model.class_names[result.class_id]}), "
          f"{result.steps} target passes, mean accepted length {result.mean_accepted_length:.2f}, "
          f"{result.wall_ms:.0f} ms -> {args.out}")


def cmd_bench(args) -> None:
    from tqdm import tqdm

    from engine.commands.bench import format_table, run_repeats, summarise

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    check_count("n-images", args.n_images)
    check_count("repeats", args.repeats)
    model = _load_model(args)
    sampling, options = sampling_config(args), method_options(args)
    if args.sweep:
        return _sweep(args, model, sampling, options)
    total = args.repeats * args.n_images * len(set(methods) | {"vanilla"})
    with tqdm(total=total, desc="images", unit="image", file=sys.stderr) as progress:
        repeats = run_repeats(model, methods, sampling, args.n_images, options, args.repeats, progress)
    with tqdm(desc="quality", unit="image", file=sys.stderr) as progress:
        results = summarise(model, repeats[0], sampling, methods, repeats=repeats, progress=progress)
    print(format_table(results))
    for name in [m for m, r in results.items() if not r["repeats_agree"]]:
        log.warning("%s produced different tokens in different repeats", name)
    if args.json:
        config = {"model": model.name, "n_images": args.n_images, "repeats": args.repeats, "methods": methods,
                  "temperature": sampling.temperature, "cfg": sampling.cfg_scale, "top_k": sampling.top_k,
                  "top_p": sampling.top_p, "seed": sampling.seed, "delta": options.delta, "k": options.k,
                  "lantern_variant": options.lantern_variant, "lantern_lambda": options.lantern_lambda,
                  "cool_w": options.cool_w, "draft_top_p": options.draft_top_p,
                  "static_tree": None if options.static_tree is None else [list(c) for c in options.static_tree],
                  "sjd_init": options.sjd_init,
                  "row_window": options.row_window, "rows_in_flight": options.rows_in_flight,
                  "gsd": {"window": options.gsd_window, "p_gap": options.gsd_p_gap,
                          "distance": options.gsd_distance},
                  "tree": dataclasses.asdict(options.tree),
                  "threads": args.threads,
                  "precision": resolve_precision(args.dtype, resolve_device(args.device)),
                  "large_products_in_bfloat16": matmul.rounds_large_products(model.target.output.weight,
                                                                             sampling.greedy),
                  "large_products_min_macs": matmul.LARGE_MIN_MACS, "cpu": matmul.cpu_model()}
        Path(args.json).write_text(json.dumps({"config": config, "methods": results}, indent=2))


def _sweep(args, model, sampling, options) -> None:
    from tqdm import tqdm

    from engine.commands.sweep import parse_grid, run_sweep, write_sweep

    deltas, ks = parse_grid(args.deltas, float), parse_grid(args.ks, int)
    for delta in deltas:  # validate the whole grid before any work
        MethodOptions(delta=delta)
    for k in ks:
        MethodOptions(k=k)
        model.neighbours(k)
    total = len(deltas) * len(ks) * args.n_images * 2
    with tqdm(total=total, desc="sweep", unit="image", file=sys.stderr) as progress:
        sweep = run_sweep(model, sampling, args.n_images, options, deltas, ks, args.sweep_method,
                          progress=progress)
    for p in sweep["points"]:
        fid = "-" if p["fid_proxy"] is None else f"{p['fid_proxy']:.2f}"
        print(f"delta {p['delta']:<5g} k {p['k']:<5d} speed-up {p['speedup']:.2f}x MAL {p['mal']:.2f} "
              f"class acc {p['class_accuracy']:.3f} fid_proxy {fid}")
    html = write_sweep(sweep, Path(args.json or "sweep.json"))
    print(f"chart: {html}")

def cmd_chain_cost(args) -> None:
    from tqdm import tqdm

    from engine.commands.chain_cost import chain_costs
    from engine.commands.sweep import parse_grid

    depths = parse_grid(args.depths, int)
    check_count("n-images", args.n_images)
    model = _load_model(args)
    with tqdm(total=len(set(depths)) * args.n_images * 2, desc="chains", unit="image", file=sys.stderr) as bar:
        costs = chain_costs(model, args.method, depths, sampling_config(args), args.n_images, method_options(args), bar)
    print(f"{args.method}: one-token pass {costs['one_token_pass_ms']:.2f} ms, drafter call "
          f"{costs['draft_call_ms']:.2f} ms, verify {costs['verify_ms'][0]:.2f} + {costs['verify_ms'][1]:.3f} n ms, "
          f"rest {costs['rest_ms']:.2f} ms")
    for row in costs["depths"]:
        measured = f"  measured {row['measured_speedup']:.2f}x" if "measured_speedup" in row else ""
        accept = costs["acceptance_by_depth"][row["depth"] - 1]
        print(f"depth {row['depth']:>2}: a_d {accept:.3f}  E {row['expected_tokens']:.2f}  pass {row['pass_ms']:.2f} ms"
              f"  model {row['modelled_speedup']:.2f}x{measured}")
    print(f"best depth by the model: {costs['best_depth']}")
    if args.json:
        Path(args.json).write_text(json.dumps(costs, indent=2))


def cmd_frontier(args) -> None:
    from tqdm import tqdm

    from engine.commands.frontier import add_series, run_frontier, series_for
    from engine.evaluation.quality import fastest_inside_vanilla

    check_count("n-images", args.n_images)
    sampling = sampling_config(args)
    series = series_for(sampling, [name.strip() for name in args.series.split(";") if name.strip()])
    model = _load_model(args)
    speed_images = min(args.speed_images, args.n_images)
    total = args.n_images + sum(len(s.values) for s in series) * (args.n_images + speed_images)
    with tqdm(total=total, desc="frontier", unit="image", file=sys.stderr) as progress:
        frontier = run_frontier(model, sampling, args.n_images, method_options(args), series, progress=progress,
                                speed_images=speed_images)
    for item in frontier["series"]:
        for p in item["points"]:
            print(f"{item['label']:<40} {item['knob']} {p[item['knob']]:<6g} speed-up {p['speedup']:.2f}x "
                  f"MAL {p['mal']:.2f} class acc {p['class_accuracy']:.3f} low p {p['low_p_share']:.3f} "
                  f"log p gap {p['logp_gap']:+.3f}")
    best = fastest_inside_vanilla(frontier)
    if best is not None:
        print(f"fastest inside vanilla's intervals: {best[0]['label']}, {best[0]['knob']} "
              f"{best[1][best[0]['knob']]:g}, {best[1]['speedup']:.2f}x")
    Path(args.json or "frontier.json").write_text(json.dumps(frontier, indent=2))
    if args.add_to:
        grown = add_series(json.loads(Path(args.add_to).read_text()), frontier)
        Path(args.add_to).write_text(json.dumps(grown, indent=2))


def cmd_samples(args) -> None:
    """A grid of images, one row per class (of --classes, default all), --per-class a row, each
    row's seeds running from --seed; the class names written at the left."""
    from PIL import Image, ImageDraw

    from engine.generation import generate, tokens_to_image

    check_count("per class", args.per_class)
    model = _load_model(args)
    wanted = [c for c in args.classes.split(",") if c.strip()] if args.classes else range(len(model.class_names))
    class_ids = [model.class_id(c) for c in wanted]
    rows = [[tokens_to_image(model, generate(model, args.method, dataclasses.replace(sampling_config(args), seed=seed),
                                             class_id, method_options(args)).tokens)
             for seed in range(args.seed, args.seed + args.per_class)] for class_id in class_ids]
    size, label = rows[0][0].width, 110
    grid = Image.new("RGB", (label + args.per_class * size, len(class_ids) * size), "white")
    draw = ImageDraw.Draw(grid)
    for row, (class_id, images) in enumerate(zip(class_ids, rows)):
        draw.text((6, row * size + size // 2 - 6), model.class_names[class_id], fill="black")
        for col, image in enumerate(images):
            grid.paste(image, (label + col * size, row * size))
    grid.save(args.out)
    print(f"{len(class_ids)} classes x {args.per_class} images ({args.method}) -> {args.out}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="LANTERN Explorer engine")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate one image")
    gen.add_argument("--class-id", default="0", help="class index or name")
    gen.add_argument("--method", default="vanilla", help=f"one of: {', '.join(METHODS)}")
    gen.add_argument("--out", default="image.png")
    gen.add_argument("--tokens-out", default=None)
    add_decoding_arguments(gen, temperature=1.0)
    gen.set_defaults(run=cmd_generate)
    samples = sub.add_parser("samples", help="a grid of images, one row per class")
    samples.add_argument("--per-class", type=int, default=8)
    samples.add_argument("--classes", default="", help="comma-separated class indices or names (default: all)")
    samples.add_argument("--method", default="vanilla", help=f"one of: {', '.join(METHODS)}")
    samples.add_argument("--out", default="samples.png")
    add_decoding_arguments(samples, temperature=1.0)
    samples.set_defaults(run=cmd_samples)
    bench = sub.add_parser("bench", help="compare methods over many images")
    bench.add_argument("--methods", default="vanilla", help="comma-separated method names")
    bench.add_argument("--n-images", type=int, default=16)
    bench.add_argument("--repeats", type=int, default=3,
                       help="run the whole interleaved benchmark this many times; speed-up is the "
                            "median over repeats, shown with the lowest and highest")
    bench.add_argument("--json", default=None, help="write results here")
    bench.add_argument("--sweep", action="store_true", help="run LANTERN over a delta x k grid")
    bench.add_argument("--sweep-method", default="lantern", choices=methods_taking("delta", "k"),
                       help="the method the sweep runs (both take delta and k)")
    bench.add_argument("--deltas", default="0.05,0.1,0.2,0.4", help="sweep grid for delta")
    bench.add_argument("--ks", default="16,64,256,512", help="sweep grid for k")
    add_decoding_arguments(bench, temperature=1.0)
    bench.set_defaults(run=cmd_bench)
    sizing = sub.add_parser("chain-cost", help="how deep a method's static chain should be on this machine")
    sizing.add_argument("--method", default="lantern_static", help="a method that drafts a static tree")
    sizing.add_argument("--depths", default="1,2,4,8,12,16", help="chain depths to run")
    sizing.add_argument("--n-images", type=int, default=8)
    sizing.add_argument("--json", default=None, help="write the costs and the model here")
    add_decoding_arguments(sizing, temperature=1.0)
    sizing.set_defaults(run=cmd_chain_cost)
    frontier = sub.add_parser("frontier", help="speed-up against quality for the relaxed rules, each along its knob")
    frontier.add_argument("--n-images", type=int, default=128, help="images a point")
    frontier.add_argument("--series", default="", help="semicolon-separated series labels (default: every one "
                                                       "that suits the mode)")
    frontier.add_argument("--speed-images", type=int, default=32,
                          help="images a point whose time is compared with vanilla's, interleaved (at most --n-images)")
    frontier.add_argument("--json", default=None, help="write the frontier here (default frontier.json)")
    frontier.add_argument("--add-to", default=None,
                          help="a frontier file of the same images: add these series to it (or replace them there)")
    add_decoding_arguments(frontier, temperature=1.0)
    frontier.set_defaults(run=cmd_frontier)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (InvalidInput, WeightsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
