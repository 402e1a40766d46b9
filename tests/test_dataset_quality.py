import hashlib
import io
import json
import tarfile

import numpy as np
import pytest

from engine.data.dataset import CLASS_NAMES, CLASS_OF_SUBCATEGORY, CLASSES, HELD_OUT_ONE_IN, place, split_of
from engine.data.emoji_sources import TWEMOJI, SourceError, fetch, svg_bodies, svg_name
from engine.evaluation.quality import frechet_distance


def test_classes_are_distinct_and_each_subcategory_belongs_to_one_class():
    assert len(CLASS_NAMES) == 8 and len(set(CLASS_NAMES)) == len(CLASS_NAMES)
    subcategories = [sub for c in CLASSES for sub in c.subcategories]
    assert len(subcategories) == len(set(subcategories)) == len(CLASS_OF_SUBCATEGORY)


def test_held_out_split_is_a_fixed_eighth_of_the_emoji():
    bases = [f"{code:x}" for code in range(0x1F300, 0x1FA00)]
    held = [b for b in bases if split_of(b) == "held_out"]
    assert abs(len(held) / len(bases) - 1 / HELD_OUT_ONE_IN) < 0.02
    # Fixed answers, from the CRC-32 of the base's ASCII: crc32(b"1f604") = 0x9a3a9590, 0 mod 8, is
    # held out on every machine and run; crc32(b"1f600") = 0x9d575189, 1 mod 8, is not. A salted
    # hash() would move them between runs.
    assert split_of("1f604") == "held_out" and split_of("1f600") == "train"


def test_placing_a_picture_keeps_it_whole_on_a_white_canvas():
    picture = np.zeros((64, 64, 4), np.uint8)
    picture[16:48, 16:48] = (200, 30, 30, 255)  # an opaque red square on a transparent picture
    rng = np.random.default_rng(0)
    for _ in range(20):
        image = place(picture, rng)
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
        red = (image[..., 0] > 150) & (image[..., 1] < 100)
        side = np.sqrt(red.sum())
        assert 0.72 * 32 - 2 <= side <= 32 + 1  # scaled by 0.72 to 1, never cut by the canvas edge
        assert (~red & (image.min(-1) < 200)).sum() <= 8 * 32  # the rest is white but for a soft edge


def _tarball(name: str, payload: bytes) -> bytes:
    """A gzipped tarball holding one file, as npm packs a package."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return data.getvalue()


def test_a_tarball_that_is_not_the_pinned_one_is_refused(tmp_path):
    packed = _tarball("package/emoji.json", b"")
    (tmp_path / TWEMOJI.tarball).write_bytes(packed)
    digest = hashlib.sha256(packed).hexdigest()
    with pytest.raises(SourceError, match=f"SHA-256 {digest}; emoji-datasource-twitter@16.0.0 is pinned"):
        fetch(TWEMOJI, tmp_path)


def test_iconify_sets_give_plain_aliases_and_leave_out_transformed_ones():
    packed = _tarball("package/icons.json", json.dumps({"width": 64, "height": 64, "icons": {
        "bear-face": {"body": "<path d='M0 0h9v9z'/>"},
        "waving-hand-dark-skin-tone": {"body": "<circle r='3'/>", "width": 72},
    }, "aliases": {"bear": {"parent": "bear-face"}, "bear-left": {"parent": "bear-face", "hFlip": True},
                   "orphan": {"parent": "missing"}}}).encode())
    bodies = svg_bodies(tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz"))
    assert bodies["bear"] == bodies["bear-face"] == ("<path d='M0 0h9v9z'/>", 64, 64)
    assert bodies["waving-hand-dark-skin-tone"] == ("<circle r='3'/>", 72, 64)
    assert "bear-left" not in bodies and "orphan" not in bodies
    assert svg_name("bear-face", bodies) == "bear-face"
    assert svg_name("waving-hand-dark", bodies) == "waving-hand-dark-skin-tone"  # Fluent's slug, Emoji One's name
    assert svg_name("cat-face", bodies) is None


def test_frechet_distance_is_zero_for_equal_statistics_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6))
    mu, cov = x.mean(0), np.cov(x, rowvar=False)
    assert abs(frechet_distance(mu, cov, mu, cov)) < 1e-6
    assert abs(frechet_distance(mu + 1.0, cov, mu, cov) - 6.0) < 1e-6
