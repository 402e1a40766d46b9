"""The models behind the page and the first comparison shown at page load.

The embedded model is loaded once, in a background thread started with the server, so that the page
is ready in seconds; a default comparison decoded right after it (app.backend.live_run) gives the page
something real to show, streamed to every page that loads meanwhile. Official models load on first
use, from LANTERN_WEIGHTS_DIR or the Hugging Face Hub.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from app.backend import imagenet
from app.backend.lanes import Lane, interleave
from app.backend.live_run import LiveRun
from app.backend.request import DEFAULT_MODEL, K_SLIDER_MAX, CompareRequest
from app.backend.shipped import Projection, load_projection
from engine.core.config import InvalidInput
from engine.loading.image_model import ImageModel
from engine.loading.load import AUTO, LoadedModel, load_model
from engine.loading.official import MODELS as OFFICIAL_MODELS
from engine.methods import METHODS

MODEL_CHOICES = (DEFAULT_MODEL, *OFFICIAL_MODELS)

log = logging.getLogger("app.backend.runtime")


@dataclass
class RunState:
    """A finished comparison, kept per browser session so that any step can be replayed."""

    request: CompareRequest
    model: ImageModel  # the model the lanes ran on, bound to the request's prompt if it takes one
    lanes: list[Lane]
    finals: list[np.ndarray]  # (H, W, 3) uint8 final image per lane
    wall_ms: float | None = None  # the whole comparison, request to result, when it was timed
    # The what-if view's whole-run curves, by (k, variant): moving delta alone then costs one walk.
    whatif_curves: dict = field(default_factory=dict, repr=False)

    @property
    def grid(self) -> int:
        return self.model.grid_size

    @property
    def vocab(self) -> int:
        return self.model.target.cfg.vocab_size

    @property
    def max_step(self) -> int:
        return max(len(lane.traces) for lane in self.lanes) - 1


def padded_tokens(tokens: np.ndarray, total: int, filler: int = 0) -> np.ndarray:
    """The first len(tokens) raster positions, the rest (and any -1, a position not decided yet)
    filled so that the decoder sees a full grid."""
    out = np.full(total, filler, np.int64)
    out[: len(tokens)] = np.where(tokens >= 0, tokens, filler)
    return out


def load_by_name(name: str) -> LoadedModel:
    """A model by name, on the GPU when there is one (engine.loading.load's policy); official files come from
    the folder named by LANTERN_WEIGHTS_DIR, else from the Hugging Face Hub (offline: a clear error
    at once)."""
    return load_model(name, device=AUTO, dtype=AUTO)


class Runtime:
    """Owns the models (loaded once each, thread-safe), their projections and the cached first run."""

    def __init__(self, loader: Callable[[str], LoadedModel] = load_by_name):
        self._loader = loader
        self._lock = threading.Lock()
        self._models: dict[str, LoadedModel] = {}
        self._loading: dict[str, threading.Lock] = {}
        self._projections: dict[str, Projection] = {}
        self.first_run = LiveRun()  # the start-up comparison
        self.warm_error: str | None = None

    def model(self, name: str = DEFAULT_MODEL) -> LoadedModel:
        if name not in MODEL_CHOICES:
            raise InvalidInput(f"unknown model {name!r}; allowed: {', '.join(MODEL_CHOICES)}")
        with self._lock:
            loading = self._loading.setdefault(name, threading.Lock())
        # One lock per model: two users picking a large model load it once, while users of a model
        # already loaded never wait for another one's download.
        with loading:
            if name not in self._models:
                self._models[name] = self._loader(name)
            return self._models[name]

    def bound_model(self, request: CompareRequest) -> tuple[ImageModel, int]:
        """The request's model, ready to decode, and the condition index to decode for: text-to-image
        models are bound to the request's prompt (their one condition), others take its class."""
        model = self.model(request.model)
        condition = str(request.prompt or "").strip() if model.needs_prompt else self._class_name(request)
        bound = model.bind(condition)
        return bound, bound.class_id(condition)

    def check_condition(self, request: CompareRequest) -> None:
        """The request's model name and class or prompt, checked without loading (or downloading) a
        model that is not loaded yet, where its name tells what it takes."""
        if request.model not in MODEL_CHOICES:
            raise InvalidInput(f"unknown model {request.model!r}; allowed: {', '.join(MODEL_CHOICES)}")
        loaded = self._models.get(request.model)
        spec = OFFICIAL_MODELS.get(request.model)
        needs_prompt = loaded.needs_prompt if loaded is not None else (spec is not None and spec.text)
        if needs_prompt:
            if not str(request.prompt or "").strip():
                raise InvalidInput(f"model {request.model!r} draws from a caption; write a prompt")
        elif loaded is not None:
            loaded.class_id(self._class_name(request))
        elif spec is not None:
            self._class_name(request)

    @staticmethod
    def _class_name(request: CompareRequest) -> str:
        """The request's class as its model names it. Official class-conditional models number
        ImageNet's classes; they also take a class's name (app.backend.imagenet), which becomes its index."""
        spec = OFFICIAL_MODELS.get(request.model)
        if spec is None or spec.text:
            return request.class_name
        return imagenet.class_index(request.class_name, spec.gpt_config().num_classes)

    def projection(self, model: ImageModel | None = None) -> Projection:
        model = model or self.model()
        with self._lock:
            if model.name not in self._projections:
                weights = model.tokenizer.quantize.embedding.weight.detach().float().cpu().numpy()
                self._projections[model.name] = load_projection(weights)
            return self._projections[model.name]

    @staticmethod
    def decode(model: ImageModel, token_rows: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Partial or whole token rows -> (H, W, 3) uint8 images, one batched decoder call."""
        total = model.target.cfg.num_image_tokens
        batch = np.stack([padded_tokens(row, total) for row in token_rows])  # (B, grid^2)
        device = model.target.output.weight.device
        images = model.decode_images(torch.from_numpy(batch).to(device))  # (B, H, W, 3)
        return list(images.cpu().numpy())

    def finish(self, request: CompareRequest, model: ImageModel, lanes: list[Lane],
               started: float | None = None) -> RunState:
        """The finished run, its wall time counted from `started` (time.perf_counter()) if given."""
        finals = self.decode(model, [lane.tokens for lane in lanes])
        wall_ms = None if started is None else (time.perf_counter() - started) * 1000.0
        return RunState(request, model, lanes, finals, wall_ms)

    def start(self, warm: bool = True, request: CompareRequest | None = None) -> threading.Thread:
        """Load the model (and, if `warm`, compute the `request` comparison, by default the page's
        defaults) in a daemon thread."""
        request = request or CompareRequest()
        self.first_run.expected = warm
        thread = threading.Thread(target=self._warm_up, args=(request if warm else None,),
                                  name="explorer-warm-up", daemon=True)
        thread.start()
        return thread

    def _warm_up(self, request: CompareRequest | None) -> None:
        try:
            started = time.perf_counter()
            name = request.model if request else DEFAULT_MODEL
            model = self.model(name)
            self.projection(model)
            # Every k the slider offers is a slice of this table: the what-if view answers k at once.
            runnable = model.unbound()
            runnable.neighbours(min(runnable.target.cfg.vocab_size - 1, K_SLIDER_MAX + 1))
            log.info("model %s loaded in %.1f s", name, time.perf_counter() - started)
            if request is not None:
                self.first_run.end(self.run(request, on_step=self.first_run.publish))
                log.info("first comparison ready in %.1f s", time.perf_counter() - started)
        except Exception as err:  # the page must come up even if the first run cannot be made
            log.exception("warm-up failed")
            self.warm_error = str(err)
        finally:
            self.first_run.end(self.first_run.state)  # a failed run ends too, so that no page waits on

    def run(self, request: CompareRequest,
            on_step: Callable[[ImageModel, list[Lane]], None] | None = None) -> RunState:
        """A whole comparison, with methods this model cannot run replaced; `on_step` sees the lanes
        after every step (the same list, updated in place)."""
        options, methods = request.options(), request.panel_methods()
        self.check_condition(request)
        model, condition = self.bound_model(request)
        methods = usable_methods(model, methods)
        request = CompareRequest(**{**request.__dict__, "methods": tuple(methods)})
        started = time.perf_counter()
        lanes: list[Lane] = []
        for lanes in interleave(model, methods, request.sampling(), condition, options):
            if on_step is not None:
                on_step(model, lanes)
        return self.finish(request, model, lanes, started)

    def cached_run(self, timeout: float) -> RunState | None:
        """The start-up comparison, waiting for it up to `timeout` s; None if none is being made."""
        return self.first_run.wait(timeout)


def usable_methods(model: ImageModel, wanted: list[str]) -> list[str]:
    """`wanted`, each method whose drafter the model lacks replaced by the first one in the registry
    that it can run and no panel runs yet; unknown names are left for the request's check to name."""
    def runnable(name: str) -> bool:
        return name not in METHODS or METHODS[name].runs_on(model)

    chosen = []
    for name in wanted:
        if not runnable(name):
            spare = (other for other in METHODS if other not in wanted and other not in chosen and runnable(other))
            name = next(spare, name)
        chosen.append(name)
    return chosen
