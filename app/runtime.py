"""The model behind the page and the first comparison shown at page load.

The model is loaded once, in a background thread started with the server, so that the page is ready
in seconds; a default comparison computed right after it gives the page something real to show.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from app.compare import Lane, run_to_end
from app.render import padded_tokens
from app.request import CompareRequest
from app.shipped import Projection, load_projection
from engine.config import InvalidInput
from engine.methods import METHODS, get_method
from engine.models import ImageModel

log = logging.getLogger("app.runtime")


@dataclass
class RunState:
    """A finished comparison, kept per browser session so that any step can be replayed."""

    request: CompareRequest
    lanes: list[Lane]
    finals: list[np.ndarray]  # (H, W, 3) uint8 final image per lane
    grid: int
    vocab: int

    @property
    def max_step(self) -> int:
        return max(len(lane.traces) for lane in self.lanes) - 1


def _default_loader() -> ImageModel:
    """The embedded model, on the GPU when there is one."""
    from engine.models import load_model

    return load_model("embedded", device="cuda" if torch.cuda.is_available() else "cpu")


class Runtime:
    """Owns the model; thread-safe lazy loading; the cached first run."""

    def __init__(self, loader: Callable[[], ImageModel] = _default_loader):
        self._loader = loader
        self._lock = threading.Lock()
        self._model: ImageModel | None = None
        self._projection: Projection | None = None
        self._cached: RunState | None = None
        self._warm_done = threading.Event()
        self._computing_run = False
        self.warm_error: str | None = None

    def model(self) -> ImageModel:
        with self._lock:
            if self._model is None:
                self._model = self._loader()
            return self._model

    def projection(self) -> Projection:
        model = self.model()
        with self._lock:
            if self._projection is None:
                weights = model.tokenizer.quantize.embedding.weight.detach().float().cpu().numpy()
                self._projection = load_projection(weights)
            return self._projection

    def decode(self, token_rows: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Partial or whole token rows -> (H, W, 3) uint8 images, one batched decoder call."""
        model = self.model()
        total = model.target.cfg.num_image_tokens
        batch = np.stack([padded_tokens(row, total) for row in token_rows])  # (B, grid^2)
        device = model.target.output.weight.device
        images = model.decode_images(torch.from_numpy(batch).to(device))  # (B, H, W, 3)
        return list(images.cpu().numpy())

    def finish(self, request: CompareRequest, lanes: list[Lane]) -> RunState:
        model = self.model()
        finals = self.decode([lane.tokens for lane in lanes])
        return RunState(request, lanes, finals, model.grid_size, model.target.cfg.vocab_size)

    def start(self, warm: bool = True, request: CompareRequest = CompareRequest()) -> threading.Thread:
        """Load the model (and, if `warm`, compute the `request` comparison) in a daemon thread."""
        self._computing_run = warm
        thread = threading.Thread(target=self._warm_up, args=(request if warm else None,),
                                  name="explorer-warm-up", daemon=True)
        thread.start()
        return thread

    def _warm_up(self, request: CompareRequest | None) -> None:
        try:
            self.projection()
            if request is not None:
                self._cached = self.run(request)
        except Exception as err:  # the page must come up even if the first run cannot be made
            log.exception("warm-up failed")
            self.warm_error = str(err)
        finally:
            self._warm_done.set()

    def run(self, request: CompareRequest) -> RunState:
        """A whole comparison without streaming, with methods this model cannot run replaced."""
        model = self.model()
        options = request.options()
        methods = usable_methods(model, request.checked_methods(), options)
        request = CompareRequest(**{**request.__dict__, "methods": tuple(methods)})
        lanes = run_to_end(model, methods, request.sampling(), model.class_id(request.class_name), options)
        return self.finish(request, lanes)

    def cached_run(self, timeout: float) -> RunState | None:
        """The start-up comparison, waiting for it up to `timeout` s; None if none is being made."""
        if not self._computing_run:
            return None
        self._warm_done.wait(timeout)
        return self._cached


def usable_methods(model: ImageModel, wanted: list[str], options) -> list[str]:
    """`wanted`, each method the model lacks a drafter for replaced by the next runnable one."""
    def runnable(name: str) -> bool:
        try:
            get_method(name).build(model, options)
        except InvalidInput:
            return False
        return True

    spare = [name for name in METHODS if name not in wanted and runnable(name)]
    return [name if runnable(name) else (spare.pop(0) if spare else name) for name in wanted]
