"""The page's inputs and racing panels. Each control is keyed by the CompareRequest field it sets (a
panel's method by its API name, method_1 ...) and starts at that field's default, which is also the
API's default; app.page.ui wires them to the `compare` endpoint by those names."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.backend import imagenet
from app.backend.request import K_SLIDER_MAX, METHOD_PARAMETERS, PANELS, CompareRequest
from app.backend.runtime import MODEL_CHOICES
from app.page.checked import Number, Radio, Slider, named
from app.views import text
from app.views.render import DISPLAY
from engine.core.config import (
    CFG_SCALE_RANGE,
    TEMPERATURE_RANGE,
    TREE_DEPTH_RANGE,
    TREE_SCORES,
    TREE_TOKENS_RANGE,
    TREE_TOP_K_RANGE,
)
from engine.data.dataset import CLASS_NAMES
from engine.drafters.jacobi import INITS
from engine.drafters.static_tree import EXACT_CHAIN, RELAXED_CHAIN
from engine.loading.embedded import VQ as EMBEDDED_VQ
from engine.loading.hub import WEIGHTS_DIR_VARIABLE
from engine.methods import METHODS, OPTION_RANGES, for_mode, methods_taking
from engine.rules.lantern import VARIANTS


def option_range(name: str) -> tuple[float, float]:
    """A method option's allowed range, as engine.methods checks it."""
    _, low, high = OPTION_RANGES[name]
    return low, high


DEFAULTS = CompareRequest()
LOADING = "Loading the model and a first comparison…"  # what a panel says before the page's load event


def _used_by(option: str) -> str:
    """The methods that read a MethodOptions field, named on its control, so that labels follow the
    registry."""
    return ", ".join(METHODS[name].title for name in methods_taking(option))


# The name each checked control's refusals use: the engine's name for the same value.
REFUSAL_NAMES = {"seed": "seed", "temperature": "temperature", "cfg_scale": "CFG scale", "top_k": "top-k",
                 "k": "k", "lantern_variant": "LANTERN variant", "tree_depth": "tree depth",
                 "tree_top_k": "tree top-k", "tree_total": "tree total tokens", "tree_score": "tree score",
                 "tree_min_score": "tree min score",
                 **{option: label for option, (label, _, _) in OPTION_RANGES.items()}}


def race_controls() -> dict[str, gr.components.Component]:
    """What people change most, on one line with Run above the panels: the class (or prompt), the
    seed and the temperature."""
    c = {"class_name": gr.Dropdown(list(CLASS_NAMES), value=DEFAULTS.class_name, label="Class", scale=2,
                                   allow_custom_value=True, elem_id="class-choice",
                                   info=imagenet.help_text(imagenet_classes=False)),
         "prompt": gr.Textbox(value=DEFAULTS.prompt, label="Prompt", visible=False, elem_id="prompt", scale=2,
                              placeholder="a photo of an astronaut riding a horse"),
         "seed": Number(value=DEFAULTS.seed, precision=0, label="Seed", minimum=0, scale=1, min_width=90),
         "temperature": Slider(*TEMPERATURE_RANGE, value=DEFAULTS.temperature, step=0.05, scale=2,
                               label="Temperature (0 = greedy)")}
    return _named(c)


def method_controls() -> dict[str, gr.components.Component]:
    """The methods' settings and the model, LANTERN's first, the rarely changed ones folded."""
    c = {"delta": Slider(*option_range("delta"), value=DEFAULTS.delta, step=0.01, label="delta", elem_id="delta-slider",
                         info=f"LANTERN's budget: target mass it may move onto a draft ({_used_by('delta')})"),
         "k": Slider(1, min(EMBEDDED_VQ.codebook_size - 1, K_SLIDER_MAX), value=DEFAULTS.k, step=1, label="k",
                     elem_id="k-slider",
                     info=f"how many latent neighbours may lend their mass ({_used_by('k')})"),
         "lantern_variant": Radio(list(VARIANTS), value=DEFAULTS.lantern_variant, label="LANTERN variant",
                                  elem_id="lantern-variant",
                                  info=f"LANTERN's released code or the paper's rule ({_used_by('lantern_variant')})"),
         "cfg_scale": Slider(*CFG_SCALE_RANGE, value=DEFAULTS.cfg_scale, step=0.25, label="CFG scale"),
         "top_k": Slider(0, EMBEDDED_VQ.codebook_size, value=DEFAULTS.top_k, step=1, label="Top-k (0 = all codes)"),
         "model": gr.Dropdown(list(MODEL_CHOICES), value=DEFAULTS.model, label="Model", elem_id="model-choice",
                              allow_custom_value=True,
                              info=f"official LlamaGen files: {WEIGHTS_DIR_VARIABLE} or the Hugging Face Hub")}
    # The rarely changed settings of particular methods, folded together under one heading, one
    # column per group of settings: where the page is wide, CSS spreads the open accordion under the
    # whole top row, so that the groups stand side by side instead of in one tall narrow column; where
    # it is narrow, the columns wrap one under another (below this width each).
    group_width = 240
    with gr.Accordion("More settings", open=False, elem_id="more-settings"), gr.Row():
        with gr.Column(min_width=group_width):
            gr.Markdown(f"**Draft tree** ({_used_by('tree')})")
            c["tree_depth"] = Slider(*TREE_DEPTH_RANGE, value=DEFAULTS.tree_depth, step=1, label="Depth")
            c["tree_top_k"] = Slider(*TREE_TOP_K_RANGE, value=DEFAULTS.tree_top_k, step=1,
                                     label="Children per node (top-k)")
            c["tree_total"] = Slider(*TREE_TOKENS_RANGE, value=DEFAULTS.tree_total, step=1,
                                     label="Total tokens in the tree")
            c["tree_score"] = Radio(list(TREE_SCORES), value=DEFAULTS.tree_score, label="Rank nodes by",
                                    info="rule: the rule's chance of reaching and accepting a node; "
                                         "draft: the draft probability, as EAGLE-2")
            c["tree_min_score"] = Slider(0.0, 0.95, value=DEFAULTS.tree_min_score, step=0.05,
                                         label="Expand nodes scoring at least",
                                         info="0 drafts every level; higher spares drafter calls")
        with gr.Column(min_width=group_width):
            gr.Markdown("**LANTERN++: lambda and the static tree**")
            c["lantern_lambda"] = Slider(*option_range("lantern_lambda"), value=DEFAULTS.lantern_lambda, step=0.1,
                                         label="lambda", elem_id="lambda-slider",
                                         info="a draft x may borrow up to (lambda - 1) p(x) from its neighbours")
            c["static_tree"] = gr.Textbox(value=DEFAULTS.static_tree, label="Static tree", elem_id="static-tree",
                                          placeholder=f"each method's own chain: {len(RELAXED_CHAIN)} deep for "
                                                      f"LANTERN's rules, {len(EXACT_CHAIN)} for EAGLE",
                                          info="paths of draft ranks, levels joined by dots: 0.1 is the second-best "
                                               f"child of the best ({_used_by('static_tree')})")
        with gr.Column(min_width=group_width):
            gr.Markdown(f"**COOL-SD** ({_used_by('cool_w')})")
            c["cool_w"] = Slider(*option_range("cool_w"), value=DEFAULTS.cool_w, step=0.1, label="w",
                                 elem_id="cool-w-slider",
                                 info="mean weight in min(1, w p(x) / q(x)), largest at the first depth; 1 = exact")
            c["draft_top_p"] = Slider(*option_range("draft_top_p"), value=DEFAULTS.draft_top_p, step=0.01,
                                      label="Draft top-p", elem_id="draft-top-p-slider",
                                      info="sampled drafts come from the drafter's top-p nucleus "
                                           f"({_used_by('draft_top_p')})")
        with gr.Column(min_width=group_width):
            gr.Markdown(f"**Jacobi methods** ({_used_by('sjd_init')})")
            c["sjd_init"] = gr.Dropdown(list(INITS), value=DEFAULTS.sjd_init, label="Initialisation",
                                        allow_custom_value=True,
                                        elem_id="sjd-init", info="the first guess at a position: random, or a copy of "
                                                                 "the code to its left or above")
            c["gsd_window"] = Number(value=DEFAULTS.gsd_window, precision=0, label="GSD rank window",
                                     elem_id="gsd-window",
                                     info="ranks either side of x; empty: the published 7 scaled to the codebook")
            c["gsd_p_gap"] = Slider(*option_range("gsd_p_gap"), value=DEFAULTS.gsd_p_gap, step=0.01,
                                    label="GSD p gap", info="largest |p(y) - p(x)| within a group")
            c["gsd_distance"] = Slider(*option_range("gsd_distance"), value=DEFAULTS.gsd_distance, step=0.05,
                                       label="GSD distance",
                                       info="squared embedding distance, a fraction of the mean one")
        with gr.Column(min_width=group_width):
            gr.Markdown(f"**Rows in parallel** ({_used_by('row_window')})")
            c["row_window"] = Slider(*option_range("row_window"), value=DEFAULTS.row_window, step=1,
                                     label="Row window", elem_id="row-window-slider",
                                     info="a row decides column c once the row above has decided c + this many; "
                                          "the grid's width or more: one row at a time")
            c["rows_in_flight"] = Slider(*option_range("rows_in_flight"), value=DEFAULTS.rows_in_flight, step=1,
                                         label="Rows in flight", elem_id="rows-in-flight-slider",
                                         info="most rows under way at once; the grid's height or more: no cap")
    return _named(c)


def _named(controls: dict) -> dict:
    """The controls, each checked one with the name its refusals use."""
    for key, control in controls.items():
        if key in REFUSAL_NAMES:
            temperature = ("0 (greedy)", f"{TEMPERATURE_RANGE[1]:g}") if key == "temperature" else None
            named(control, REFUSAL_NAMES[key], temperature)
    return controls


@dataclass
class Panels:
    """The racing panels' components, one of each per panel."""

    methods: list[gr.Dropdown]
    images: list[gr.Image]
    maps: list[gr.Image]
    counters: list[gr.HTML]

    def method_inputs(self) -> dict[str, gr.Dropdown]:
        return dict(zip(METHOD_PARAMETERS, self.methods))


def racing_panels() -> Panels:
    choices = [(method.title, name) for name, method in METHODS.items()]
    panels = Panels([], [], [], [])
    # The menus have a row of their own, above the panels' columns: on a phone, where the panels stay
    # side by side and narrow, the menus stack at full width so that every method's name shows whole.
    with gr.Row(elem_id="panel-methods"):
        for index in range(PANELS):
            with gr.Column(min_width=220):
                shown = for_mode(DEFAULTS.methods[index], DEFAULTS.sampling().greedy)  # what runs
                panels.methods.append(gr.Dropdown(choices, value=shown, allow_custom_value=True,
                                                  label=f"Panel {index + 1} method", elem_id=f"method-{index}"))
    with gr.Row(equal_height=False, elem_id="panels"):
        for index in range(PANELS):
            with gr.Column(min_width=220):
                # Labels would float over the pictures: the legend under the panels names them. The
                # counters, whose descriptions differ in length, come last so that the maps line up.
                panels.images.append(gr.Image(label=f"Panel {index + 1} image", show_label=False, type="numpy",
                                              format="png", interactive=False, height=DISPLAY,
                                              elem_classes="panel-image", elem_id=f"image-{index}",
                                              buttons=["download"]))
                panels.maps.append(gr.Image(label=f"Panel {index + 1} acceptance map", show_label=False, type="numpy",
                                            format="png",
                                            interactive=False, height=DISPLAY, elem_classes="map-image",
                                            elem_id=f"map-{index}", buttons=[]))
                panels.counters.append(gr.HTML(text.waiting_html(LOADING), elem_id=f"stats-{index}",
                                               label=f"Panel {index + 1} counters"))
    return panels
