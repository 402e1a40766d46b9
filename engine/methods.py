"""The method registry: each decoding method is a drafter and an acceptance rule, nothing more.

This is the only place that knows methods by name.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.core.config import InvalidInput, SamplingConfig, TreeConfig
from engine.drafters.base import Drafter
from engine.drafters.eagle import EagleDrafter
from engine.drafters.jacobi import INITS, JacobiDrafter
from engine.drafters.medusa import MedusaDrafter
from engine.drafters.rows import RowDrafter
from engine.drafters.sps import SpsDrafter
from engine.drafters.static_tree import (
    ANNEALED_CHAIN,
    EXACT_CHAIN,
    RELAXED_CHAIN,
    Choices,
    StaticTreeDrafter,
    check_choices,
)
from engine.loading.image_model import ImageModel
from engine.rules.acceptance import BoundRule, ExactRule, Rule, TypicalRule
from engine.rules.cool_sd import AnnealedRule
from engine.rules.gsd import GroupedRule, scaled_window
from engine.rules.lantern import VARIANTS, DeltaBound, RatioBound, lantern_rule
from engine.rules.neighbours import METRICS

# The allowed range of each numeric option with a fixed one (k's depends on the codebook): the checks
# below and the page's controls read these, with the name a refusal gives the option.
OPTION_RANGES: dict[str, tuple[str, float, float]] = {
    "delta": ("delta", 0.0, 1.0),
    "lantern_lambda": ("lambda", 1.0, 100.0),
    "cool_w": ("COOL-SD w", 1.0, 20.0),
    "draft_top_p": ("draft top-p", 0.01, 1.0),
    "gamma": ("gamma", 1, 16),
    "window": ("window", 1, 64),
    "gsd_window": ("GSD window", 0, 4096),
    "gsd_p_gap": ("GSD p gap", 0.0, 1.0),
    "gsd_distance": ("GSD distance", 0.0, 10.0),
    # Past the grid's side both row knobs change nothing (engine/drafters/wavefront.py); 64 is the largest
    # grid a LlamaGen tokenizer gives (1,024 pixels at 16 per token).
    "row_window": ("row window", 1, 64),
    "rows_in_flight": ("rows in flight", 1, 64),
}


@dataclass(frozen=True)
class MethodOptions:
    delta: float = 0.2  # LANTERN's total-variation budget
    # LANTERN's neighbour count: 256 of the embedded model's 4,096 codes is the paper's share (1,000
    # of 16,384); `python -m engine bench --sweep --ks ...` measures others.
    k: int = 256
    neighbours: str = "l2"  # l2, cosine, or random (the ablation)
    lantern_variant: str = "official"  # official (LANTERN's code) or paper (see engine/rules/lantern.py)
    # LANTERN++'s bound on the credited mass, (lambda - 1) p(x): 5 lets a draft borrow four times its
    # own probability.
    lantern_lambda: float = 5.0
    # COOL-SD's mean relaxation of p(x) / q(x) over the draft's depths (1: the exact rule).
    cool_w: float = 2.0
    # Relaxed rules on a static chain: sampled drafts come from the drafter's top-p nucleus (1: all of q).
    draft_top_p: float = 1.0
    static_tree: Choices | None = None  # paths of draft ranks; None: each method's own chain
    tree: TreeConfig = field(default_factory=TreeConfig)
    gamma: int = 4  # SpS chain length
    window: int = 16  # SJD's Jacobi window (the paper's 16)
    sjd_init: str = "random"  # how SJD starts a position no target pass has seen: random, left, above
    gsd_window: int | None = None  # GSD's rank half-window; None scales the published 7 to the codebook
    gsd_p_gap: float = 0.15  # GSD: largest |p(y) - p(x)| in a group (published)
    gsd_distance: float = 0.25  # GSD: squared embedding distance, a fraction of the mean one
    # Row-parallel decoding: row r + 1 decides column c once row r has decided columns 0 .. c + w - 1.
    # 8 = half the embedded model's row (docs/methods.md, "Rows in parallel").
    row_window: int = 8
    rows_in_flight: int = 64  # most rows under way at once (64: as many as the grid has)

    def __post_init__(self) -> None:
        for field_name, (label, low, high) in OPTION_RANGES.items():
            value = getattr(self, field_name)
            if value is not None and not low <= value <= high:  # gsd_window None: scaled to the codebook
                raise InvalidInput(f"{label} {value} is out of range; allowed: {low:g} to {high:g}")
        if self.k < 1:
            raise InvalidInput(f"k {self.k} is out of range; allowed: 1 to codebook size - 1")
        if self.lantern_variant not in VARIANTS:
            raise InvalidInput(f"unknown LANTERN variant {self.lantern_variant!r}; allowed: {', '.join(VARIANTS)}")
        if self.static_tree is not None:
            check_choices(self.static_tree)
        if self.sjd_init not in INITS:
            raise InvalidInput(f"unknown Jacobi initialisation {self.sjd_init!r}; allowed: {', '.join(INITS)}")
        if self.neighbours not in METRICS:
            raise InvalidInput(f"unknown neighbour metric {self.neighbours!r}; allowed: {', '.join(METRICS)}")


@dataclass(frozen=True)
class Method:
    name: str
    title: str
    lossless: bool  # output distribution equals the target's (greedy output equals vanilla's)
    make: Callable[[ImageModel, MethodOptions, torch.nn.Module | None], tuple[Drafter, Rule]]
    drafter: str | None = None  # the trained drafter it needs (a key of ImageModel.drafters)
    params: tuple[str, ...] = ()  # the MethodOptions fields it reads
    # The method a panel set to this one runs when sampling, where this one's drafts do not suit it.
    when_sampling: str | None = None
    summary: str = ""  # what it does, in a sentence or two: the page shows it on the method's panel

    def runs_on(self, model: ImageModel) -> bool:
        return self.drafter is None or self.drafter in model.drafters

    def build(self, model: ImageModel, options: MethodOptions) -> tuple[Drafter, Rule]:
        net = model.drafter_net(self.drafter, self.name) if self.drafter else None
        return self.make(model, options, net)


def _neighbour_table(model: ImageModel, options: MethodOptions):
    vocab = model.target.cfg.vocab_size
    if options.k > vocab - 1:
        raise InvalidInput(f"k {options.k} is out of range; allowed: 1 to {vocab - 1} (codebook size - 1)")
    # The official variant zeroes the k + 1 nearest codes on a rejection: one column more.
    return model.neighbours(min(options.k + 1, vocab - 1), options.neighbours)


def _lantern_rule(model: ImageModel, options: MethodOptions) -> Rule:
    return lantern_rule(_neighbour_table(model, options), DeltaBound(options.delta), options.lantern_variant, options.k)


def _lantern_pp_rule(model: ImageModel, options: MethodOptions) -> Rule:
    bound = RatioBound(options.lantern_lambda)
    return lantern_rule(_neighbour_table(model, options), bound, options.lantern_variant, options.k)


def _jacobi(options: MethodOptions, coupled: bool = False, fresh_point_mass: bool = False) -> JacobiDrafter:
    return JacobiDrafter(options.window, options.sjd_init, coupled, fresh_point_mass)


def _vanilla(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return Drafter(), ExactRule()


def _eagle2(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return EagleDrafter(net, options.tree), ExactRule()


def _lantern(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return EagleDrafter(net, options.tree), _lantern_rule(model, options)


def _relaxed_chain(net, options: MethodOptions, default) -> StaticTreeDrafter:
    """The static tree of a relaxed rule: the one asked for, else the rule's own chain, its drafts
    sampled from the drafter's top-p nucleus."""
    return StaticTreeDrafter(net, options.static_tree or default, options.draft_top_p)


def _lantern_static(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _relaxed_chain(net, options, RELAXED_CHAIN), _lantern_rule(model, options)


def _sps(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return SpsDrafter(net, options.gamma), ExactRule()


def _medusa(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return MedusaDrafter(net), TypicalRule()


def _lantern_pp(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _relaxed_chain(net, options, RELAXED_CHAIN), _lantern_pp_rule(model, options)


def _cool_sd(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    drafter = _relaxed_chain(net, options, ANNEALED_CHAIN)
    return drafter, AnnealedRule(options.cool_w, drafter.depth)


def _eagle(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return StaticTreeDrafter(net, options.static_tree or EXACT_CHAIN), ExactRule()


def _sjd(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _jacobi(options), ExactRule()


def _sjd_coupled(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _jacobi(options, coupled=True), ExactRule()


def _relaxed_sjd(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _jacobi(options), _lantern_rule(model, options)


def _gsd(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    embeddings = model.target.tok_embeddings.weight.detach().float().cpu().numpy()  # (V, D)
    window = scaled_window(len(embeddings)) if options.gsd_window is None else options.gsd_window
    rule = GroupedRule(embeddings, window, options.gsd_p_gap, options.gsd_distance)
    # GSD's code counts a fresh random draft as a point mass: a uniform q would credit any group.
    return _jacobi(options, fresh_point_mass=True), rule


def _rows(options: MethodOptions, make_lane_drafter) -> RowDrafter:
    return RowDrafter(make_lane_drafter, options.row_window, options.rows_in_flight)


def _zipar(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _rows(options, Drafter), ExactRule()


def _pjd(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _rows(options, lambda: _jacobi(options)), ExactRule()


def _rows_eagle(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _rows(options, lambda: StaticTreeDrafter(net, options.static_tree or EXACT_CHAIN)), ExactRule()


def _rows_lantern(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    return _rows(options, lambda: _relaxed_chain(net, options, RELAXED_CHAIN)), _lantern_rule(model, options)


def _rows_cool_sd(model: ImageModel, options: MethodOptions, net) -> tuple[Drafter, Rule]:
    def make_lane_drafter() -> StaticTreeDrafter:
        return _relaxed_chain(net, options, ANNEALED_CHAIN)

    return _rows(options, make_lane_drafter), AnnealedRule(options.cool_w, make_lane_drafter().depth)


LANTERN_PARAMS = ("k", "neighbours", "lantern_variant")
ROW_PARAMS = ("row_window", "rows_in_flight")
JACOBI_PARAMS = ("window", "sjd_init")

METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method("vanilla", "Vanilla", True, _vanilla,
               summary="One target pass per token: the baseline every speed-up is measured against."),
        Method("eagle", "EAGLE", True, _eagle, "eagle", ("static_tree",),
               summary=f"The EAGLE drafter drafts a fixed tree (by default a chain of {len(EXACT_CHAIN)}); the exact "
                       "rule keeps a draft with probability min(1, p(x) / q(x)), so the output is the target's."),
        Method("eagle2", "EAGLE-2", True, _eagle2, "eagle", ("tree",),
               summary="The EAGLE drafter grows a dynamic tree of its most likely tokens, ranked as it goes; "
                       "the exact rule judges it, so the output is the target's."),
        # The dynamic tree drafts each node's most likely tokens, which a sampled target keeps only with
        # p~(x); the static tree samples its drafts, which LANTERN's credit lifts to near-certain acceptance.
        Method("lantern", "LANTERN", False, _lantern, "eagle", ("delta", *LANTERN_PARAMS, "tree"),
               when_sampling="lantern_static",
               summary="EAGLE-2's dynamic tree under LANTERN's rule: a draft also earns the target probability "
                       "of its nearest codes, within delta. When sampling, the panel runs LANTERN (static "
                       "tree) instead, whose sampled drafts suit the rule."),
        Method("lantern_static", "LANTERN (static tree)", False, _lantern_static, "eagle",
               ("delta", *LANTERN_PARAMS, "static_tree", "draft_top_p"),
               summary=f"LANTERN's rule on a fixed chain of {len(RELAXED_CHAIN)} drafts, sampled from the drafter "
                       "when sampling (the official code's static-tree mode)."),
        Method("lantern_pp", "LANTERN++", False, _lantern_pp, "eagle",
               ("lantern_lambda", *LANTERN_PARAMS, "static_tree", "draft_top_p"),
               summary="LANTERN on a static chain with the credit bounded by (lambda - 1) p(x) instead of "
                       "delta: a likely draft may borrow more than an unlikely one."),
        Method("cool_sd", "COOL-SD", False, _cool_sd, "eagle", ("cool_w", "static_tree", "draft_top_p"),
               summary=f"COOL-SD: a static chain of {len(ANNEALED_CHAIN)} drafts (sampled when sampling), each "
                       "accepted with min(1, w p(x) / q(x)), w relaxing early depths most and decaying with depth "
                       "(mean w over the chain): the target's own belief in x is scaled, so a code it rules out "
                       "is never kept."),
        Method("sps", "SpS", True, _sps, "sps", ("gamma",),
               summary="Standard speculative sampling: a small separate GPT drafts a chain of gamma tokens, "
                       "judged by the exact rule."),
        Method("medusa", "Medusa", False, _medusa, "medusa",
               summary="Extra heads on the target's last feature guess the next tokens at once; a typical-"
                       "acceptance test keeps those the target finds likely enough."),
        Method("sjd", "SJD", True, _sjd, None, JACOBI_PARAMS,
               summary="Speculative Jacobi decoding: no drafter; the target's own guesses from its last pass "
                       "are the next drafts, judged by the exact rule."),
        Method("sjd_coupled", "Coupled SJD", True, _sjd_coupled, None, JACOBI_PARAMS,
               summary="SJD whose redrawn guesses are coupled to the previous ones, so drafts stay put as often "
                       "as possible; still lossless."),
        Method("relaxed_sjd", "Relaxed SJD", False, _relaxed_sjd, None, ("delta", *LANTERN_PARAMS, *JACOBI_PARAMS),
               summary="SJD's Jacobi drafts judged by LANTERN's rule."),
        Method("gsd", "GSD", False, _gsd, None, (*JACOBI_PARAMS, "gsd_window", "gsd_p_gap", "gsd_distance"),
               summary="Grouped speculative decoding: a Jacobi draft is judged together with the codes near it "
                       "in rank, probability and embedding."),
        Method("zipar", "ZipAR", False, _zipar, None, ROW_PARAMS,
               summary="Rows in parallel: a row starts once the row above is a window of tokens ahead, so "
                       "several rows each decide a token in one pass. A token sees what the rows above have "
                       "decided so far, not their ends: a smaller window is faster and strays further."),
        Method("pjd", "PJD", False, _pjd, None, (*JACOBI_PARAMS, *ROW_PARAMS),
               summary="Parallel Jacobi decoding: every row in flight drafts a window of the target's own "
                       "guesses, as SJD does, and all rows are verified in one pass."),
        Method("rows_eagle", "EAGLE, rows in parallel", False, _rows_eagle, "eagle", ("static_tree", *ROW_PARAMS),
               summary=f"ZipAR's rows in flight, each drafting EAGLE's chain of {len(EXACT_CHAIN)}, judged by the "
                       "exact rule: a row's drafts are kept as EAGLE keeps them, its context is ZipAR's."),
        Method("rows_lantern", "LANTERN, rows in parallel", False, _rows_lantern, "eagle",
               ("delta", *LANTERN_PARAMS, "static_tree", "draft_top_p", *ROW_PARAMS),
               summary=f"ZipAR's rows in flight, each drafting LANTERN's chain of {len(RELAXED_CHAIN)} and judged "
                       "by its rule: the tokens a pass keeps, times the rows under way."),
        Method("rows_cool_sd", "COOL-SD, rows in parallel", False, _rows_cool_sd, "eagle",
               ("cool_w", "static_tree", "draft_top_p", *ROW_PARAMS),
               summary=f"ZipAR's rows in flight, each drafting COOL-SD's chain of {len(ANNEALED_CHAIN)} and judged "
                       "by its annealed rule."),
    ]
}


def methods_taking(*params: str) -> list[str]:
    """The methods that read every one of `params`."""
    return [name for name, method in METHODS.items() if set(params) <= set(method.params)]


def for_mode(name: str, greedy: bool) -> str:
    """The method a panel set to `name` runs, greedy or sampling (see Method.when_sampling)."""
    swap = get_method(name).when_sampling
    return swap if swap is not None and not greedy else name


def bound_rule(model: ImageModel, method: str, options: MethodOptions, sampling: SamplingConfig) -> BoundRule:
    """The rule `method` judges with under `options`, bound to `sampling`'s mode as decode binds it:
    what engine.loop.rejudge walks a stored step with."""
    _, rule = get_method(method).build(model, options)  # the drafter wraps its net: cheap, dropped here
    return rule.bind(sampling)


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise InvalidInput(f"unknown method {name!r}; allowed: {', '.join(METHODS)}")
    return METHODS[name]
