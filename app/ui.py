"""The page: controls, three racing panels, per-step acceptance, the latent inspector, the trade-off
and a short lesson, wired to app.handlers. Building the page loads nothing; see app.main."""
from __future__ import annotations

import gradio as gr

from app import handlers, text
from app.handlers import PANELS, gpu
from app.render import DISPLAY
from app.request import DEFAULT_CLASS, DEFAULT_METHODS, DEFAULT_MODEL, CompareRequest
from app.runtime import MODEL_CHOICES, WEIGHTS_DIR_VARIABLE, Runtime
from app.shipped import SWEEP_FILE
from engine.config import TreeConfig
from engine.dataset import CLASS_NAMES
from engine.embedded import ASSETS, VQ as EMBEDDED_VQ
from engine.methods import METHODS, MethodOptions

QUEUE_SIZE = 16  # waiting comparisons beyond this are refused instead of piling up
CSS = """
.panel-image img, .map-image img { image-rendering: pixelated; }
#run-button { min-height: 56px; font-size: 1.25em; }
.legend span { display:inline-block; width:12px; height:12px; border-radius:2px; margin:0 4px -1px 8px; }
"""
INTRO = ("# LANTERN Explorer\nWatch an image autoregressive model paint 256 tokens, once plainly and "
         "twice with speculative decoding, side by side. The panels race on the same class and seed; each "
         "method's clock counts only its own work. Green cells were accepted drafts, amber ones the "
         "target's own draw (a bonus or a correction).")
LEGEND = ('<div class="legend" style="font-size:0.85em">acceptance map:<span style="background:#2ec478">'
          '</span>accepted draft<span style="background:#f5a623"></span>bonus / correction'
          '<span style="background:#2b303b"></span>not yet</div>')


def launch_options() -> dict:
    """Theme and style, which Gradio 6 takes at launch."""
    return {"theme": gr.themes.Soft(primary_hue="amber", secondary_hue="indigo"), "css": CSS}


def _controls() -> dict:
    c = {"model": gr.Dropdown(list(MODEL_CHOICES), value=DEFAULT_MODEL, label="Model", elem_id="model-choice",
                              info=f"official LlamaGen files: {WEIGHTS_DIR_VARIABLE} or the Hugging Face Hub"),
         "prompt": gr.Textbox(value="", label="Prompt", placeholder="a photo of an astronaut riding a horse",
                              visible=False, elem_id="prompt"),
         "class_name": gr.Dropdown(list(CLASS_NAMES), value=DEFAULT_CLASS, label="Class"),
         "seed": gr.Number(value=0, precision=0, label="Seed", minimum=0),
         "temperature": gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="Temperature (0 = greedy)"),
         "cfg_scale": gr.Slider(1.0, 8.0, value=4.0, step=0.25, label="CFG scale"),
         "top_k": gr.Slider(0, 1024, value=0, step=1, label="Top-k (0 = all codes)"),
         "delta": gr.Slider(0.0, 1.0, value=MethodOptions.delta, step=0.01, label="delta", elem_id="delta-slider",
                            info="LANTERN's budget: target mass it may move onto a draft"),
         "k": gr.Slider(1, EMBEDDED_VQ.codebook_size - 1, value=MethodOptions.k, step=1, label="k", elem_id="k-slider",
                        info="how many latent neighbours may lend their mass")}
    with gr.Accordion("Draft tree (EAGLE-2 and LANTERN)", open=False):
        c["tree_depth"] = gr.Slider(1, 8, value=TreeConfig.depth, step=1, label="Depth")
        c["tree_top_k"] = gr.Slider(1, 16, value=TreeConfig.top_k, step=1, label="Children per node (top-k)")
        c["tree_total"] = gr.Slider(2, 64, value=TreeConfig.total_tokens, step=1, label="Total tokens in the tree")
    return c


def _panels() -> tuple[list, list, list, list]:
    choices = [(method.title, name) for name, method in METHODS.items()]
    methods, images, maps, stats = [], [], [], []
    with gr.Row(equal_height=False):
        for index in range(PANELS):
            with gr.Column(min_width=220):
                methods.append(gr.Dropdown(choices, value=DEFAULT_METHODS[index], label=f"Panel {index + 1} method",
                                           elem_id=f"method-{index}"))
                images.append(gr.Image(label="Image · click a token", type="numpy", format="png",
                                       interactive=False, height=DISPLAY, elem_classes="panel-image",
                                       elem_id=f"image-{index}", buttons=["download"]))
                stats.append(gr.HTML(text.waiting_html("Press Run to start."), elem_id=f"stats-{index}"))
                maps.append(gr.Image(label="Acceptance map", type="numpy", format="png", interactive=False,
                                     height=DISPLAY, elem_classes="map-image", elem_id=f"map-{index}",
                                     buttons=[]))
    return methods, images, maps, stats


def build_demo(runtime: Runtime | None = None) -> gr.Blocks:
    runtime = runtime or Runtime()
    with gr.Blocks(title="LANTERN Explorer") as demo:
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=1, min_width=260):
                controls = _controls()
                model_status = gr.Markdown(elem_id="model-status")
                run = gr.Button("Run", variant="primary", size="lg", elem_id="run-button")
                gr.HTML(LEGEND)
            with gr.Column(scale=4):
                methods, images, maps, stats = _panels()
        with gr.Row():
            length_plot = gr.Plot(label="Accepted length per step", elem_id="length-plot", show_label=False)
            with gr.Column():
                scrubber = gr.Slider(0, 255, value=0, step=1, label="Replay a step (from the stored traces)",
                                     elem_id="scrubber")
                detail = gr.Markdown(text.detail_markdown("", None, 16, None, MethodOptions.delta, MethodOptions.k),
                                     elem_id="detail")
        with gr.Row():
            latent_plot = gr.Plot(label="Latent space", elem_id="latent-plot", show_label=False)
            tree_plot = gr.Plot(label="Draft tree", elem_id="tree-plot", show_label=False)
        with gr.Row():
            with gr.Column():
                tradeoff_plot = gr.Plot(label="Speed-up against quality", visible=(ASSETS / SWEEP_FILE).exists(),
                                        elem_id="tradeoff-plot", show_label=False)
                tradeoff_note = gr.Markdown()
            lesson = text.how_it_works(None, MethodOptions.delta, MethodOptions.k, EMBEDDED_VQ.codebook_size)
            teaching = gr.Markdown(lesson, elem_id="teaching")
        with gr.Accordion("Statistics (the API's JSON)", open=False):
            statistics = gr.JSON(label="statistics")
        run_state, inspect_panel = gr.State(None), gr.State(PANELS - 1)

        outputs = images + maps + stats + [length_plot, scrubber, latent_plot, tree_plot, detail, teaching,
                                           statistics, run_state, inspect_panel]
        tradeoff = [tradeoff_plot, tradeoff_note]
        loading = demo.load(_load_handler(runtime), [controls["delta"], controls["k"]], outputs + methods + tradeoff,
                            api_visibility="private", concurrency_id="load", concurrency_limit=None,
                            show_progress="hidden")
        inputs = [controls[key] for key in ("class_name", "seed", "temperature", "cfg_scale", "top_k", "delta",
                                            "k", "tree_depth", "tree_top_k", "tree_total")] + methods
        inputs += [controls["model"], controls["prompt"]]
        # A Run pressed before the start-up comparison is ready must not be overwritten by it.
        run.click(_compare_handler(runtime), inputs, outputs, api_name="compare", concurrency_id="decode",
                  concurrency_limit=1, show_progress="minimal", cancels=[loading])
        controls["model"].change(
            lambda name, class_name, k, *chosen: handlers.choose_model(runtime, name, class_name, k, list(chosen)),
            [controls["model"], controls["class_name"], controls["k"]] + methods,
            [controls["class_name"], controls["prompt"], controls["k"]] + methods + [model_status, latent_plot],
            api_visibility="private", concurrency_id="load-model", concurrency_limit=1, show_progress="full")
        _wire_inspector(runtime, images, scrubber, run_state, inspect_panel,
                        images + maps + [length_plot, latent_plot, tree_plot, detail])
        for slider in (controls["delta"], controls["k"]):
            slider.release(handlers.tradeoff, [controls["delta"], controls["k"]], tradeoff, api_visibility="private")
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    return demo


def _compare_handler(runtime: Runtime):
    @gpu
    def compare(class_name=DEFAULT_CLASS, seed=0, temperature=1.0, cfg_scale=4.0, top_k=0,
                delta=MethodOptions.delta, k=MethodOptions.k, tree_depth=TreeConfig.depth, tree_top_k=TreeConfig.top_k,
                tree_total=TreeConfig.total_tokens, method_1=DEFAULT_METHODS[0],
                method_2=DEFAULT_METHODS[1], method_3=DEFAULT_METHODS[2], model=DEFAULT_MODEL, prompt=""):
        """Decode one image per method, interleaved; stream images and counters, then everything."""
        request = CompareRequest(class_name, seed, temperature, cfg_scale, top_k, delta, k, tree_depth,
                                 tree_top_k, tree_total, (method_1, method_2, method_3), model, prompt)
        yield from handlers.compare(runtime, request)

    return compare


def _load_handler(runtime: Runtime):
    def on_load(delta, k):  # a generator, so that Gradio streams its two updates
        yield from handlers.on_load(runtime, delta, k)

    return on_load


def _wire_inspector(runtime: Runtime, images: list, scrubber: gr.Slider, run_state: gr.State,
                    inspect_panel: gr.State, scrub_outputs: list) -> None:
    """Replaying steps and clicking tokens read the stored traces only: no decoding, no queue wait."""
    scrubber.release(lambda state, panel, step: handlers.scrub(runtime, state, panel, step),
                     [run_state, inspect_panel, scrubber], scrub_outputs, api_visibility="private",
                     concurrency_id="inspect", concurrency_limit=4, show_progress="hidden")
    inspector = scrub_outputs[-3:]
    for index, image in enumerate(images):
        def on_select(state, event: gr.SelectData, panel=index):
            x, y = event.index
            return handlers.select(runtime, state, panel, x, y)

        image.select(on_select, [run_state], inspector + [inspect_panel], api_visibility="private",
                     concurrency_id="inspect", concurrency_limit=4, show_progress="hidden")
