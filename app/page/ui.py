"""The page: controls, three racing panels, per-step acceptance, the latent inspector, the trade-off
and a short lesson, wired to app.page.handlers. Building the page loads nothing; see app.page.main."""
from __future__ import annotations

import inspect

import gradio as gr

from app.backend.request import ALTERNATIVE_RELAXED, LANTERN_PANEL, PANELS, CompareRequest, api_parameters
from app.backend.runtime import Runtime
from app.page import handlers
from app.page.controls import DEFAULTS, Panels, method_controls, race_controls, racing_panels
from app.page.outputs import ComparisonOutputs, LoadOutputs
from app.views import text
from app.views.frontier_view import frontier_chart
from app.views.whatif_view import ELEMENT_ID
from engine.loading.embedded import VQ as EMBEDDED_VQ
from engine.loading.embedded import embedded_metadata
from engine.methods import METHODS

QUEUE_SIZE = 16  # waiting comparisons beyond this are refused instead of piling up
CSS = """
.panel-image img, .map-image img { image-rendering: pixelated; }
#run-button { min-height: 56px; font-size: 1.25em; align-self: center; }
.legend span { display:inline-block; width:12px; height:12px; border-radius:2px; margin:0 4px -1px 8px; }
/* The inspector's numbers stay whole; only the list of credited codes wraps. */
#detail td, #detail th { font-variant-numeric: tabular-nums; }
#detail td:nth-child(-n+4), #detail th:nth-child(-n+4) { white-space: nowrap; }
/* Wide tables scroll inside their own box instead of squeezing a column to a letter a line. */
#detail table, #teaching table { display: block; overflow-x: auto; max-width: 100%; }
#detail td:last-child, #detail th:last-child { min-width: 16em; }
#teaching td, #teaching th { white-space: nowrap; }
/* A new run is under way: what is below still describes the previous one. */
body.comparing #results { opacity: 0.35; filter: grayscale(1); transition: opacity 0.2s; }
body.comparing #results::before { content: "Previous run: these update when the run above finishes.";
                                  font-weight: 600; }
/* A refused input or a failed run is told once, in the toast. Gradio would also lay an "Error" badge
   over every output of the event, hiding the previous results, which stay valid. */
[data-testid="status-tracker"]:has(> .error) { display: none !important; }
@media (min-width: 1280px) {
  /* A page wide enough for the three panels side by side (Gradio's container widens at 1,280 px):
     the settings' column and the race side by side, and the folded settings, open, under both, their
     groups side by side, instead of a tall narrow column beside blank space. The settings' column
     dissolves into the top row's grid so that the accordion can span it. Narrower, the panels wrap,
     the race runs long, and the folded settings open in their column beside it. */
  #top { display: grid; grid-template-columns: minmax(260px, 1fr) minmax(0, 4fr); align-items: start; }
  #settings { display: contents; }
  #settings > * { grid-column: 1; }
  #race { grid-column: 2; grid-row: 1; }
  #settings > #more-settings { grid-column: 1 / -1; }
}
@media (max-width: 640px) {
  /* A phone: the race first, its three panels side by side, the settings below it. */
  #intro p { font-size: 0.85em; display: -webkit-box; -webkit-line-clamp: 3; -webkit-box-orient: vertical;
             overflow: hidden; }
  #settings { order: 1; }
  #panels { flex-wrap: nowrap !important; gap: 4px !important; }
  #panels > .column, #panels .block { min-width: 0 !important; }
  #panels > .column { flex: 1 1 0 !important; }
  #panels .panel-image, #panels .map-image { height: 30vw !important; }
  #panels label.float, #panels [data-testid="block-info"], #panels .lane-note { display: none; }
  #panels .lane-stats > div { min-width: 0 !important; padding: 1px 3px !important; font-size: 0.8em; }
  #panel-methods { flex-direction: column !important; gap: 4px !important; }
  /* The settings' help lines stay on wider screens; a phone keeps their labels. */
  #settings .info-text { display: none; }
  #panel-methods > .column { min-width: 0 !important; width: 100% !important; }
  #panel-methods [data-testid="block-info"] { display: none; }
  #panels .time-split { font-size: 0.65em !important; }
  /* Tables would be wider than the phone: each row becomes a card, a grid of four cells a line (three
     for rows of six), the header row a card like the others so that each column's name stands over its
     values. The inspector's list of credited codes and the lesson's method names take a line of their
     own. */
  #top table, #results table, #top thead, #results thead, #top tbody, #results tbody {
    display: block; width: 100%; padding: 0; border: 0; margin: 0; }
  #top tr, #results tr { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); margin: 0 0 6px;
                         padding: 0; border: 1px solid var(--border-color-primary); border-radius: var(--radius-sm); }
  #top td, #top th, #results td, #results th { min-width: 0 !important; white-space: normal !important;
                                               overflow-wrap: normal; border: 0; margin: 0; padding: 4px 6px; }
  #detail td:last-child, #detail th:last-child, #teaching td:first-child, #teaching th:first-child {
    grid-column: 1 / -1; overflow-wrap: anywhere; }
  #teaching td:first-child { font-weight: 600; }
  #top tr:has(> :nth-child(6)), #results tr:has(> :nth-child(6)) { grid-template-columns: repeat(3, minmax(0, 1fr)); }
  /* The what-if view's words over its chart, each the phone's width, rather than two slivers. */
  #whatif-box .row { flex-direction: column; }
}
"""
LEGEND = ('<div class="legend" style="font-size:0.85em">Each panel: the picture (click a token to inspect it), '
          'then its acceptance map:<span style="background:#2ec478"></span>accepted draft'
          '<span style="background:#e83e8c"></span>accepted draft the target gives p &lt; 1e-4 (a speck)'
          '<span style="background:#f5a623"></span>bonus / correction<span style="background:#2b303b"></span>not yet'
          '</div>')


def launch_options() -> dict:
    """Theme and style, which Gradio 6 takes at launch."""
    return {"theme": gr.themes.Soft(primary_hue="amber", secondary_hue="indigo"), "css": CSS}


def build_demo(runtime: Runtime | None = None) -> gr.Blocks:
    runtime = runtime or Runtime()
    with gr.Blocks(title="LANTERN Explorer") as demo:
        gr.Markdown(text.intro_markdown(embedded_metadata()), elem_id="intro")
        with gr.Row(elem_id="top"):
            # On a phone the columns stack; CSS moves this one below the race (see CSS).
            with gr.Column(scale=1, min_width=260, elem_id="settings"):
                controls = method_controls()
                model_status = gr.Markdown(elem_id="model-status")
            with gr.Column(scale=4, elem_id="race"):
                with gr.Row(equal_height=True, elem_id="race-bar"):
                    controls |= race_controls()
                    run = gr.Button("Run", variant="primary", size="lg", elem_id="run-button", scale=1,
                                    min_width=120)
                panels = racing_panels()
                gr.HTML(LEGEND)
                swap = gr.Button(swap_label(DEFAULTS.methods[-1]), size="sm", variant="secondary",
                                 elem_id="swap-relaxed")
                whatif = _whatif_view()
        with gr.Column(elem_id="results"):
            outputs, tradeoff = _results(panels, whatif)
        controls |= panels.method_inputs()
        chart_inputs = [controls["delta"], controls["k"], controls["temperature"], *panels.methods]
        loading = demo.load(_load_handler(runtime), chart_inputs,
                            LoadOutputs(**vars(outputs), methods=panels.methods, tradeoff_plot=tradeoff[0],
                                        tradeoff_note=tradeoff[1]).flatten(),
                            api_visibility="private", concurrency_id="load", concurrency_limit=None,
                            show_progress="hidden")
        # A Run pressed before the start-up comparison is ready must not be overwritten by it.
        # The plots and the inspector below the panels show the previous run until this one ends:
        # greyed in the browser meanwhile (the js runs before the request and passes its inputs on),
        # at no cost to the server or the API. The class goes on the body, which the page's own
        # rendering leaves alone.
        comparing = run.click(_comparison_endpoint(runtime), [controls[p.name] for p in api_parameters()],
                              outputs.flatten(), api_name="compare", concurrency_id="decode", concurrency_limit=1,
                              show_progress="minimal", cancels=[loading],
                              js="(...inputs) => { document.body.classList.add('comparing'); return inputs; }")
        comparing.then(None, js="() => { document.body.classList.remove('comparing'); }")
        _wire_model_choice(runtime, controls, panels, model_status, outputs.latent_plot)
        _wire_inspector(runtime, panels, outputs, controls)
        _wire_whatif(controls, outputs)
        _wire_menus(controls, panels, swap)
        controls["temperature"].change(lambda t, *methods: handlers.follow_mode(t, list(methods)),
                                       [controls["temperature"], *panels.methods], panels.methods,
                                       api_visibility="private", show_progress="hidden")
        def chart(delta, k, temperature, *methods):
            return handlers.tradeoff(delta, k, temperature, list(methods))

        for slider in (controls["delta"], controls["k"]):
            slider.release(chart, chart_inputs, tradeoff[:2], api_visibility="private")
        for control in (controls["temperature"], *panels.methods):
            control.change(chart, chart_inputs, tradeoff[:2], api_visibility="private", show_progress="hidden")
        controls["temperature"].change(frontier_chart, controls["temperature"], tradeoff[2:], api_visibility="private",
                                       show_progress="hidden")
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    return demo


def _whatif_view() -> tuple:
    """The run's LANTERN drafts judged at the sliders' setting (app.backend.whatif): words and a chart, under
    the panels, where the sliders' effect shows without scrolling."""
    with gr.Accordion("What delta and k do with the last run's drafts (no new decode)", open=True,
                      elem_id="whatif-box"):
        with gr.Row(equal_height=False):
            words = gr.HTML(handlers.whatif_html(None, handlers.WHATIF_WAITING), elem_id=ELEMENT_ID,
                            label="What-if")
            chart = gr.Plot(label="Drafts kept against delta", elem_id="whatif-plot", show_label=False)
    return words, chart


def _results(panels: Panels, whatif: tuple) -> tuple[ComparisonOutputs, list]:
    """Everything below the controls: the comparison's outputs, and the trade-off plot and note."""
    with gr.Row():
        length_plot = gr.Plot(label="Accepted length per step", elem_id="length-plot", show_label=False)
        with gr.Column():
            scrubber = gr.Slider(0, 255, value=0, step=1, label="Replay a step (from the stored traces)",
                                 elem_id="scrubber")
            detail = gr.Markdown(text.detail_markdown("", None, 16, None, DEFAULTS), elem_id="detail",
                                 label="Token inspector")
    with gr.Row():
        latent_plot = gr.Plot(label="Latent space", elem_id="latent-plot", show_label=False)
        tree_plot = gr.Plot(label="Draft tree", elem_id="tree-plot", show_label=False)
    with gr.Row():
        with gr.Column(), gr.Tabs():
            with gr.Tab("Sweep", elem_id="sweep-tab"):
                tradeoff_plot = gr.Plot(label="Speed-up against quality", elem_id="tradeoff-plot", show_label=False)
                tradeoff_note = gr.Markdown()
            with gr.Tab("Frontier", elem_id="frontier-tab"):
                figure, caption = frontier_chart(DEFAULTS.temperature)
                frontier_plot = gr.Plot(figure, label="Frontier", elem_id="frontier-plot", show_label=False)
                frontier_note = gr.Markdown(caption, elem_id="frontier-note")
        teaching = gr.Markdown(text.how_it_works(None, DEFAULTS, EMBEDDED_VQ.codebook_size), elem_id="teaching",
                               label="How it works")
    with gr.Accordion("The methods and their settings", open=False):
        gr.Markdown(text.methods_markdown(), elem_id="methods-text")
    with gr.Accordion("Statistics (the API's JSON)", open=False):
        statistics = gr.JSON(label="statistics")
    outputs = ComparisonOutputs(images=panels.images, maps=panels.maps, counters=panels.counters,
                                length_plot=length_plot, scrubber=scrubber, latent_plot=latent_plot,
                                tree_plot=tree_plot, detail=detail, teaching=teaching, statistics=statistics,
                                run_state=gr.State(None), inspect_panel=gr.State(PANELS - 1),
                                whatif=whatif[0], whatif_plot=whatif[1])
    return outputs, [tradeoff_plot, tradeoff_note, frontier_plot, frontier_note]


def on_zero_gpu(fn):
    """On Hugging Face ZeroGPU, `fn` asks for a GPU per call; elsewhere the `spaces` package is absent
    and `fn` runs as it is. Imported only when the page is built: `spaces` patches torch on import."""
    try:
        import spaces
    except ImportError:
        return fn
    return spaces.GPU(duration=60)(fn)


def _comparison_endpoint(runtime: Runtime):
    """The `compare` API endpoint (and the Run button): named, optional parameters from CompareRequest."""
    parameters = api_parameters()

    def compare(*values):
        """Decode one image per method, interleaved; stream images and counters, then everything."""
        request = CompareRequest.from_api(**{p.name: value for p, value in zip(parameters, values)})
        yield from handlers.stream_comparison(runtime, request)

    # Gradio names the API's inputs, and makes them optional, from the signature.
    compare.__signature__ = inspect.Signature(parameters)
    return on_zero_gpu(compare)


def _load_handler(runtime: Runtime):
    def on_load(delta, k, temperature, *methods):  # a generator, so that Gradio streams its two updates
        yield from handlers.on_load(runtime, delta, k, temperature, list(methods))

    return on_load


def _wire_model_choice(runtime: Runtime, controls: dict, panels: Panels, model_status, latent_plot) -> None:
    def choose(name, class_name, k, *methods):
        return handlers.choose_model(runtime, name, class_name, k, list(methods))

    controls["model"].change(
        choose, [controls["model"], controls["class_name"], controls["k"]] + panels.methods,
        [controls["class_name"], controls["prompt"], controls["k"]] + panels.methods + [model_status, latent_plot],
        api_visibility="private", concurrency_id="load-model", concurrency_limit=1, show_progress="full")


def _wire_inspector(runtime: Runtime, panels: Panels, outputs: ComparisonOutputs, controls: dict) -> None:
    """Replaying steps and clicking tokens read the stored traces only: no decoding, no queue wait."""
    state, panel = outputs.run_state, outputs.inspect_panel
    setting = [controls["delta"], controls["k"], controls["lantern_variant"]]
    # `input` follows dragging, typing and arrow keys alike (and not the handlers' own updates).
    outputs.scrubber.input(lambda run, shown, step, *values: handlers.scrub(runtime, run, shown, step, *values),
                           [state, panel, outputs.scrubber, *setting], outputs.flatten(), api_visibility="private",
                           concurrency_id="inspect", concurrency_limit=4, show_progress="hidden",
                           trigger_mode="always_last")
    for index, image in enumerate(panels.images):
        def on_select(run, event: gr.SelectData, clicked=index):
            x, y = event.index
            return handlers.select(runtime, run, clicked, x, y)

        image.select(on_select, [state], outputs.flatten(), api_visibility="private",
                     concurrency_id="inspect", concurrency_limit=4, show_progress="hidden")


def _wire_whatif(controls: dict, outputs: ComparisonOutputs) -> None:
    """delta, k and the variant answered as they move: the last run's drafts judged again, no decode."""
    inputs = [outputs.run_state, controls["delta"], controls["k"], controls["lantern_variant"], outputs.scrubber]
    for control in inputs[1:4]:
        control.change(handlers.whatif, inputs, [outputs.whatif, outputs.whatif_plot], api_visibility="private",
                       concurrency_id="inspect", concurrency_limit=4, show_progress="hidden",
                       trigger_mode="always_last")


def swap_label(method: str) -> str:
    """The swap button's words: what a click puts in the last panel."""
    if method == ALTERNATIVE_RELAXED:
        return f"Swap {METHODS[LANTERN_PANEL].title} back in"
    return f"Swap in {METHODS[ALTERNATIVE_RELAXED].title} (keeps vanilla's pictures)"


def _wire_menus(controls: dict, panels: Panels, swap) -> None:
    """The menus name what runs: a method swapped for its sampling counterpart shows that one. The
    swap button trades the last panel's LANTERN for COOL-SD and back."""
    temperature = controls["temperature"]
    for menu in panels.methods:
        menu.input(handlers.named_for_mode, [menu, temperature], menu, api_visibility="private",
                   show_progress="hidden")
    last = panels.methods[-1]
    swap.click(handlers.swap_relaxed, [last, temperature], last, api_visibility="private",
               show_progress="hidden")
    last.change(swap_label, last, swap, api_visibility="private", show_progress="hidden")
