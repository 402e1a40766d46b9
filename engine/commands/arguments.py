"""What the command line takes: the model and decoding arguments its commands share, and the
configurations they make (every value is checked where the configuration is built)."""
from __future__ import annotations

import argparse
from pathlib import Path

from engine.core.config import CFG_SCALE_RANGE, TEMPERATURE_RANGE, TREE_SCORES, SamplingConfig, TreeConfig
from engine.drafters.jacobi import INITS
from engine.drafters.static_tree import EXACT_CHAIN, RELAXED_CHAIN, parse_choices
from engine.loading.load import DTYPES
from engine.methods import MethodOptions
from engine.rules.lantern import VARIANTS


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="embedded",
                        help="embedded, or an official LlamaGen model such as c2i_B_256 (docs/official.md: "
                             "official LlamaGen models)")
    parser.add_argument("--weights-dir", type=Path, default=None,
                        help="folder with the official files under their Hub names (default: the folder "
                             "LANTERN_WEIGHTS_DIR names, else the Hugging Face Hub)")
    parser.add_argument("--prompt", default=None, help="the caption, for text-to-image models")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, or auto (cuda when present)")
    parser.add_argument("--dtype", default="auto", choices=("auto", *DTYPES),
                        help="GPT and drafter precision; auto: bfloat16 on CUDA, float32 on CPU (where a sampling "
                             "decode multiplies its large products in bfloat16 if the CPU does so natively); "
                             "bfloat16-matmul: float32 with every matrix product in bfloat16 (row-exact attention "
                             "when greedy, so that speculative decoding keeps vanilla's tokens): wide rows cost "
                             "less on CPUs with native bfloat16, a greedy one-token step more")


def add_decoding_arguments(parser: argparse.ArgumentParser, temperature: float) -> None:
    add_model_arguments(parser)
    parser.add_argument("--temperature", type=float, default=temperature,
                        help=f"0 = greedy, up to {TEMPERATURE_RANGE[1]:g}")
    parser.add_argument("--cfg", type=float, default=SamplingConfig.cfg_scale,
                        help=f"classifier-free guidance scale, {CFG_SCALE_RANGE[0]:g} (off) to {CFG_SCALE_RANGE[1]:g}")
    parser.add_argument("--top-k", type=int, default=SamplingConfig.top_k, help="0 = off")
    parser.add_argument("--top-p", type=float, default=SamplingConfig.top_p)
    parser.add_argument("--seed", type=int, default=SamplingConfig.seed)
    parser.add_argument("--delta", type=float, default=MethodOptions.delta, help="LANTERN's TV budget")
    parser.add_argument("--k", type=int, default=MethodOptions.k, help="LANTERN's neighbour count")
    parser.add_argument("--neighbours", default=MethodOptions.neighbours, help="l2, cosine or random")
    parser.add_argument("--lantern-variant", default=MethodOptions.lantern_variant, choices=VARIANTS,
                        help="official: LANTERN's code; paper: the relaxed distribution with A removed")
    parser.add_argument("--lantern-lambda", type=float, default=MethodOptions.lantern_lambda,
                        help="LANTERN++: credited mass at most (lambda - 1) p(x)")
    parser.add_argument("--cool-w", type=float, default=MethodOptions.cool_w,
                        help="COOL-SD: mean of the annealed weights w in min(1, w p(x) / q(x)); 1 = exact")
    parser.add_argument("--draft-top-p", type=float, default=MethodOptions.draft_top_p,
                        help="relaxed rules on a static chain: sample drafts from q's top-p nucleus (1 = all)")
    parser.add_argument("--static-tree", default=None,
                        help="the static tree (eagle, lantern_static, lantern_pp): rank paths, e.g. "
                             f"'0 1 0.0 0.1 0.0.0'; default: a chain, {len(RELAXED_CHAIN)} deep for LANTERN's "
                             f"rules, {len(EXACT_CHAIN)} for EAGLE")
    parser.add_argument("--sjd-init", default=MethodOptions.sjd_init, choices=INITS,
                        help="how Jacobi methods start unseen positions")
    parser.add_argument("--gsd-window", type=int, default=None,
                        help="GSD's rank half-window (default: the published 7 scaled to the codebook)")
    parser.add_argument("--gsd-p-gap", type=float, default=MethodOptions.gsd_p_gap)
    parser.add_argument("--gsd-distance", type=float, default=MethodOptions.gsd_distance,
                        help="GSD's squared embedding distance, a fraction of the mean one")
    parser.add_argument("--row-window", type=int, default=MethodOptions.row_window,
                        help="ZipAR, PJD: a row decides column c once the row above has decided c + this many")
    parser.add_argument("--rows-in-flight", type=int, default=MethodOptions.rows_in_flight,
                        help="ZipAR, PJD: most rows under way at once")
    parser.add_argument("--tree-depth", type=int, default=TreeConfig.depth)
    parser.add_argument("--tree-top-k", type=int, default=TreeConfig.top_k)
    parser.add_argument("--tree-tokens", type=int, default=TreeConfig.total_tokens)
    parser.add_argument("--tree-min-score", type=float, default=TreeConfig.min_score,
                        help="dynamic tree: leave nodes below this score unexpanded")
    parser.add_argument("--tree-score", choices=TREE_SCORES, default=TreeConfig.score,
                        help="what ranks dynamic-tree nodes: the rule's acceptance estimate, or the "
                             "draft probability (EAGLE-2's and LANTERN's official code)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")


def sampling_config(args) -> SamplingConfig:
    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, cfg_scale=args.cfg,
                          seed=args.seed)


def method_options(args) -> MethodOptions:
    return MethodOptions(delta=args.delta, k=args.k, neighbours=args.neighbours,
                         tree=TreeConfig(args.tree_depth, args.tree_top_k, args.tree_tokens, args.tree_score,
                                         args.tree_min_score),
                         lantern_variant=args.lantern_variant, lantern_lambda=args.lantern_lambda,
                         cool_w=args.cool_w, draft_top_p=args.draft_top_p,
                         static_tree=None if args.static_tree is None else parse_choices(args.static_tree),
                         sjd_init=args.sjd_init, row_window=args.row_window, rows_in_flight=args.rows_in_flight,
                         gsd_window=args.gsd_window, gsd_p_gap=args.gsd_p_gap, gsd_distance=args.gsd_distance)
