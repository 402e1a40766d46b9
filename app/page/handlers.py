"""What the page's events do: stream a comparison, replay a step, inspect a token, draw the sweep.

Handlers return app.page.outputs dataclasses (flattened for Gradio), which app.page.ui lays out with the
components in the same fields; the drawing itself lives in app.views.render, app.views.plots and app.views.text.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import replace

import gradio as gr
import numpy as np

from app.backend import imagenet
from app.backend.lanes import Lane, interleave, reads_delta, summary
from app.backend.live_run import LiveRun, decode_in_background
from app.backend.request import ALTERNATIVE_RELAXED, K_SLIDER_MAX, LANTERN_PANEL, PANELS, CompareRequest
from app.backend.runtime import RunState, Runtime, usable_methods
from app.backend.shipped import SWEEP_DIR, load_sweep
from app.backend.whatif import what_if
from app.page.checked import refusal
from app.page.outputs import ComparisonOutputs, LoadOutputs, panel_values
from app.views import plots, render, text
from app.views.detail import first_position, token_detail
from app.views.whatif_view import whatif_figure, whatif_html
from engine.core.config import InvalidInput, SamplingConfig
from engine.loading.image_model import ImageModel
from engine.loading.official import MODELS as OFFICIAL_MODELS
from engine.methods import METHODS, for_mode

WHATIF_WAITING = ("Moving delta, k or the variant judges the last run's LANTERN drafts again here, at once; "
                  "a first comparison is on its way.")
WHATIF_NO_PANEL = ("No panel runs a method with delta and k: put LANTERN in a panel and press Run to judge its "
                   "drafts here as the sliders move.")
MIN_UPDATE_S = 0.6  # stream counters and maps at most about twice a second ...
DECODE_SHARE = 6  # ... and image previews in under about a seventh of the time


def _maps(model: ImageModel, lanes: list[Lane], mapped: list[int]) -> list:
    """Acceptance maps of the lanes with new tokens (cheap: no image decoding), gr.skip() for the
    others; `mapped` (tokens mapped per lane) is updated."""
    maps = [gr.skip()] * len(lanes)
    for i, lane in enumerate(lanes):
        if lane.decided != mapped[i]:
            codes = render.acceptance_codes(lane.traces, lane.num_tokens)
            maps[i] = render.acceptance_map(codes, model.grid_size, lane.traces[-1].new_positions)
            mapped[i] = lane.decided
    return maps


def _images(model: ImageModel, lanes: list[Lane], shown: list[int]) -> list:
    """Greyed-out partial images of the lanes with new tokens, one batched VQ decode, gr.skip() for
    the others; `shown` (tokens on screen per lane) is updated."""
    images = [gr.skip()] * len(lanes)
    changed = [i for i, lane in enumerate(lanes) if lane.decided != shown[i]]
    if changed:
        for i, image in zip(changed, Runtime.decode(model, [lanes[i].tokens for i in changed])):
            shown[i] = lanes[i].decided
            images[i] = render.grey_out(image, render.known_cells(lanes[i].tokens, model.grid_size))
    return images


def stream_comparison(runtime: Runtime, request: CompareRequest) -> Iterator[list]:
    """Stream a comparison: images, maps and counters while decoding, everything else at the end.
    The decoding runs in a thread of its own (app.backend.live_run), so that drawing and sending previews
    never hold it up."""
    started = time.perf_counter()
    model, request, lanes, steps = _start(runtime, request)
    live = LiveRun()
    live.publish(model, lanes)  # every method's prefill: the first preview
    decode_in_background(live, model, steps, lambda: runtime.finish(request, model, lanes, started))
    try:
        for preview in previews(live.progress(timeout=None, interval=MIN_UPDATE_S)):
            yield preview.flatten()
    finally:  # also when the page goes away mid-stream: its decoding stops with it
        live.stopped = True
    state = live.wait(timeout=None)
    if state is None:
        raise live.error or RuntimeError("the comparison stopped before it finished")
    yield final_outputs(runtime, state).flatten()


def previews(progress: Iterable[tuple[ImageModel, list[Lane]]]) -> Iterator[ComparisonOutputs]:
    """Images, maps and counters of lanes in progress (with the model they run on).

    Counters and maps are cheap and follow every look; images cost a VQ decode (seconds for a large
    official decoder on a CPU), so they follow only as often as DECODE_SHARE allows."""
    shown, mapped, images_due = None, None, 0.0
    for model, lanes in progress:
        if shown is None:
            shown, mapped = [-1] * len(lanes), [-1] * len(lanes)
        now = time.perf_counter()
        images = [gr.skip()] * len(lanes)
        if now >= images_due:
            images = _images(model, lanes, shown)
            images_due = time.perf_counter() + DECODE_SHARE * (time.perf_counter() - now)
        maps = _maps(model, lanes, mapped)
        counters = [text.counters_html(row) for row in summary(lanes)]
        yield ComparisonOutputs(images=panel_values(images, None), maps=panel_values(maps, None),
                                counters=panel_values(counters, ""))


def _start(runtime: Runtime, request: CompareRequest):
    """(model, the request with the methods the panels run, lanes after every prefill, the steps to
    come), or a gr.Error naming what is wrong: the request's own values first, before a model is
    loaded (perhaps downloaded) for it."""
    try:
        options, sampling, methods = request.options(), request.sampling(), request.panel_methods()
        runtime.check_condition(request)
        model, condition = runtime.bound_model(request)
        steps = interleave(model, methods, sampling, condition, options)
        request = replace(request, methods=tuple(methods))  # what runs: the echo names it
        lanes = next(steps)  # every method's prefill: a method that cannot run fails here
    except InvalidInput as err:
        raise refusal(str(err)) from err
    except (OSError, RuntimeError, ValueError) as err:  # missing or broken weight files: say so
        raise refusal(f"model {request.model!r} could not be loaded: {err}") from err
    return model, request, lanes, steps


def final_outputs(runtime: Runtime, state: RunState) -> ComparisonOutputs:
    """Every output of a finished run."""
    lanes = state.lanes
    maps = [render.acceptance_map(render.acceptance_codes(lane.traces, lane.num_tokens), state.grid)
            for lane in lanes]
    rows = summary(lanes)
    panel = default_panel(state)
    step = _busiest_step(lanes[panel])
    request = state.request
    return replace(inspect_step(runtime, state, panel, step),
                   **whatif_outputs(state, request.delta, request.k, request.lantern_variant, step),
                   images=panel_values([render.upscale(image) for image in state.finals], None),
                   maps=panel_values(maps, None), counters=panel_values([text.counters_html(r) for r in rows], ""),
                   length_plot=length_figure(state),
                   scrubber=scrubber_update(state, panel, step),
                   teaching=text.how_it_works(lanes, state.request, state.vocab, state.wall_ms),
                   statistics={"request": state.request.__dict__, "methods": rows,
                               "comparison_wall_ms": None if state.wall_ms is None else round(state.wall_ms, 1),
                               "panels_decode_ms": round(sum(lane.elapsed_ms for lane in lanes), 1)},
                   run_state=state,
                   inspect_panel=panel)


def length_figure(state: RunState, step: int | None = None):
    series = [(lane.title, [t.accepted_length for t in lane.traces[1:]]) for lane in state.lanes]
    return plots.accepted_length_figure(series, step)


def default_panel(state: RunState) -> int:
    """The panel the inspector starts on: the last lossy one (LANTERN by default), else the last."""
    lossy = [i for i, lane in enumerate(state.lanes) if not lane.lossless]
    return lossy[-1] if lossy else len(state.lanes) - 1


def scrubber_update(state: RunState, panel: int, step: int):
    """The replay slider over the inspected panel's own passes, named for it."""
    lane = state.lanes[panel]
    return gr.update(maximum=max(1, lane.passes - 1), value=min(step, lane.passes - 1),
                     label=f"Replay a step of panel {panel + 1}, {lane.title} (0-{lane.passes - 1})")


def whatif_outputs(state: RunState | None, delta, k, variant, step) -> dict:
    """The what-if view's values (ComparisonOutputs' whatif fields): the run's drafts judged at the
    sliders' setting, or why there is nothing to judge."""
    if state is None:
        return {"whatif": whatif_html(None, WHATIF_WAITING), "whatif_plot": None}
    try:
        result = what_if(state, float(delta), int(k), str(variant), int(step))
    except (InvalidInput, TypeError, ValueError) as err:  # a setting Run would refuse: say so here too
        return {"whatif": whatif_html(None, f"Not judged: {err}."), "whatif_plot": gr.skip()}
    if result is None:
        return {"whatif": whatif_html(None, WHATIF_NO_PANEL), "whatif_plot": None}
    return {"whatif": whatif_html(result), "whatif_plot": whatif_figure(result)}


def whatif(state: RunState | None, delta, k, variant, step) -> list:
    """The sliders moved: the last run's drafts judged again at their setting, no new decode."""
    values = whatif_outputs(state, delta, k, variant, step)
    return [values["whatif"], values["whatif_plot"]]


def _busiest_step(lane: Lane) -> int:
    """The step that produced the most tokens: a telling first example for the inspector."""
    lengths = [t.accepted_length for t in lane.traces]
    return int(np.argmax(lengths[1:]) + 1) if len(lengths) > 1 else 0


def inspect_step(runtime: Runtime, state: RunState, panel: int, step: int) -> ComparisonOutputs:
    """The inspector on the first position that `step` of a panel decided."""
    lane = state.lanes[min(panel, len(state.lanes) - 1)]
    return inspect_position(runtime, state, panel, first_position(lane.traces[min(step, len(lane.traces) - 1)]))


def inspect_position(runtime: Runtime, state: RunState, panel: int, position: int | None) -> ComparisonOutputs:
    """Latent plot, draft tree and table for one token of one panel."""
    panel = min(panel, len(state.lanes) - 1)
    lane = state.lanes[panel]
    detail = None if position is None else token_detail(lane.traces, position)
    projection = runtime.projection(state.model)
    neighbours = None
    if detail is not None and detail.drafted is not None and "k" in METHODS[lane.method].params:
        neighbours = state.model.neighbours(state.request.k)[detail.drafted]
    return ComparisonOutputs(
        latent_plot=plots.latent_figure(projection.coords, projection.name, detail, neighbours),
        tree_plot=plots.tree_figure(lane.traces[detail.step], detail.tree_nodes) if detail else gr.skip(),
        detail=text.detail_markdown(lane.title, detail, state.grid, neighbours, state.request))


def codebook_figure(runtime: Runtime):
    """The latent plot before anything is selected: the whole codebook."""
    projection = runtime.projection()
    return plots.latent_figure(projection.coords, projection.name)


def scrub(runtime: Runtime, state: RunState | None, panel: int, step, delta=None, k=None, variant=None) -> list:
    """Replay `step` of the inspected panel from the stored traces: masked final images, maps up to
    it, the inspector, and (given the sliders' setting) the what-if view of that step. A typed step
    past the panel's last pass shows its last one, and the box says so."""
    if state is None:
        return ComparisonOutputs().flatten()
    panel = min(panel, len(state.lanes) - 1)
    try:
        step = min(max(0, int(float(step))), state.lanes[panel].passes - 1)
    except (TypeError, ValueError):  # an emptied or garbled box: the first pass
        step = 0
    whatif = {} if delta is None else whatif_outputs(state, delta, k, variant, step)
    images, maps = [], []
    for lane, final in zip(state.lanes, state.finals):
        decided = render.tokens_after(lane.traces, step)
        images.append(render.grey_out(final, render.known_cells(decided, state.grid)))
        trace = lane.traces[min(step, len(lane.traces) - 1)]
        codes = render.acceptance_codes(lane.traces, lane.num_tokens, upto=step)
        maps.append(render.acceptance_map(codes, state.grid, trace.new_positions if step < len(lane.traces) else ()))
    return replace(inspect_step(runtime, state, panel, step), images=panel_values(images, gr.skip()),
                   maps=panel_values(maps, gr.skip()), length_plot=length_figure(state, step),
                   scrubber=scrubber_update(state, panel, step), **whatif).flatten()


def select(runtime: Runtime, state: RunState | None, panel: int, x: float, y: float) -> list:
    """A click on a panel's image at pixel (x, y): inspect that token, remember the panel."""
    if state is None or panel >= len(state.lanes):
        return ComparisonOutputs().flatten()
    # Clicks arrive in the pixels of the picture shown: the final image upscaled.
    shown = render.display_size(state.finals[panel].shape[0])
    position = render.position_of_pixel(x, y, state.grid, shown)
    outputs = replace(inspect_position(runtime, state, panel, position), inspect_panel=panel)
    found = render.step_of_position(state.lanes[panel].traces, position)
    if found is not None:  # the step slider and the length plot follow to the step that made the token
        outputs = replace(outputs, scrubber=scrubber_update(state, panel, found[0]),
                          length_plot=length_figure(state, found[0]))
    return outputs.flatten()


def tradeoff(delta: float, k: int, temperature: float, methods: list[str]) -> tuple:
    """(the chart's update, caption) for the shipped sweep of what the panels run now: the chart is
    hidden where there is none, rather than an empty frame, and the caption says why."""
    figure, caption = sweep_chart(delta, k, temperature, methods)
    return gr.update(value=figure, visible=figure is not None), caption


def sweep_chart(delta: float, k: int, temperature: float, methods: list[str]) -> tuple:
    """(figure or None, caption) for the shipped sweep of what the panels run now: the last panel
    whose method reads delta and k, in the mode the temperature sets; the slider setting marked."""
    try:
        greedy = SamplingConfig(temperature=float(temperature)).greedy
        relaxed = [m for m in (for_mode(name, greedy) for name in methods) if reads_delta(m)]
    except (TypeError, ValueError):  # InvalidInput included
        return None, "The trade-off chart follows the panels' methods and the temperature; one of them is not valid."
    mode = "greedy" if greedy else "sampling"
    if not relaxed:
        return None, "No panel runs a method with delta and k, so there is no trade-off to chart."
    method = relaxed[-1]
    sweep = load_sweep(method, greedy)
    if sweep is None:
        return None, (f"No {mode} sweep of {METHODS[method].title} is shipped. `python -m engine bench --sweep "
                      f"--sweep-method {method} --temperature {0 if greedy else 1} --json "
                      f"assets/{SWEEP_DIR}/{method}_{mode}.json` makes one.")
    points, config = sweep
    deltas = ", ".join(f"{d:g}" for d in sorted({p["delta"] for p in points}))
    ks = ", ".join(str(v) for v in sorted({p["k"] for p in points}))
    # Greedy drafts are the drafter's top-1 whatever the nucleus, so only sampling's sweeps name it.
    nucleus = config.get("draft_top_p", 1.0)
    drafts = f", drafts from the top-p {nucleus:g} nucleus" if nucleus < 1.0 and not greedy else ""
    caption = (f"**{METHODS[method].title}, {mode}** (temperature {config.get('temperature', 0):g}, CFG "
               f"{config.get('cfg', 4):g}{drafts}): speed-up against quality for delta {deltas} and k {ks}; each point "
               f"is {config.get('n_images', '?')} images (seed {config.get('seed', 0)}) against vanilla on the same "
               "images. Bars: 95 % intervals (class accuracy: Wilson; log p: mean of per-image differences).")
    # Short enough for a phone's chart; the caption below it says the rest.
    title = f"{METHODS[method].title}, {mode}<br><sup>speed-up against quality; size: k</sup>"
    return plots.tradeoff_figure(points, float(delta), int(k), title), caption


def follow_mode(temperature: float, methods: list[str]) -> list[str]:
    """The panels' menus after the temperature changes: each shows the method it will run, a
    method's counterpart for sampling above 0 and the method itself again at 0."""
    try:
        greedy = SamplingConfig(temperature=float(temperature)).greedy
    except (TypeError, ValueError):  # InvalidInput included: the menus stay as they are
        return list(methods)
    back = {m.when_sampling: name for name, m in METHODS.items() if m.when_sampling}
    return [back.get(name, name) if greedy else for_mode(name, greedy) for name in methods]


def named_for_mode(method: str, temperature: float) -> str:
    """A panel's menu after a user's choice: the method it will run at this temperature."""
    return follow_mode(temperature, [method])[0]


def swap_relaxed(method: str, temperature: float) -> str:
    """The swap button: the last panel to COOL-SD, or from COOL-SD back to its default method (LANTERN,
    as the mode runs it)."""
    return named_for_mode(LANTERN_PANEL if method == ALTERNATIVE_RELAXED else ALTERNATIVE_RELAXED, temperature)


def choose_model(runtime: Runtime, name: str, class_name: str, k: int, methods: list[str]) -> list:
    """Load the model picked in the selector. Outputs: the class choice, the prompt box, the k
    slider, the panels' methods (those this model cannot run replaced), a status line and the
    codebook plot."""
    try:
        model = runtime.model(name)
    except (InvalidInput, OSError, RuntimeError, ValueError) as err:  # offline, missing or broken files
        # Every other control stays as it was; the status line says what is missing and what to do.
        message = f"model {name!r} could not be loaded: {err}"
        refusal(message)
        unchanged = [gr.skip()] * (3 + len(methods))
        return unchanged + [f"**Not loaded.** {message}. The controls still run the last model loaded.", gr.skip()]
    is_text = model.needs_prompt
    runnable = model.unbound()
    vocab = runnable.target.cfg.vocab_size
    k = min(int(k), vocab - 1)
    chosen = usable_methods(runnable, list(methods))
    classes = [(label, label) for label in runnable.class_names]
    imagenet_classes = name in OFFICIAL_MODELS and not is_text
    if imagenet_classes:  # ImageNet's classes: their index, and name where known
        classes = imagenet.choices(len(classes))
    values = [value for _, value in classes]
    class_update = gr.update(visible=not is_text, choices=classes, info=imagenet.help_text(imagenet_classes),
                             value=class_name if class_name in values else values[0])
    projection = runtime.projection(model)
    return ([class_update, gr.update(visible=is_text), gr.update(maximum=min(vocab - 1, K_SLIDER_MAX), value=k)]
            + panel_values(chosen, gr.skip())
            + [text.model_status(runnable, chosen, is_text), plots.latent_figure(projection.coords, projection.name)])


def on_load(runtime: Runtime, delta: float, k: int, temperature: float, methods: list[str]) -> Iterator[list]:
    """At page load: the codebook and the sweep at once, then the start-up comparison, streamed as it
    decodes (or at once, if it is already done)."""
    first = LoadOutputs()
    coming = runtime.first_run.expected  # a start-up comparison is decoding, or done
    try:
        first.latent_plot = codebook_figure(runtime)
        if coming:  # the pictures to be, every cell pending, rather than empty frames
            first.images = [render.pending_picture(runtime.model().grid_size)] * PANELS
    except (OSError, RuntimeError, ValueError) as err:  # no model: the page still comes up and says so
        runtime.warm_error = runtime.warm_error or f"the model could not be loaded: {err}"
    waiting = "Starting a first comparison…" if coming else "Press Run to start."
    first.counters = [text.waiting_html(runtime.warm_error or waiting)] * PANELS
    first.tradeoff_plot, first.tradeoff_note = tradeoff(delta, k, temperature, methods)
    yield first.flatten()
    previewed = False
    for preview in previews(runtime.first_run.progress(timeout=300, interval=MIN_UPDATE_S)):
        # The menus name what the panels run from the first preview on, as they do after a Run, and
        # only then: a choice made since (the counters may already say done) is the user's.
        menus = {} if previewed else {"methods": panel_values(runtime.first_run.methods, gr.skip())}
        previewed = True
        yield LoadOutputs(**vars(preview), **menus).flatten()
    state = runtime.cached_run(timeout=300)
    if state is None:
        yield LoadOutputs(counters=[text.waiting_html(runtime.warm_error or "Press Run to start.")] * PANELS).flatten()
        return
    final = final_outputs(runtime, state)
    menus = {} if previewed else {"methods": panel_values([lane.method for lane in state.lanes], gr.skip())}
    yield LoadOutputs(**vars(final), **menus).flatten()
