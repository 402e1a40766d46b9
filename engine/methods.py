"""The method registry: each decoding method is a drafter and an acceptance rule, nothing more.

This is the only place that knows methods by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.acceptance import ExactRule
from engine.config import InvalidInput, TreeConfig
from engine.drafters.base import Drafter
from engine.models import ImageModel


@dataclass(frozen=True)
class MethodOptions:
    delta: float = 0.2
    k: int = 16
    tree: TreeConfig = field(default_factory=TreeConfig)


@dataclass(frozen=True)
class Method:
    name: str
    title: str
    lossless: bool  # output distribution equals the target's (greedy output equals vanilla's)
    build: Callable[[ImageModel, MethodOptions], tuple[Drafter, ExactRule]]


def _vanilla(model: ImageModel, options: MethodOptions) -> tuple[Drafter, ExactRule]:
    return Drafter(), ExactRule()


METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method("vanilla", "Vanilla", True, _vanilla),
    ]
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise InvalidInput(f"unknown method {name!r}; allowed: {', '.join(METHODS)}")
    return METHODS[name]
