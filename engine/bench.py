"""The benchmark: methods interleaved image by image in one run, ratios against vanilla.

Speed-up is the median over images of vanilla's wall time divided by the method's on the same class
and seed, so that machine load drifting during the run affects both sides of each ratio alike.
"""
from __future__ import annotations

import statistics
import numpy as np

from engine.config import SamplingConfig
from engine.generate import Generation, generate
from engine.methods import MethodOptions, get_method
from engine.models import ImageModel
from engine.quality import load_classifier, measure

BASELINE = "vanilla"


def image_plan(n_images: int, num_classes: int, seed: int) -> list[tuple[int, int]]:
    """(class id, seed) per image: classes in turn, a new seed per image."""
    return [(i % num_classes, seed + i) for i in range(n_images)]


def run_methods(model: ImageModel, methods: list[str], sampling: SamplingConfig, n_images: int,
                options: MethodOptions, progress=None) -> dict[str, list[Generation]]:
    for name in methods:
        get_method(name)  # fail before any work on an unknown name
    order = [BASELINE] + [m for m in methods if m != BASELINE]
    runs: dict[str, list[Generation]] = {m: [] for m in order}
    for class_id, seed in image_plan(n_images, len(model.class_names), sampling.seed):
        per_image = SamplingConfig(sampling.temperature, sampling.top_k, sampling.top_p,
                                   sampling.cfg_scale, seed)
        for name in order:
            runs[name].append(generate(model, name, per_image, class_id, options))
            if progress is not None:
                progress.update(1)
    return runs


def summarise(model: ImageModel, runs: dict[str, list[Generation]], sampling: SamplingConfig,
              requested: list[str], classifier=None) -> dict[str, dict]:
    classifier = classifier or load_classifier()
    baseline = runs[BASELINE]
    results = {}
    for name in [m for m in runs if m in requested]:
        gens = runs[name]
        tokens = np.stack([g.tokens for g in gens])  # (n, grid^2)
        images = np.concatenate([model.decode_images(_as_tensor(chunk)).numpy()
                                 for chunk in np.array_split(tokens, max(1, len(tokens) // 16))])
        quality = measure(classifier, images, np.array([g.class_id for g in gens]))
        decoding = [t for g in gens for t in g.traces[1:]]
        verdicts = [v for t in decoding for v in t.verdicts]
        entropies = [e for g in gens for t in g.traces for e in t.entropy_bits]
        draft_ms = sum(t.draft_ms for t in decoding) / max(1, len(decoding))
        verify_ms = sum(t.verify_ms for t in decoding) / max(1, len(decoding))
        accept_ms = sum(t.accept_ms for t in decoding) / max(1, len(decoding))
        results[name] = {
            "mal": sum(t.accepted_length for t in decoding) / max(1, len(decoding)),
            "speedup": statistics.median(b.wall_ms / g.wall_ms for b, g in zip(baseline, gens)),
            "ms_per_image": statistics.mean(g.wall_ms for g in gens),
            "target_forwards_per_image": statistics.mean(len(g.traces) for g in gens),
            "mean_accept_prob": (float(np.mean([v.accept_prob for v in verdicts])) if verdicts else None),
            "class_accuracy": quality.class_accuracy,
            "fid_proxy": quality.fid_proxy,
            "mean_entropy_bits": float(np.mean(entropies)),
            "matches_vanilla_greedy": (
                all(np.array_equal(b.tokens, g.tokens) for b, g in zip(baseline, gens))
                if sampling.greedy and name != BASELINE else None),
            "ms_per_step": {"draft": draft_ms, "verify": verify_ms, "accept": accept_ms},
        }
    return results


def _as_tensor(tokens: np.ndarray):
    import torch

    return torch.from_numpy(tokens).long()


def format_table(results: dict[str, dict]) -> str:
    header = (f"{'method':<12}{'speed-up':>9}{'MAL':>7}{'accept p':>10}{'ms/image':>10}"
              f"{'forwards':>10}{'class acc':>10}{'fid_proxy':>10}{'H bits':>8}{'= vanilla':>10}")
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        accept = "-" if r["mean_accept_prob"] is None else f"{r['mean_accept_prob']:.3f}"
        same = {None: "-", True: "yes", False: "NO"}[r["matches_vanilla_greedy"]]
        lines.append(f"{name:<12}{r['speedup']:>8.2f}x{r['mal']:>7.2f}{accept:>10}"
                     f"{r['ms_per_image']:>10.0f}{r['target_forwards_per_image']:>10.1f}"
                     f"{r['class_accuracy']:>10.3f}{r['fid_proxy']:>10.2f}{r['mean_entropy_bits']:>8.2f}"
                     f"{same:>10}")
    return "\n".join(lines)
