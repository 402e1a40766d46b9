"""The embedded class-conditional dataset, built offline and deterministically.

Each class is a family of random crops of one photograph or texture that scikit-image ships, at
random scales and offsets, flipped and relit. Crops of real photographs keep natural texture, so
neighbouring image tokens are ambiguous the way they are in real images.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image

IMAGE_SIZE = 64


def _tinted(gray: np.ndarray, dark: tuple[int, int, int], light: tuple[int, int, int]) -> np.ndarray:
    """Map a grayscale texture onto a colour ramp from `dark` to `light`."""
    t = gray.astype(np.float32)[..., None] / 255.0  # (H, W, 1)
    ramp = np.asarray(dark, np.float32) * (1 - t) + np.asarray(light, np.float32) * t  # (H, W, 3)
    return ramp.clip(0, 255).astype(np.uint8)


def _rgb(image: np.ndarray) -> np.ndarray:
    return image[..., :3] if image.ndim == 3 else np.repeat(image[..., None], 3, axis=-1)


@dataclass(frozen=True)
class ImageClass:
    name: str
    source: Callable[[], np.ndarray]  # returns (H, W, 3) uint8
    min_crop: float  # crop side as a fraction of the shorter image side
    max_crop: float


def _skimage(name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from skimage import data

        return _rgb(getattr(data, name)())

    return load


def _tinted_skimage(name: str, dark, light) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from skimage import data

        return _tinted(getattr(data, name)(), dark, light)

    return load


CLASSES: tuple[ImageClass, ...] = (
    ImageClass("brick wall", _tinted_skimage("brick", (70, 25, 15), (225, 140, 105)), 0.2, 0.5),
    ImageClass("grass", _tinted_skimage("grass", (10, 45, 5), (170, 225, 90)), 0.2, 0.5),
    ImageClass("gravel", _tinted_skimage("gravel", (40, 35, 30), (235, 220, 190)), 0.2, 0.5),
    ImageClass("cat", _skimage("chelsea"), 0.35, 0.8),
    ImageClass("coffee cup", _skimage("coffee"), 0.35, 0.8),
    ImageClass("coins", _tinted_skimage("coins", (30, 20, 5), (250, 215, 120)), 0.3, 0.7),
    ImageClass("moon surface", _skimage("moon"), 0.2, 0.5),
    ImageClass("deep space", _skimage("hubble_deep_field"), 0.15, 0.4),
    ImageClass("stained tissue", _skimage("immunohistochemistry"), 0.2, 0.5),
    ImageClass("retina", _skimage("retina"), 0.25, 0.6),
    ImageClass("rocket launch", _skimage("rocket"), 0.35, 0.8),
    ImageClass("astronaut", _skimage("astronaut"), 0.3, 0.7),
)

CLASS_NAMES: tuple[str, ...] = tuple(c.name for c in CLASSES)


def _crop(source: np.ndarray, cls: ImageClass, rng: np.random.Generator) -> np.ndarray:
    h, w = source.shape[:2]
    side = int(min(h, w) * rng.uniform(cls.min_crop, cls.max_crop))
    top = int(rng.integers(0, h - side + 1))
    left = int(rng.integers(0, w - side + 1))
    patch = Image.fromarray(source[top : top + side, left : left + side])
    patch = patch.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC)
    out = np.asarray(patch, dtype=np.float32)  # (64, 64, 3)
    if rng.random() < 0.5:
        out = out[:, ::-1]
    gain, shift = rng.uniform(0.85, 1.15), rng.uniform(-12, 12)  # relighting
    return (out * gain + shift).clip(0, 255).astype(np.uint8)


def make_images(class_id: int, count: int, seed: int) -> np.ndarray:
    """(count, 64, 64, 3) uint8 crops of class `class_id`; the same seed gives the same images."""
    cls = CLASSES[class_id]
    source = cls.source()
    rng = np.random.default_rng([seed, class_id])
    return np.stack([_crop(source, cls, rng) for _ in range(count)])


def build_dataset(per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 64, 64, 3) uint8 and labels (N,) int64, classes in order."""
    images = [make_images(c, per_class, seed) for c in range(len(CLASSES))]
    labels = np.repeat(np.arange(len(CLASSES)), per_class)
    return np.concatenate(images), labels


def to_tensor_range(images: np.ndarray):
    """uint8 (N, H, W, 3) -> float tensor (N, 3, H, W) in [-1, 1], the VQ model's input range."""
    import torch

    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
