"""The emoji pictures the embedded model learns from: six artists' sets, fetched from npm and pinned.

Each set is an npm package at a fixed version whose tarball must match its SHA-256 before anything is
read from it. Twemoji and Noto ship 64 x 64 PNGs named by code point. The Iconify sets (Fluent flat,
Fluent colour, Emoji One, Noto's first design) ship SVG bodies named by slug, drawn here at 64 x 64
with CairoSVG; Fluent flat's code-point index names the slugs, which the Iconify sets share (skin
tones spelt "-dark" or "-dark-skin-tone"). Every picture is tagged with the Unicode subcategory of its
emoji (from the Twemoji package's `emoji.json`) and with its base emoji, so that skin-tone variants
and every style of one emoji stay on the same side of the held-out split.
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
FLUENT_COLOUR = Package("Fluent Emoji", "@iconify-json/fluent-emoji", "1.2.7",
                        "8044210dbf11e016d4de85f15d01a243423bd832457e7e2491df1b751c0e272b", "MIT")
EMOJI_ONE = Package("Emoji One", "@iconify-json/emojione", "1.2.3",
                    "26a14f44284407e8bcde91799388dca2bfd91dbcd55a97f425524a1c5b73610e", "CC-BY 4.0")
NOTO_V1 = Package("Noto Emoji (v1)", "@iconify-json/noto-v1", "1.2.5",
                  "2bf62c26c2c2884aa99e90aec942cdaee17a5921f05690694f4978ad4b017c37", "Apache-2.0")
ICONIFY_SETS = (FLUENT, FLUENT_COLOUR, EMOJI_ONE, NOTO_V1)  # SVG sets named by Fluent flat's slugs
PACKAGES = (TWEMOJI, NOTO, *ICONIFY_SETS)
IMAGE_SETS = tuple(package.style for package in PACKAGES)  # what a trained target's metadata names


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


def _slugs(fluent_flat: tarfile.TarFile) -> dict[str, str]:
    """Emoji key -> Iconify slug, from Fluent flat's code-point index."""
    chars = json.load(fluent_flat.extractfile("package/chars.json"))  # type: ignore[arg-type]
    return {_key(code_points): slug for code_points, slug in chars.items()}


def svg_bodies(tar: tarfile.TarFile) -> dict[str, tuple[str, int, int]]:
    """Every drawable name of an Iconify set -> (SVG body, width, height); plain aliases included,
    flipped or rotated ones left out (they would need a transform)."""
    icons = json.load(tar.extractfile("package/icons.json"))  # type: ignore[arg-type]
    size = (icons.get("width", 16), icons.get("height", 16))
    bodies = {name: (icon["body"], icon.get("width", size[0]), icon.get("height", size[1]))
              for name, icon in icons["icons"].items()}
    for name, alias in icons.get("aliases", {}).items():
        if set(alias) == {"parent"} and alias["parent"] in bodies:
            bodies[name] = bodies[alias["parent"]]
    return bodies


def svg_name(slug: str, bodies: dict[str, tuple[str, int, int]]) -> str | None:
    """The set's name for a Fluent flat slug: the same, or with "-skin-tone" after a tone."""
    return next((name for name in (slug, f"{slug}-skin-tone") if name in bodies), None)


def _svg_pictures(package: Package, tar: tarfile.TarFile, slugs: dict[str, str],
                  catalogue: dict[str, tuple[str, str, str]], wanted: set[str]) -> Iterator[Picture]:
    import cairosvg  # only the dataset build draws SVG

    bodies = svg_bodies(tar)
    for key, slug in slugs.items():
        found = catalogue.get(key)
        name = svg_name(slug, bodies)
        if found is None or found[1] not in wanted or name is None:
            continue
        body, width, height = bodies[name]
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
               f'width="{PICTURE_SIZE}" height="{PICTURE_SIZE}">{body}</svg>')
        try:
            png = cairosvg.svg2png(bytestring=svg.encode())
        except MemoryError:  # cairo's answer to a few over-complex gradients (Fluent colour's umbrellas)
            log.warning("%s: cairo cannot draw %s; left out", package.style, name)
            continue
        yield Picture(package.style, found[0], found[1], _png(png))


def load_pictures(cache: Path, subcategories: set[str]) -> list[Picture]:
    """Every picture of the six sets whose emoji belongs to one of `subcategories`."""
    twemoji = fetch(TWEMOJI, cache)
    catalogue = _catalogue(twemoji)
    pictures = list(_png_pictures(TWEMOJI, twemoji, "twitter", catalogue, subcategories))
    pictures += _png_pictures(NOTO, fetch(NOTO, cache), "google", catalogue, subcategories)
    slugs = _slugs(fetch(FLUENT, cache))
    for package in ICONIFY_SETS:
        pictures += _svg_pictures(package, fetch(package, cache), slugs, catalogue, subcategories)
    return pictures
