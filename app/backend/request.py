"""The inputs of one comparison, with the page's defaults, checked into engine configurations.

The fields are, in order, the `compare` API endpoint's parameters (`methods` as one parameter per
panel) and the names of the page's controls (app.page.controls), so a new input is a field here, its
mapping in `options()` or `sampling()`, and its control; the endpoint and the wiring follow.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, fields

from engine.core.config import InvalidInput, SamplingConfig, TreeConfig
from engine.drafters.static_tree import parse_choices
from engine.methods import METHODS, MethodOptions, for_mode, get_method

# Vanilla, the lossless EAGLE-2 and LANTERN: the comparison the explorer is named for, which the delta,
# k and variant controls act on. The defaults name what runs at the default temperature, which samples:
# LANTERN's static chain (Method.when_sampling), as the page's menus and the API's echo do.
LANTERN_PANEL = "lantern"  # the explorer's LANTERN: EAGLE-2's dynamic tree, its static chain when sampling
DEFAULT_METHODS = ("vanilla", "eagle2", for_mode(LANTERN_PANEL, SamplingConfig().greedy))  # what runs
# COOL-SD, the relaxation that keeps vanilla's pictures, is one click away (app.page.ui's swap button): it
# starts on the fastest setting of the shipped sampling frontier (assets/sweeps/frontier_sampling.json)
# whose class accuracy, fid_proxy and low-p share stay inside vanilla's 95 % intervals. RELAXED_DEFAULTS
# are that point's options (a test holds them to the file).
ALTERNATIVE_RELAXED = "cool_sd"
RELAXED_DEFAULTS = {"cool_w": 4.0, "draft_top_p": 0.8}
PANELS = len(DEFAULT_METHODS)
METHOD_PARAMETERS = tuple(f"method_{index + 1}" for index in range(PANELS))  # the API's names for `methods`
DEFAULT_CLASS = "smiley"
K_SLIDER_MAX = 2048  # the k slider's top: the paper's k is 1,000 of 16,384 codes; more is never useful
DEFAULT_MODEL = "embedded"


@dataclass(frozen=True)
class CompareRequest:
    class_name: str = DEFAULT_CLASS
    seed: int = SamplingConfig.seed
    # Sampling: greedy decoding draws the same flat picture for every seed of a class on the embedded
    # model, while sampled images show the class (docs/benchmarks.md).
    temperature: float = SamplingConfig.temperature
    cfg_scale: float = SamplingConfig.cfg_scale
    top_k: int = SamplingConfig.top_k
    delta: float = MethodOptions.delta
    k: int = MethodOptions.k
    tree_depth: int = TreeConfig.depth
    tree_top_k: int = TreeConfig.top_k
    tree_total: int = TreeConfig.total_tokens
    methods: tuple[str, ...] = DEFAULT_METHODS
    model: str = DEFAULT_MODEL
    prompt: str = ""  # the caption, for text-to-image models
    # Fields after this line were added after the API was published: new ones go at the end, so that
    # callers passing values by position keep working.
    lantern_variant: str = MethodOptions.lantern_variant
    lantern_lambda: float = MethodOptions.lantern_lambda
    static_tree: str = ""  # rank paths, as engine.drafters.static_tree.parse_choices reads; empty: each method's own
    sjd_init: str = MethodOptions.sjd_init
    gsd_window: int | None = MethodOptions.gsd_window  # None: the published window scaled to the codebook
    gsd_p_gap: float = MethodOptions.gsd_p_gap
    gsd_distance: float = MethodOptions.gsd_distance
    tree_score: str = TreeConfig.score  # rule: the rule's acceptance estimate; draft: EAGLE-2's q
    tree_min_score: float = TreeConfig.min_score
    cool_w: float = RELAXED_DEFAULTS["cool_w"]
    draft_top_p: float = RELAXED_DEFAULTS["draft_top_p"]
    row_window: int = MethodOptions.row_window
    rows_in_flight: int = MethodOptions.rows_in_flight

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=_number("temperature", self.temperature),
                              top_k=_whole("top-k", self.top_k),
                              cfg_scale=_number("CFG scale", self.cfg_scale),
                              seed=_whole("seed", self.seed))

    def options(self) -> MethodOptions:
        tree = TreeConfig(depth=_whole("tree depth", self.tree_depth),
                          top_k=_whole("tree top-k", self.tree_top_k),
                          total_tokens=_whole("tree total tokens", self.tree_total),
                          score=str(self.tree_score), min_score=_number("tree min score", self.tree_min_score))
        # An emptied number box arrives as None (or ""): GSD's scaled default.
        window = None if self.gsd_window in (None, "") else _whole("GSD window", self.gsd_window)
        return MethodOptions(delta=_number("delta", self.delta), k=_whole("k", self.k), tree=tree,
                             lantern_variant=self.lantern_variant,
                             lantern_lambda=_number("lambda", self.lantern_lambda),
                             cool_w=_number("COOL-SD w", self.cool_w),
                             draft_top_p=_number("draft top-p", self.draft_top_p),
                             static_tree=_static_tree(self.static_tree), sjd_init=self.sjd_init,
                             gsd_window=window, gsd_p_gap=_number("GSD p gap", self.gsd_p_gap),
                             gsd_distance=_number("GSD distance", self.gsd_distance),
                             row_window=_whole("row window", self.row_window),
                             rows_in_flight=_whole("rows in flight", self.rows_in_flight))

    def checked_methods(self) -> list[str]:
        if not self.methods:
            raise InvalidInput("no method chosen; allowed: " + ", ".join(METHODS))
        return [get_method(name).name for name in self.methods]

    def panel_methods(self) -> list[str]:
        """The methods the panels run: the chosen ones, each swapped for the method it names for
        sampling when the temperature is above 0 (LANTERN's static tree for its dynamic one)."""
        greedy = self.sampling().greedy
        return [for_mode(name, greedy) for name in self.checked_methods()]

    @classmethod
    def from_api(cls, **values) -> CompareRequest:
        """A request from the endpoint's parameters (see api_parameters)."""
        methods = tuple(values.pop(name, default) for name, default in zip(METHOD_PARAMETERS, DEFAULT_METHODS))
        return cls(**values, methods=methods)


def api_parameters() -> list[inspect.Parameter]:
    """The `compare` endpoint's parameters, each with the page's default: the request's fields in
    order, with `methods` spelled as one parameter per panel."""
    parameters = []
    for item in fields(CompareRequest):
        if item.name == "methods":
            parameters += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
                           for name, default in zip(METHOD_PARAMETERS, DEFAULT_METHODS)]
        else:
            parameters.append(inspect.Parameter(item.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=item.default))
    return parameters


def _number(name: str, value) -> float:
    """A finite float from whatever the API sent; anything else names the value."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{name} {value!r} is not a finite number")
    return number


def _whole(name: str, value) -> int:
    number = _number(name, value)
    if number != int(number):
        raise InvalidInput(f"{name} {value!r} is not a whole number")
    return int(number)


def _static_tree(text: str | None):
    """The static tree's rank paths, or None (each method's own chain) for an empty box."""
    text = str(text or "").strip()
    return parse_choices(text) if text else None
