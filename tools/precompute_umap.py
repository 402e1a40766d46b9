"""Project the shipped tokenizer's VQ codebook to 2-D with UMAP, once: `python -m tools.precompute_umap`.

The app only reads the result (assets/codebook_umap.npy with a fingerprint of the codebook in
assets/codebook_umap.json), because importing umap-learn and fitting take tens of seconds. Rerun it
whenever the tokenizer is retrained; until then the app falls back to PCA.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from app.backend.shipped import UMAP_FILE, UMAP_META, codebook_fingerprint
from engine.loading.embedded import ASSETS, load_embedded_tokenizer

log = logging.getLogger("tools.precompute_umap")


def project(codebook: np.ndarray, seed: int, n_neighbors: int, min_dist: float) -> np.ndarray:
    import umap  # imported here: slow to import and only this script needs it

    # Codes are unit vectors and LANTERN's neighbours are by l2 distance: use the same metric.
    reducer = umap.UMAP(n_components=2, n_neighbors=n_neighbors, min_dist=min_dist, metric="euclidean",
                        random_state=seed)
    return reducer.fit_transform(codebook).astype(np.float32)  # (V, 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, default=ASSETS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-neighbors", type=int, default=15)
    parser.add_argument("--min-dist", type=float, default=0.1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")

    quantize = load_embedded_tokenizer(args.assets).quantize
    weights = quantize.embedding.weight.detach().float().numpy()  # (V, d) as stored
    codebook = quantize.codebook().detach().float().numpy()  # (V, d) unit vectors, as the model uses
    log.info("fitting UMAP on %d codes of dimension %d", *codebook.shape)
    coords = project(codebook, args.seed, args.n_neighbors, args.min_dist)
    np.save(args.assets / UMAP_FILE, coords)
    meta = {"codebook_sha256": codebook_fingerprint(weights), "random_state": args.seed,
            "n_neighbors": args.n_neighbors, "min_dist": args.min_dist, "metric": "euclidean"}
    (args.assets / UMAP_META).write_text(json.dumps(meta, indent=2) + "\n")
    log.info("wrote %s and %s", args.assets / UMAP_FILE, args.assets / UMAP_META)


if __name__ == "__main__":
    main()
