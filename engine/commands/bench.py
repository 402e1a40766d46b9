"""The benchmark: methods interleaved image by image in one run, ratios against vanilla.

Speed-up is engine.evaluation.speed's: the median over images of vanilla's wall time divided by the method's on
the same class and seed. The whole interleaved run can be repeated: each repeat gives one speed-up per
method, and the report is their median with the lowest and highest, since one run's timing noise can
move it by several percent.
Tokens, and so MAL and quality, depend only on the seeds: they come from the first repeat, and every
other repeat is checked to produce the same tokens.
"""
from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from engine.core.config import SamplingConfig, check_count
from engine.core.trace import mean_accepted_length
from engine.evaluation.quality import (
    fid_interval,
    load_classifier,
    low_p_shares,
    mean_interval,
    measure,
    share_interval,
    target_logp,
    target_token_logp,
)
from engine.evaluation.speed import BASELINE, median_speedup, pass_split, undrafted_speedup
from engine.generation import Generation, generate
from engine.loading.image_model import ImageModel
from engine.methods import MethodOptions, get_method


def image_plan(n_images: int, num_classes: int, seed: int) -> list[tuple[int, int]]:
    """(class id, seed) per image: classes in turn, a new seed per image."""
    return [(i % num_classes, seed + i) for i in range(n_images)]


def run_methods(model: ImageModel, methods: list[str], sampling: SamplingConfig, n_images: int,
                options: MethodOptions, progress=None) -> dict[str, list[Generation]]:
    for name in methods:
        get_method(name)  # fail before any work on an unknown name
    order = [BASELINE] + [m for m in methods if m != BASELINE]
    runs: dict[str, list[Generation]] = {m: [] for m in order}
    for image in image_plan(n_images, len(model.class_names), sampling.seed):
        for name in order:
            runs[name].append(decode_image(model, name, sampling, image, options, progress))
    return runs


def decode_image(model: ImageModel, method: str, sampling: SamplingConfig, image: tuple[int, int],
                 options: MethodOptions, progress=None) -> Generation:
    """One image of an image_plan, (class id, seed), by `method`; `progress` (a tqdm bar) counts it."""
    class_id, seed = image
    generation = generate(model, method, dataclasses.replace(sampling, seed=seed), class_id, options)
    if progress is not None:
        progress.update(1)
    return generation


def run_repeats(model: ImageModel, methods: list[str], sampling: SamplingConfig, n_images: int,
                options: MethodOptions, repeats: int, progress=None) -> list[dict[str, list[Generation]]]:
    """The whole interleaved run `repeats` times over the same images and seeds."""
    check_count("repeats", repeats)
    return [run_methods(model, methods, sampling, n_images, options, progress) for _ in range(repeats)]


def speedup(baseline: list[Generation], gens: list[Generation]) -> float:
    """Median over images of vanilla's wall time over the method's, in one repeat."""
    return median_speedup((b.wall_ms, g.wall_ms) for b, g in zip(baseline, gens))


def step_costs(gens: list[Generation]) -> dict[str, float]:
    """engine.evaluation.speed's split of a pass over every pass after the prefill of `gens`."""
    return pass_split([t for g in gens for t in g.traces[1:]], sum(g.wall_ms for g in gens))


def _pooled_step_costs(repeats: list[dict[str, list[Generation]]], name: str) -> dict[str, float]:
    """step_costs of method `name` over every repeat's images."""
    return step_costs([g for runs in repeats for g in runs[name]])


def _timing(repeats: list[dict[str, list[Generation]]], name: str) -> dict:
    """Speed-up over repeats (median, min, max) and the step cost split pooled over all repeats."""
    per_repeat = [speedup(runs[BASELINE], runs[name]) for runs in repeats]
    first = repeats[0][name]
    return {
        "speedup": statistics.median(per_repeat),
        "speedup_min": min(per_repeat),
        "speedup_max": max(per_repeat),
        "speedup_per_repeat": per_repeat,
        "ms_per_image": statistics.median(statistics.mean(g.wall_ms for g in runs[name]) for runs in repeats),
        "ms_per_step": _pooled_step_costs(repeats, name),
        "repeats": len(repeats),
        "repeats_agree": all(np.array_equal(a.tokens, b.tokens)
                             for runs in repeats[1:] for a, b in zip(first, runs[name])),
    }


def target_scores(model: ImageModel, gens: list[Generation], sampling: SamplingConfig) -> tuple[np.ndarray, np.ndarray]:
    """The target's mean log p per token and share of tokens below LOW_P, image by image: (n,) each."""
    token_logp = target_token_logp(model.target, np.stack([g.tokens for g in gens]),
                                   np.array([g.class_id for g in gens]), sampling.cfg_scale)  # (n, N)
    return target_logp(token_logp), low_p_shares(token_logp)


def summarise(model: ImageModel, runs: dict[str, list[Generation]], sampling: SamplingConfig,
              requested: list[str], classifier=None,
              repeats: list[dict[str, list[Generation]]] | None = None, progress=None,
              scored: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> dict[str, dict]:
    """Per method: MAL, acceptance and quality from `runs`; timings over `repeats` (all the
    repeats, `runs` among them; just `runs` when not given). `scored` holds target_scores already
    computed for some of `runs` (a frontier scores vanilla's images once). `progress` (a tqdm bar)
    counts the images scored: once by the target, once by the classifier for each requested method."""
    classifier = classifier or load_classifier()
    repeats = repeats or [runs]
    baseline = runs[BASELINE]
    measured = [m for m in runs if m in requested]
    if progress is not None:
        progress.reset(total=sum(len(gens) for gens in runs.values()) + sum(len(runs[m]) for m in measured))
    logp, low_p = {}, {}
    for name, gens in runs.items():
        logp[name], low_p[name] = (scored or {}).get(name) or target_scores(model, gens, sampling)
        if progress is not None:
            progress.update(len(gens))
    one_token_ms = _pooled_step_costs(repeats, BASELINE)["wall"]  # vanilla's pass, as its row reports it
    results = {}
    for name in measured:
        gens = runs[name]
        tokens = np.stack([g.tokens for g in gens])  # (n, grid^2)
        images = np.concatenate([model.decode_images(_as_tensor(chunk)).numpy()
                                 for chunk in np.array_split(tokens, max(1, len(tokens) // 16))])
        class_ids = np.array([g.class_id for g in gens])  # (n,)
        quality = measure(classifier, images, class_ids)
        decoding = [t for g in gens for t in g.traces[1:]]
        verdicts = [v for t in decoding for v in t.verdicts]
        entropies = [e for g in gens for t in g.traces for e in t.entropy_bits]
        mal = mean_accepted_length(decoding)
        timing = _timing(repeats, name)
        results[name] = {
            "mal": mal,
            **timing,
            "speedup_per_mal": timing["speedup"] / mal,
            "undrafted_speedup": undrafted_speedup(mal, one_token_ms, timing["ms_per_step"]),
            "target_forwards_per_image": statistics.mean(len(g.traces) for g in gens),
            "mean_accept_prob": (float(np.mean([v.accept_prob for v in verdicts])) if verdicts else None),
            "class_accuracy": quality.class_accuracy,
            "class_accuracy_ci": share_interval(int((quality.predicted == class_ids).sum()), len(gens)),
            "fid_proxy": quality.fid_proxy,
            "fid_proxy_ci": fid_interval(classifier, quality.features),
            # The target's log-probability per token of the method's images minus vanilla's, image by
            # image (same class and seed): the cost of a relaxed rule, which a classifier can miss.
            "logp": float(logp[name].mean()),
            "logp_gap": float((logp[name] - logp[BASELINE]).mean()),
            "logp_gap_ci": mean_interval(logp[name] - logp[BASELINE]),
            # Specks: the share of tokens the target gives p < LOW_P, with a normal interval over the
            # per-image shares (tokens of one image are not independent draws; images are).
            "low_p_share": float(low_p[name].mean()),
            "low_p_share_ci": mean_interval(low_p[name]),
            "mean_entropy_bits": float(np.mean(entropies)),
            "matches_vanilla_greedy": (
                all(np.array_equal(b.tokens, g.tokens) for b, g in zip(baseline, gens))
                if sampling.greedy and name != BASELINE else None),
        }
        if progress is not None:
            progress.update(len(gens))
    return results


def _interval(bounds, digits: int) -> str:
    return f"[{bounds[0]:.{digits}f},{bounds[1]:.{digits}f}]"


def _as_tensor(tokens: np.ndarray):
    import torch

    return torch.from_numpy(tokens).long()


def format_table(results: dict[str, dict]) -> str:
    """Speed-up as the median over repeats [lowest-highest]; the speed-up with drafting free
    (no-draft); ms per step split into draft / verify / accept / other."""
    width = max([len("method"), *map(len, results)]) + 2  # the method names' column
    header = (f"{'method':<{width}}{'speed-up':>9}{'[min-max]':>13}{'MAL':>7}{'sp/MAL':>8}{'no-draft':>9}"
              f"{'accept p':>10}"
              f"{'ms/image':>10}{'ms/step':>9}{'draft':>7}{'verify':>7}{'accept':>7}{'other':>7}"
              f"{'forwards':>10}{'class acc':>10}{'[95% CI]':>13}{'fid_proxy':>10}{'[95% CI]':>15}"
              f"{'logp gap':>9}{'[95% CI]':>16}{'low p':>7}{'[95% CI]':>15}"
              f"{'H bits':>8}{'= vanilla':>10}")
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        accept = "-" if r["mean_accept_prob"] is None else f"{r['mean_accept_prob']:.3f}"
        fid = "-" if r["fid_proxy"] is None else f"{r['fid_proxy']:.2f}"
        fid_ci = "-" if r["fid_proxy_ci"] is None else _interval(r["fid_proxy_ci"], 2)
        same = {None: "-", True: "yes", False: "NO"}[r["matches_vanilla_greedy"]]
        spread = f"[{r['speedup_min']:.2f}-{r['speedup_max']:.2f}]"
        step = r["ms_per_step"]
        lines.append(f"{name:<{width}}{r['speedup']:>8.2f}x{spread:>13}{r['mal']:>7.2f}{r['speedup_per_mal']:>8.2f}"
                     f"{r['undrafted_speedup']:>8.2f}x{accept:>10}{r['ms_per_image']:>10.0f}{step['wall']:>9.2f}{step['draft']:>7.2f}"
                     f"{step['verify']:>7.2f}{step['accept']:>7.2f}{step['other']:>7.2f}"
                     f"{r['target_forwards_per_image']:>10.1f}{r['class_accuracy']:>10.3f}"
                     f"{_interval(r['class_accuracy_ci'], 2):>13}{fid:>10}{fid_ci:>15}{r['logp_gap']:>9.3f}"
                     f"{_interval(r['logp_gap_ci'], 3):>16}{r['low_p_share']:>7.3f}"
                     f"{_interval(r['low_p_share_ci'], 3):>15}"
                     f"{r['mean_entropy_bits']:>8.2f}{same:>10}")
    return "\n".join(lines)
