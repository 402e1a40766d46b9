"""ImageNet's class names for the official class-conditional models, which number their classes 0 to
999. The names come from a list already installed with Gradio (its demo data); nothing is ever
downloaded for them. Without that file the page takes class indices only, and says so."""
from __future__ import annotations

import json
import re

from engine.core.config import InvalidInput, check_class_id


def _installed_labels() -> tuple[str, ...]:
    try:
        from gradio.media import get_file

        with open(get_file("imagenet_labels.json"), encoding="utf-8") as file:
            labels = json.load(file)
    except (ImportError, OSError, ValueError):  # not installed here: indices only
        return ()
    return tuple(str(label) for label in labels) if len(labels) == 1000 else ()


LABELS = _installed_labels()
_BY_NAME = {label.lower(): index for index, label in enumerate(LABELS)}
# "207", or a menu entry as choices() writes it: "207 · Golden Retriever".
_LEADING_INDEX = re.compile(r"^\s*(\d+)(\s*[·:.-].*)?$")
EXAMPLE = "207" + (f" or {LABELS[207].lower()}" if LABELS else "")


def help_text(imagenet_classes: bool) -> str:
    """The class box's help line for the selected model: an official class model reads ImageNet's
    classes by index (or name, where a list of names is installed); others offer their own classes."""
    if not imagenet_classes:
        return "one of this model's classes (official ImageNet models: a class index or name)"
    if LABELS:
        return "an ImageNet class index (0-999) or its name, e.g. 207 or golden retriever"
    return "an ImageNet class index (0-999); no list of ImageNet names is installed here"


def choices(num_classes: int) -> list[tuple[str, str]]:
    """The class menu of an ImageNet model: (what it shows, the index it sends)."""
    return [(f"{index} · {LABELS[index]}" if index < len(LABELS) else str(index), str(index))
            for index in range(num_classes)]


def class_index(text: str, num_classes: int) -> str:
    """The class index, as a string, that `text` names: an index, an ImageNet name (any case) or a
    menu entry; InvalidInput naming what is allowed otherwise."""
    text = str(text or "").strip()
    matched = _LEADING_INDEX.match(text)
    if matched:
        index = int(matched.group(1))
    elif text.lower() in _BY_NAME:
        index = _BY_NAME[text.lower()]
    else:
        names = f" or its ImageNet name, e.g. {EXAMPLE}" if LABELS else " (no ImageNet names are installed here)"
        raise InvalidInput(f"unknown class {text!r}; allowed: a class index 0 to {num_classes - 1}{names}")
    check_class_id(index, num_classes)
    return str(index)
