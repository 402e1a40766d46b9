"""Image quality of generated images, measured with the shipped classifier."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from scipy import linalg

from engine.core.sampling import combine_cfg
from engine.evaluation.classifier import Classifier, ClassifierConfig
from engine.loading.embedded import ASSETS, CLASSIFIER_FILE
from engine.model.weights import load_module


def load_classifier(path=None) -> Classifier:
    return load_module(path or ASSETS / CLASSIFIER_FILE, ClassifierConfig, Classifier)


def as_input(images_uint8: np.ndarray) -> torch.Tensor:
    """(B, H, W, 3) uint8 -> (B, 3, H, W) float in [-1, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images_uint8)).permute(0, 3, 1, 2).float() / 127.5 - 1


def frechet_distance(mu1: np.ndarray, cov1: np.ndarray, mu2: np.ndarray, cov2: np.ndarray) -> float:
    with warnings.catch_warnings():  # few images give a singular covariance; handled below
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        covmean = linalg.sqrtm(cov1 @ cov2)
    if not np.isfinite(covmean).all():  # near-singular product: regularise as the FID code does
        eps = np.eye(len(mu1)) * 1e-6
        covmean = linalg.sqrtm((cov1 + eps) @ (cov2 + eps))
    covmean = covmean.real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(cov1) + np.trace(cov2) - 2 * np.trace(covmean))


@dataclass
class Quality:
    class_accuracy: float
    fid_proxy: float | None  # None for a single image, which has no covariance
    predicted: np.ndarray  # (B,) class predicted for each image
    features: np.ndarray  # (B, F) float64 classifier features, which fid_proxy compares


@torch.no_grad()
def measure(classifier: Classifier, images_uint8: np.ndarray, class_ids: np.ndarray) -> Quality:
    x = as_input(images_uint8)
    feats = torch.cat([classifier.features(chunk) for chunk in x.split(64)])  # (B, F)
    predicted = classifier.head(feats).argmax(-1).numpy()
    f = feats.double().numpy()
    return Quality(float((predicted == np.asarray(class_ids)).mean()), fid_proxy(classifier, f), predicted, f)


def fid_proxy(classifier: Classifier, features: np.ndarray) -> float | None:
    """The Frechet distance of features (B, F) to the classifier's held-out reference; None below two
    images, which have no covariance."""
    if len(features) < 2:
        return None
    return frechet_distance(features.mean(0), np.cov(features, rowvar=False),
                            classifier.reference_mean.double().numpy(), classifier.reference_cov.double().numpy())


def fid_interval(classifier: Classifier, features: np.ndarray, draws: int = 200,
                 seed: int = 0) -> tuple[float, float] | None:
    """Bootstrap 95 % interval of fid_proxy over the images (B, F): the distance recomputed on `draws`
    resamples with replacement. A resample repeats images, which inflates a Frechet distance (at 40
    images by about half), so the resampled values are first shifted by their mean's excess over the
    estimate (the bootstrap's estimate of that bias)."""
    estimate = fid_proxy(classifier, features)
    if estimate is None:
        return None
    rng = np.random.default_rng(seed)
    values = np.array([fid_proxy(classifier, features[rng.integers(0, len(features), len(features))])
                       for _ in range(draws)], dtype=np.float64)  # (draws,)
    low, high = np.percentile(values - (values.mean() - estimate), [2.5, 97.5])
    return float(low), float(high)


def share_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95 % interval for a share of `hits` out of `n` (class accuracy over n images)."""
    if n == 0:
        return 0.0, 1.0
    share = hits / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def mean_interval(values: np.ndarray, z: float = 1.96) -> tuple[float, float]:
    """Normal 95 % interval of a mean (paired differences over images); (mean, mean) for one value."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, mean
    half = z * float(np.std(values, ddof=1)) / np.sqrt(len(values))
    return mean - half, mean + half


LOW_P = 1e-4  # a token the target gives less than this is one it would almost never draw itself


@torch.no_grad()
def target_token_logp(target, tokens: np.ndarray, class_ids: np.ndarray, cfg_scale: float,
                      batch: int = 16) -> np.ndarray:
    """Per token (n, N), the target's log-probability of `tokens` (n, N), teacher-forced under the
    CFG-guided distribution at temperature 1: how likely the model finds what a method drew."""
    scores = []
    for start in range(0, len(tokens), batch):
        t = torch.from_numpy(tokens[start:start + batch]).long()  # (b, N)
        labels = torch.from_numpy(np.asarray(class_ids[start:start + batch])).long()  # (b,)
        rows = torch.stack([target.training_logits(labels, t).float(),
                            target.training_logits(torch.full_like(labels, target.null_class), t).float()])
        guided = combine_cfg(rows, cfg_scale)  # (b, N, V)
        scores.append(guided.log_softmax(-1).gather(-1, t[..., None]).squeeze(-1))  # (b, N)
    return torch.cat(scores).numpy()


def target_logp(token_logp: np.ndarray) -> np.ndarray:
    """Per image (n,), the mean log-probability per token of `target_token_logp`'s (n, N).

    A lossless method's images score like vanilla's on average; a relaxed rule that keeps less likely
    tokens scores lower, even where a classifier still recognises the picture."""
    return token_logp.mean(-1)


def low_p_shares(token_logp: np.ndarray, threshold: float = LOW_P) -> np.ndarray:
    """Per image (n,), the share of its tokens to which the target gives probability below
    `threshold`: the odd-coloured specks a relaxed rule lets in, which vanilla rarely draws."""
    return (token_logp < np.log(threshold)).mean(-1)


# The quality measures a frontier chart can put against speed-up: key, interval key, axis title.
QUALITY_MEASURES = (("class_accuracy", "class_accuracy_ci", "class accuracy"),
                    ("fid_proxy", "fid_proxy_ci", "fid_proxy (lower is better)"),
                    ("low_p_share", "low_p_share_ci", "share of tokens with p < 1e-4"),
                    ("logp_gap", "logp_gap_ci", "log p per token vs vanilla"))


def inside_vanilla(point: dict, vanilla: dict) -> bool:
    """Whether a point's quality lies inside vanilla's 95 % intervals on class accuracy, fid_proxy
    and the low-p share (each measure the point and vanilla both have)."""
    for key, interval, _ in QUALITY_MEASURES[:3]:
        if point.get(key) is None or vanilla.get(interval) is None:
            continue
        low, high = vanilla[interval]
        if not low <= point[key] <= high:
            return False
    return True


def reference_of(frontier: dict, series: dict) -> dict:
    """The vanilla a series is judged against: its own where it ran on another CPU (whose vanilla draws
    other samples from the same seeds, so other quality), else the frontier's."""
    return series.get("vanilla") or frontier["vanilla"]


def fastest_inside_vanilla(frontier: dict) -> tuple[dict, dict] | None:
    """(series, point) of the largest speed-up whose quality stays inside its vanilla's intervals."""
    candidates = [(s, p) for s in frontier["series"] for p in s["points"]
                  if inside_vanilla(p, reference_of(frontier, s))]
    return max(candidates, key=lambda pair: pair[1]["speedup"], default=None)
