"""The emoji pictures the embedded model learns from: three artists' sets, fetched from npm and pinned.

Each set is an npm package at a fixed version whose tarball must match its SHA-256 before anything is
read from it. Twemoji and Noto ship 64 x 64 PNGs named by code point; Fluent Emoji Flat ships SVG
bodies named by slug, with a code-point index, drawn here at 64 x 64 with CairoSVG. Every picture is
tagged with the Unicode subcategory of its emoji (from the Twemoji package's `emoji.json`) and with
its base emoji, so that skin-tone variants and the three styles of one emoji stay on the same side
of the held-out split.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

log = logging.getLogger("engine.data.emoji_sources")

PICTURE_SIZE = 64


@dataclass(frozen=True)
class Package:
    style: str  # the artists' set, as credited in README
    name: str
    version: str
    sha256: str
    licence: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def tarball(self) -> str:  # npm's file name for a packed (possibly scoped) package
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"


TWEMOJI = Package("Twemoji", "emoji-datasource-twitter", "16.0.0",
                  "f64a530c63bca463bd8317fdc4615ce63a53a0c65018e4ce2d848aaba7a28877", "CC-BY 4.0")
NOTO = Package("Noto Emoji", "emoji-datasource-google", "16.0.0",
               "fb5fd131b362aab7a55542d2a147a79708cce0a8b1c1bbacd470172708b5c438", "Apache-2.0")
FLUENT = Package("Fluent Emoji Flat", "@iconify-json/fluent-emoji-flat", "1.2.6",
                 "7d064769dee690815f823bc5bcc511d957198caf9f5edd8dd9c1aa48a6aeb175", "MIT")
PACKAGES = (TWEMOJI, NOTO, FLUENT)


@dataclass(frozen=True)
class Picture:
    style: str
    base: str  # code points of the base emoji (no skin tone, no variation selector), e.g. "1f385"
    subcategory: str  # Unicode emoji subcategory, e.g. "animal-mammal"
    rgba: np.ndarray  # (64, 64, 4) uint8


class SourceError(RuntimeError):
    """A package could not be fetched, or its tarball is not the pinned one."""


def fetch(package: Package, cache: Path) -> tarfile.TarFile:
    """The package's tarball, packed by npm into `cache` once and checked against its SHA-256."""
    path = cache / package.tarball
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        log.info("fetching %s with npm pack", package.spec)
        done = subprocess.run(["npm", "pack", package.spec, "--pack-destination", str(cache)],
                              capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            raise SourceError(f"npm pack {package.spec} failed: {done.stderr.strip()[-300:]}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != package.sha256:
        raise SourceError(f"{path} has SHA-256 {digest}; {package.spec} is pinned at {package.sha256}")
    return tarfile.open(path, "r:gz")


def _key(code_points: str) -> str:
    """One spelling of an emoji's code points: lower case, no variation selector FE0F."""
    return "-".join(p for p in code_points.lower().split("-") if p != "fe0f")


def _catalogue(twemoji: tarfile.TarFile) -> dict[str, tuple[str, str, str]]:
    """Every emoji and skin-tone variant: key -> (base key, subcategory, image file name)."""
    entries = json.load(twemoji.extractfile("package/emoji.json"))  # type: ignore[arg-type]
    catalogue = {}
    for entry in entries:
        base = _key(entry["unified"])
        variants = [entry] + list((entry.get("skin_variations") or {}).values())
        for variant in variants:
            catalogue[_key(variant["unified"])] = (base, entry["subcategory"], variant["image"])
    return catalogue


def _png(data: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(data)).convert("RGBA")
    if image.size != (PICTURE_SIZE, PICTURE_SIZE):
        image = image.resize((PICTURE_SIZE, PICTURE_SIZE), Image.Resampling.LANCZOS)
    return np.asarray(image)  # (64, 64, 4)


def _png_pictures(package: Package, tar: tarfile.TarFile, folder: str,
                  catalogue: dict[str, tuple[str, str, str]], wanted: set[str]) -> Iterator[Picture]:
    by_file = {image: (base, sub) for base, sub, image in catalogue.values() if sub in wanted}
    for member in tar.getmembers():
        name = member.name.rsplit("/", 1)[-1]
        if member.name.startswith(f"package/img/{folder}/64/") and name in by_file:
            base, sub = by_file[name]
            yield Picture(package.style, base, sub, _png(tar.extractfile(member).read()))  # type: ignore[union-attr]


def _fluent_pictures(tar: tarfile.TarFile, catalogue: dict[str, tuple[str, str, str]],
                     wanted: set[str]) -> Iterator[Picture]:
    import cairosvg  # only the dataset build draws SVG

    icons = json.load(tar.extractfile("package/icons.json"))  # type: ignore[arg-type]
    chars = json.load(tar.extractfile("package/chars.json"))  # type: ignore[arg-type]
    size = icons.get("width", 32)
    for code_points, slug in chars.items():
        found = catalogue.get(_key(code_points))
        if found is None or found[1] not in wanted or slug not in icons["icons"]:
            continue
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {size} {size}" '
               f'width="{PICTURE_SIZE}" height="{PICTURE_SIZE}">{icons["icons"][slug]["body"]}</svg>')
        yield Picture(FLUENT.style, found[0], found[1], _png(cairosvg.svg2png(bytestring=svg.encode())))


def load_pictures(cache: Path, subcategories: set[str]) -> list[Picture]:
    """Every picture of the three sets whose emoji belongs to one of `subcategories`."""
    twemoji = fetch(TWEMOJI, cache)
    catalogue = _catalogue(twemoji)
    pictures = list(_png_pictures(TWEMOJI, twemoji, "twitter", catalogue, subcategories))
    pictures += _png_pictures(NOTO, fetch(NOTO, cache), "google", catalogue, subcategories)
    pictures += _fluent_pictures(fetch(FLUENT, cache), catalogue, subcategories)
    return pictures
