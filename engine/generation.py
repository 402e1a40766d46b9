"""Running one method on one class: the API the command line, benchmark and app share."""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.trace import StepTrace, mean_accepted_length
from engine.loading.image_model import ImageModel
from engine.loop.decode import decode
from engine.methods import MethodOptions, get_method


@dataclass
class Generation:
    method: str
    class_id: int
    tokens: np.ndarray  # (grid^2,) int64
    traces: list[StepTrace]
    wall_ms: float

    @property
    def steps(self) -> int:
        """Target passes after the prefill: vanilla takes one per token but the first."""
        return len(self.traces) - 1

    @property
    def mean_accepted_length(self) -> float:
        return mean_accepted_length(self.traces[1:])


def stream(model: ImageModel, method: str, sampling: SamplingConfig, class_id: int | str,
           options: MethodOptions | None = None, keep_inputs: bool = False) -> Iterator[StepTrace]:
    """Yield a trace after every target pass of `method` generating an image of `class_id` (with
    `keep_inputs`, what each step was judged on: engine.loop.rejudge reads it)."""
    class_index = model.class_id(class_id)
    drafter, rule = get_method(method).build(model, options or MethodOptions())
    yield from decode(model.target, drafter, rule, sampling, class_index, keep_inputs)


def generate(model: ImageModel, method: str, sampling: SamplingConfig, class_id: int | str,
             options: MethodOptions | None = None) -> Generation:
    started = time.perf_counter()
    traces = list(stream(model, method, sampling, class_id, options))
    wall_ms = (time.perf_counter() - started) * 1000.0
    return Generation(method, model.class_id(class_id), traces[-1].tokens_so_far, traces, wall_ms)


def tokens_to_image(model: ImageModel, tokens: np.ndarray):
    """(grid^2,) tokens -> PIL image."""
    from PIL import Image

    batch = torch.as_tensor(np.asarray(tokens), dtype=torch.long)[None]
    return Image.fromarray(model.decode_images(batch)[0].cpu().numpy())
