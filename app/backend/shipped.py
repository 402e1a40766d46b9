"""Small precomputed results shipped in assets/: the codebook projection and the delta/k sweeps."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.loading.embedded import ASSETS

UMAP_FILE = "codebook_umap.npy"
UMAP_META = "codebook_umap.json"  # the codebook fingerprint the projection was computed from
SWEEP_DIR = "sweeps"  # one delta x k sweep per method and mode: sweeps/<method>_<greedy|sampling>.json
SWEEP_KEYS = ("delta", "k", "speedup", "class_accuracy", "mal")
SWEEP_INTERVALS = ("class_accuracy_ci", "fid_proxy_ci", "logp_gap_ci")  # (low, high) pairs, where the sweep has them


def codebook_fingerprint(weights: np.ndarray) -> str:
    """sha256 of the stored (unnormalised, float32) codebook weights, so that a projection can tell
    which tokenizer it was computed from; the stored bytes are the same on every device."""
    return hashlib.sha256(np.ascontiguousarray(weights, np.float32).tobytes()).hexdigest()


@dataclass
class Projection:
    coords: np.ndarray  # (V, 2)
    name: str  # how it was made, shown in the plot title


def pca_2d(codebook: np.ndarray) -> np.ndarray:
    """(V, d) -> (V, 2): the two principal components, a fallback when no UMAP file matches."""
    centred = codebook - codebook.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return (centred @ vt[:2].T).astype(np.float32)


def load_projection(weights: np.ndarray, assets: Path = ASSETS) -> Projection:
    """The shipped UMAP projection if it was computed from these codebook weights (V, d), else PCA
    of the normalised codebook, computed now."""
    path, meta_path = assets / UMAP_FILE, assets / UMAP_META
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        coords = np.load(path)
        if coords.shape == (len(weights), 2) and meta.get("codebook_sha256") == codebook_fingerprint(weights):
            return Projection(coords.astype(np.float32), "UMAP")
    unit = weights / np.linalg.norm(weights, axis=1, keepdims=True).clip(1e-12)
    return Projection(pca_2d(unit), "PCA; no UMAP projection shipped for this tokenizer")


class SweepFormatError(ValueError):
    """A sweep file does not have the documented layout."""


def sweep_path(method: str, greedy: bool, assets: Path = ASSETS) -> Path:
    return assets / SWEEP_DIR / f"{method}_{'greedy' if greedy else 'sampling'}.json"


def parse_sweep(data: dict) -> list[dict]:
    """Validate {"points": [{delta, k, speedup, class_accuracy, mal, ...}, ...], "config": {}}: the
    required keys as numbers, fid_proxy and logp_gap as numbers or None, intervals as pairs."""
    points = data.get("points") if isinstance(data, dict) else None
    if not isinstance(points, list) or not points:
        raise SweepFormatError("sweep file has no 'points' list")
    parsed = []
    for index, point in enumerate(points):
        missing = [key for key in SWEEP_KEYS if key not in point]
        if missing:
            raise SweepFormatError(f"sweep point {index} lacks {', '.join(missing)}")
        row = {key: (int(point[key]) if key == "k" else float(point[key])) for key in SWEEP_KEYS}
        row |= {key: None if point.get(key) is None else float(point[key]) for key in ("fid_proxy", "logp_gap")}
        row |= {key: tuple(map(float, point[key])) for key in SWEEP_INTERVALS if point.get(key) is not None}
        parsed.append(row)
    return parsed


def load_sweep(method: str, greedy: bool, assets: Path = ASSETS) -> tuple[list[dict], dict] | None:
    """(points, config) of the shipped sweep of `method` in that mode, or None when none is shipped."""
    path = sweep_path(method, greedy, assets)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return parse_sweep(data), dict(data.get("config") or {})


def frontier_path(greedy: bool, assets: Path = ASSETS) -> Path:
    """Where `python -m engine frontier` output for a mode ships: sweeps/frontier_<greedy|sampling>.json."""
    return assets / SWEEP_DIR / f"frontier_{'greedy' if greedy else 'sampling'}.json"


def load_frontier(greedy: bool, assets: Path = ASSETS) -> dict | None:
    """The shipped frontier of that mode (as `python -m engine frontier` writes it), or None when none is
    shipped; a file without its series or vanilla reference is a SweepFormatError."""
    path = frontier_path(greedy, assets)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not data.get("series") or not isinstance(data.get("vanilla"), dict):
        raise SweepFormatError(f"{path} has no 'series' list or no 'vanilla' reference")
    for series in data["series"]:
        knob = series.get("knob")
        if not series.get("points") or any(knob not in p or "speedup" not in p for p in series["points"]):
            raise SweepFormatError(f"{path}: series {series.get('label')!r} lacks points with {knob} and speedup")
    return data
