"""The embedded class-conditional dataset: eight emoji categories in six artists' styles.

A class is a category with many different members (every emoji of its Unicode subcategories, in
every style, skin tones included), so the model has to learn what a category looks like rather than
one picture, and its next-token distributions stay flat inside objects. The eight are the categories
whose members look alike: on sixteen (adding bird, sea animal, fruit & veg, food, drink, vehicle,
weather and clothing) a probe trained on real pictures recognised unseen emoji of those eight
0.80-0.98 of the time and of the other eight 0.00-0.63, so a sample of them could not be recognised
however well it was drawn (docs/model.md, "The classes").
One emoji in eight, chosen by a hash of its code points, is held out in all its styles and tones.
Each draw places a picture on a white 64 x 64 canvas at a random scale and offset.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from engine.data.emoji_sources import PICTURE_SIZE, Picture, load_pictures

IMAGE_SIZE = 64
HELD_OUT_ONE_IN = 8
MIN_SCALE = 0.72  # smallest picture side as a fraction of the canvas


@dataclass(frozen=True)
class EmojiClass:
    name: str
    subcategories: tuple[str, ...]


CLASSES: tuple[EmojiClass, ...] = (
    EmojiClass("smiley", ("face-smiling", "face-affection", "face-tongue", "face-hand",
                          "face-neutral-skeptical", "face-sleepy", "face-unwell", "face-hat", "face-glasses",
                          "face-concerned", "face-negative")),
    EmojiClass("heart", ("heart",)),
    EmojiClass("flag", ("country-flag", "flag", "subdivision-flag")),
    EmojiClass("hand", ("hand-fingers-open", "hand-fingers-partial", "hand-single-finger",
                        "hand-fingers-closed", "hands", "hand-prop")),
    EmojiClass("mammal", ("animal-mammal",)),
    EmojiClass("plant", ("plant-flower", "plant-other")),
    EmojiClass("building", ("place-building", "place-religious")),
    EmojiClass("clock", ("time",)),
)

CLASS_NAMES: tuple[str, ...] = tuple(c.name for c in CLASSES)
CLASS_OF_SUBCATEGORY = {sub: i for i, c in enumerate(CLASSES) for sub in c.subcategories}
SPLITS = ("train", "held_out")


def split_of(base: str) -> str:
    """Which split an emoji (by its base code points) belongs to, the same on every machine."""
    return "held_out" if zlib.crc32(base.encode()) % HELD_OUT_ONE_IN == 0 else "train"


def place(picture: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(64, 64, 4) RGBA -> (64, 64, 3) uint8: the picture scaled and shifted on a white canvas."""
    side = int(round(IMAGE_SIZE * rng.uniform(MIN_SCALE, 1.0)))
    image = Image.fromarray(picture, "RGBA")
    if side != PICTURE_SIZE:
        image = image.resize((side, side), Image.Resampling.LANCZOS)
    canvas = Image.new("RGBA", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255, 255))
    top, left = (int(v) for v in rng.integers(0, IMAGE_SIZE - side + 1, size=2))
    canvas.alpha_composite(image, (left, top))
    return np.asarray(canvas.convert("RGB"))


def split_pictures(cache: Path, split: str) -> tuple[list[Picture], np.ndarray]:
    """The pictures of one split and their class ids (P,)."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is unknown; allowed: {', '.join(SPLITS)}")
    pictures = [p for p in load_pictures(cache, set(CLASS_OF_SUBCATEGORY)) if split_of(p.base) == split]
    return pictures, np.array([CLASS_OF_SUBCATEGORY[p.subcategory] for p in pictures])


def build_dataset(cache: Path, split: str, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """About `draws` placed pictures (N, 64, 64, 3) uint8 and their labels (N,) int64.

    Classes get draws in proportion to the square root of their number of pictures (LlamaGen's
    ImageNet is near balanced; ours runs from a few dozen birds to hundreds of hands), spread evenly
    over each class's pictures.
    """
    pictures, classes = split_pictures(cache, split)
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    sizes = np.bincount(classes, minlength=len(CLASSES))  # (C,)
    share = np.sqrt(sizes) / np.sqrt(sizes).sum()
    images, labels = [], []
    for class_id in np.flatnonzero(sizes):
        members = rng.permutation(np.flatnonzero(classes == class_id))
        for n in range(max(1, int(round(draws * share[class_id])))):
            images.append(place(pictures[members[n % len(members)]].rgba, rng))
            labels.append(class_id)
    return np.stack(images), np.array(labels, dtype=np.int64)


def to_tensor_range(images: np.ndarray):
    """uint8 (N, H, W, 3) -> float tensor (N, 3, H, W) in [-1, 1], the VQ model's input range."""
    import torch

    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
