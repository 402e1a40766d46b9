"""Small precomputed results shipped in assets/: the codebook projection and the delta/k sweep."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.embedded import ASSETS

UMAP_FILE = "codebook_umap.npy"
UMAP_META = "codebook_umap.json"  # the codebook fingerprint the projection was computed from
SWEEP_FILE = "sweep.json"
SWEEP_KEYS = ("delta", "k", "speedup", "class_accuracy", "fid_proxy", "mal")


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
    """sweep.json does not have the documented layout."""


def parse_sweep(data: dict) -> list[dict]:
    """Validate {"points": [{delta, k, speedup, class_accuracy, fid_proxy, mal}, ...], "config": {}}."""
    points = data.get("points") if isinstance(data, dict) else None
    if not isinstance(points, list) or not points:
        raise SweepFormatError("sweep file has no 'points' list")
    parsed = []
    for index, point in enumerate(points):
        missing = [key for key in SWEEP_KEYS if key not in point]
        if missing:
            raise SweepFormatError(f"sweep point {index} lacks {', '.join(missing)}")
        parsed.append({key: (int(point[key]) if key == "k" else float(point[key])) for key in SWEEP_KEYS})
    return parsed


def load_sweep(assets: Path = ASSETS) -> tuple[list[dict], dict] | None:
    """(points, config) from the shipped sweep, or None when no sweep is shipped."""
    path = assets / SWEEP_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return parse_sweep(data), dict(data.get("config") or {})
