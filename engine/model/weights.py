"""Reading and writing weights: safetensors with the model config in the file's metadata.

Every failure (missing file, a file that is not safetensors, a config that does not fit, missing or
unexpected tensors) becomes one `WeightsError` naming the file and what was expected.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")
M = TypeVar("M", bound=torch.nn.Module)


class WeightsError(RuntimeError):
    """A weight file is missing, unreadable or of the wrong layout."""


def save_model(model: torch.nn.Module, path: Path, config: Any, extra: dict | None = None,
               param_dtype: torch.dtype | None = None) -> None:
    """Write the model's tensors with its config (and `extra`) in the metadata; parameters in
    `param_dtype` where given, buffers as they are. Loading casts into the model's own dtype."""
    path.parent.mkdir(parents=True, exist_ok=True)
    params = {name for name, _ in model.named_parameters()}
    tensors = {k: (v.to(param_dtype) if param_dtype is not None and k in params else v).detach().contiguous().cpu()
               for k, v in model.state_dict().items()}
    metadata = {"config": json.dumps(dataclasses.asdict(config))}
    metadata.update({k: json.dumps(v) for k, v in (extra or {}).items()})
    save_file(tensors, str(path), metadata=metadata)


def update_metadata(path: Path, extra: dict[str, Any]) -> None:
    """Add `extra` to a weight file's metadata (replacing keys it names); its tensors are untouched."""
    metadata = {k: json.dumps(v) for k, v in {**read_metadata(path), **extra}.items()}
    partial = path.with_suffix(".partial")
    save_file(load_file(str(path)), str(partial), metadata=metadata)
    partial.replace(path)


def read_metadata(path: Path) -> dict[str, Any]:
    _check_exists(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as err:
        raise WeightsError(f"{path} is not a readable safetensors file ({err}); "
                           "restore it from the repository or retrain it") from err
    return {k: json.loads(v) for k, v in raw.items()}


def config_from_metadata(path: Path, config_type: type[C]) -> C:
    meta = read_metadata(path)
    if "config" not in meta:
        raise WeightsError(f"{path} has no 'config' metadata; expected a {config_type.__name__}")
    fields = {f.name for f in dataclasses.fields(config_type)}
    values = meta["config"]
    unknown = set(values) - fields
    if unknown:
        raise WeightsError(f"{path}: config keys {sorted(unknown)} are not {config_type.__name__} fields")
    return config_type(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def load_state(path: Path) -> dict[str, torch.Tensor]:
    _check_exists(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise WeightsError(f"{path} is not a readable safetensors file ({err}); "
                           "restore it from the repository or retrain it") from err


def load_strict(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load every tensor the model has, and nothing else; say exactly what differs."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong_shape = sorted(k for k in set(expected) & set(state) if expected[k].shape != state[k].shape)
    if missing or unexpected or wrong_shape:
        parts = []
        if missing:
            parts.append(f"missing keys {_short(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {_short(unexpected)}")
        if wrong_shape:
            parts.append("wrong shapes " + _short(
                [f"{k} {tuple(state[k].shape)} != {tuple(expected[k].shape)}" for k in wrong_shape]))
        raise WeightsError(f"{source} does not match the expected layout: " + "; ".join(parts))
    model.load_state_dict(state, strict=True)


def load_module(path: Path, config_type: type[DataclassInstance], module_type: Callable[[Any], M]) -> M:
    """Build `module_type(config)` from the config stored in the file and load its tensors strictly."""
    config = config_from_metadata(path, config_type)
    module = module_type(config)
    load_strict(module, load_state(path), str(path))
    return module.eval()


def _short(items: list[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return f"[{shown}{', ...' if len(items) > limit else ''}] ({len(items)} in all)"


def _check_exists(path: Path) -> None:
    if not path.is_file():
        raise WeightsError(f"weight file {path} not found; it ships in the repository's assets/ "
                           "folder (restore it with git) or can be retrained with python -m engine.train")
