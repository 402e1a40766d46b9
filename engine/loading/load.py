"""Loading a model by name, and where it runs: the one device and precision policy.

The command line, the benchmark, the app and drafter training all load through `load_model`:
`device` "auto" is CUDA when present, else the CPU; `dtype` "auto" is bfloat16 for the GPT and its
drafters on CUDA (safe there: norms, RoPE, logits and sampling stay in fp32 or fp64) and float32 on
the CPU, where a sampling decode multiplies its large products in bfloat16 on CPUs that do so
natively (engine.model.matmul). bfloat16-matmul keeps float32 tensors and runs every matrix product
in bfloat16, as bfloat16 autocast computes them, with the target's attention row-exact when decoding
greedily (engine.model.attention): a one-token pass and a verified tree's batched pass then give each
row the same bits, so greedy speculative decoding is vanilla's token for token, and wide rows cost
far less than in float32; but the row-exact attention makes a one-token step slower than float32's,
so greedy vanilla is slower too, and the precision is asked for, not chosen. The VQ decoder always
stays float32.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from engine.core.config import InvalidInput
from engine.loading.embedded import load_embedded
from engine.loading.hub import WEIGHTS_DIR_VARIABLE
from engine.loading.image_model import ImageModel
from engine.loading.official import load_official
from engine.loading.t2i import TextImageModel

EMBEDDED = "embedded"
AUTO = "auto"
# precision -> (the dtype of the GPT's and its drafters' tensors, the dtype of their matrix products)
DTYPES = {"float32": (torch.float32, torch.float32), "bfloat16": (torch.bfloat16, torch.bfloat16),
          "bfloat16-matmul": (torch.float32, torch.bfloat16)}

LoadedModel = ImageModel | TextImageModel  # .bind(condition) gives the runnable ImageModel


def resolve_device(device: str | torch.device = AUTO) -> torch.device:
    """"auto" -> CUDA when present, else the CPU; anything else as torch names it."""
    if device == AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError:
        raise InvalidInput(f"unknown device {device!r}; allowed: cpu, cuda, cuda:N or auto") from None


def resolve_precision(dtype: str | None, device: torch.device) -> str:
    """The name of the GPT and drafter precision (a key of DTYPES); "auto" (or None) -> bfloat16 on
    CUDA, float32 elsewhere."""
    if dtype is None or dtype == AUTO:
        return "bfloat16" if device.type == "cuda" else "float32"
    if dtype not in DTYPES:
        raise InvalidInput(f"unknown dtype {dtype!r}; allowed: auto, {', '.join(DTYPES)}")
    return dtype


def resolve_dtype(dtype: str | None, device: torch.device) -> tuple[torch.dtype, torch.dtype]:
    """The GPT and drafter precision as (tensor dtype, product dtype), by resolve_precision."""
    return DTYPES[resolve_precision(dtype, device)]


def load_model(name: str = EMBEDDED, weights_dir: Path | None = None, device: str | torch.device = "cpu",
               dtype: str | None = AUTO) -> LoadedModel:
    """The embedded model, or an official LlamaGen model (engine.loading.official.MODELS) read from
    `weights_dir` (by default the folder LANTERN_WEIGHTS_DIR names, if set) or the Hugging Face Hub,
    placed on `device` in `dtype` (see the module's policy)."""
    place_on = resolve_device(device)
    tensors, products = resolve_dtype(dtype, place_on)
    model: LoadedModel
    if name == EMBEDDED:
        if weights_dir is not None:
            raise InvalidInput("--weights-dir is for official models; the embedded one is read from assets/")
        model = load_embedded()
    else:
        folder = os.environ.get(WEIGHTS_DIR_VARIABLE)
        model = load_official(name, weights_dir or (Path(folder) if folder else None))
    return model.to(place_on, tensors, products)
