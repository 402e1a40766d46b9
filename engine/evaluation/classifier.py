"""The quality probe: a small CNN trained on the embedded dataset.

Inception weights cannot ship here, so generated images are judged by this classifier: the share
recognised as the requested class, and a Frechet distance between its pooled features of generated
images and of held-out real ones (kept in the same file as `reference_mean` / `reference_cov`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ClassifierConfig:
    num_classes: int
    widths: tuple[int, ...] = (64, 128, 192, 256)

    @property
    def feature_dim(self) -> int:
        return self.widths[-1]


class Classifier(nn.Module):
    # Buffers: the features' mean (F,) and covariance (F, F) over held-out training images
    reference_mean: torch.Tensor
    reference_cov: torch.Tensor

    def __init__(self, cfg: ClassifierConfig):
        super().__init__()
        self.cfg = cfg
        layers: list[nn.Module] = []
        c_in = 3
        for width in cfg.widths:
            layers += [nn.Conv2d(c_in, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.GELU(),
                       nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.GELU()]
            c_in = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cfg.feature_dim, cfg.num_classes)
        self.register_buffer("reference_mean", torch.zeros(cfg.feature_dim))
        self.register_buffer("reference_cov", torch.eye(cfg.feature_dim))

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) in [-1, 1] -> pooled features (B, F)."""
        return self.body(images).mean(dim=(2, 3))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))  # (B, classes)


def augment(images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Flips, small shifts and blur, so that the probe judges content rather than pixel detail."""
    flip = torch.rand(images.shape[0], generator=gen) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    dy, dx = torch.randint(-4, 5, (2,), generator=gen).tolist()
    images = images.roll((dy, dx), dims=(2, 3))
    if torch.rand(1, generator=gen).item() < 0.3:
        images = F.avg_pool2d(images, 3, stride=1, padding=1, count_include_pad=False)
    return images
