"""What a comparison shows, by name. The same dataclasses hold the page's components (app.page.ui) and a
handler's values for them (app.page.handlers); `flatten()` lays both out in one order, so that values and
components line up by field name, never by counting positions."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import gradio as gr

from app.backend.request import PANELS


def _skip() -> Any:
    return gr.skip()


def _per_panel() -> Any:
    """A field with one value per panel, flattened into PANELS outputs."""
    return field(default_factory=lambda: [gr.skip()] * PANELS, metadata={"per_panel": True})


def panel_values(values: list, fill: Any) -> list:
    """One value per panel: panels without a lane (fewer methods than panels) show `fill`."""
    return list(values) + [fill] * (PANELS - len(values))


@dataclass
class ComparisonOutputs:
    """Everything a comparison updates; a field left out stays as it is on the page (gr.skip()).

    Its flattened order is the `compare` API's output order (README: images first, statistics at 15),
    so fields are only ever added at the end."""

    images: list = _per_panel()  # one per panel
    maps: list = _per_panel()  # acceptance maps, one per panel
    counters: list = _per_panel()  # per-panel counters (HTML)
    length_plot: Any = field(default_factory=_skip)
    scrubber: Any = field(default_factory=_skip)
    latent_plot: Any = field(default_factory=_skip)
    tree_plot: Any = field(default_factory=_skip)
    detail: Any = field(default_factory=_skip)
    teaching: Any = field(default_factory=_skip)
    statistics: Any = field(default_factory=_skip)
    run_state: Any = field(default_factory=_skip)
    inspect_panel: Any = field(default_factory=_skip)
    whatif: Any = field(default_factory=_skip)  # the run's drafts judged at the sliders' setting (HTML)
    whatif_plot: Any = field(default_factory=_skip)

    def flatten(self) -> list:
        flat = []
        for item in fields(self):
            value = getattr(self, item.name)
            if not item.metadata.get("per_panel"):
                flat.append(value)
            elif len(value) == PANELS:
                flat += value
            else:  # a short list would shift every later output onto the wrong component
                raise ValueError(f"{item.name} has {len(value)} values for {PANELS} panels")
        return flat

    @classmethod
    def unflatten(cls, flat: list):
        """The outputs of a flattened list, by name again (as a reader of the API's result would)."""
        values, rest = {}, list(flat)
        for item in fields(cls):
            count = PANELS if item.metadata.get("per_panel") else 1
            if len(rest) < count:
                raise ValueError(f"{len(flat)} values are too few for {cls.__name__}")
            taken, rest = rest[:count], rest[count:]
            values[item.name] = taken if item.metadata.get("per_panel") else taken[0]
        if rest:
            raise ValueError(f"{len(flat)} values are too many for {cls.__name__}")
        return cls(**values)


@dataclass
class LoadOutputs(ComparisonOutputs):
    """Page load also sets the panels' methods (to those of the start-up comparison) and the sweep."""

    methods: list = _per_panel()
    tradeoff_plot: Any = field(default_factory=_skip)
    tradeoff_note: Any = field(default_factory=_skip)
