"""The inputs of one comparison, with the page's defaults, checked into engine configurations."""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.config import InvalidInput, SamplingConfig, TreeConfig
from engine.methods import METHODS, MethodOptions

DEFAULT_METHODS = ("vanilla", "eagle2", "lantern")
DEFAULT_CLASS = "cat"
DEFAULT_MODEL = "embedded"


@dataclass(frozen=True)
class CompareRequest:
    class_name: str = DEFAULT_CLASS
    seed: int = 0
    temperature: float = 1.0
    cfg_scale: float = 4.0
    top_k: int = 0
    delta: float = MethodOptions.delta
    k: int = MethodOptions.k
    tree_depth: int = TreeConfig.depth
    tree_top_k: int = TreeConfig.top_k
    tree_total: int = TreeConfig.total_tokens
    methods: tuple[str, ...] = DEFAULT_METHODS
    model: str = DEFAULT_MODEL
    prompt: str = ""  # the caption, for text-to-image models

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=_number("temperature", self.temperature),
                              top_k=_whole("top-k", self.top_k),
                              cfg_scale=_number("CFG scale", self.cfg_scale),
                              seed=_whole("seed", self.seed))

    def options(self) -> MethodOptions:
        tree = TreeConfig(depth=_whole("tree depth", self.tree_depth),
                          top_k=_whole("tree top-k", self.tree_top_k),
                          total_tokens=_whole("tree total tokens", self.tree_total))
        return MethodOptions(delta=_number("delta", self.delta), k=_whole("k", self.k), tree=tree)

    def checked_methods(self) -> list[str]:
        if not self.methods:
            raise InvalidInput("no method chosen; allowed: " + ", ".join(METHODS))
        for name in self.methods:
            if name not in METHODS:
                raise InvalidInput(f"unknown method {name!r}; allowed: {', '.join(METHODS)}")
        return list(self.methods)


def _number(name: str, value) -> float:
    """A finite float from whatever the API sent; anything else names the value."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{name} {value!r} is not a finite number")
    return number


def _whole(name: str, value) -> int:
    number = _number(name, value)
    if number != int(number):
        raise InvalidInput(f"{name} {value!r} is not a whole number")
    return int(number)
