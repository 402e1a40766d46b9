"""Controls whose refusals name the input and what it allows.

Gradio checks a slider's range and a menu's choices before any handler runs, in words that name
neither the control nor, for a menu, the choices in a form a reader knows ("Value 5 is greater than
maximum value 1.0."). These controls check first, through the page and the API alike, and say
"delta 5 is out of range; allowed: 0 to 1", as the engine's own checks do. Each keeps its Gradio
component's front end. Menus whose choices the request checks (model, class, methods) take any
value instead, so that the request can name the problem.
"""
from __future__ import annotations

import logging

import gradio as gr

log = logging.getLogger("app")


def refusal(message: str) -> gr.Error:
    """The error a user sees for a refused input or a model that cannot load; the server logs one
    line for it, not a traceback, since nothing is wrong with the server."""
    log.info("refused: %s", message)
    return gr.Error(message, print_exception=False)


class _Named:
    """What the checked controls share: the name the refusal uses and how the range reads."""

    input_name = ""
    range_words: tuple[str, str] | None = None  # how the two ends read, e.g. ("0 (greedy)", "2")

    def refuse_number(self, payload, minimum, maximum) -> None:
        try:
            number = float(payload)
        except (TypeError, ValueError):
            raise refusal(f"{self.input_name} {payload!r} is not a number") from None
        if (minimum is None or number >= minimum) and (maximum is None or number <= maximum):
            return
        if self.range_words:
            allowed = " to ".join(self.range_words)
        elif maximum is None:
            allowed = f"{minimum:g} or more"
        else:
            allowed = f"{minimum:g} to {maximum:g}"
        raise refusal(f"{self.input_name} {number:g} is out of range; allowed: {allowed}")

    def refuse_choice(self, payload, choices) -> None:
        values = [value for _, value in choices]
        if payload not in values:
            raise refusal(f"unknown {self.input_name} {payload!r}; allowed: {', '.join(map(str, values))}")


class Slider(_Named, gr.Slider):
    def get_block_name(self) -> str:
        return "slider"

    def preprocess(self, payload):
        self.refuse_number(payload, self.minimum, self.maximum)
        return super().preprocess(payload)


class Number(_Named, gr.Number):
    def get_block_name(self) -> str:
        return "number"

    def preprocess(self, payload):
        if payload is not None:  # an emptied box: the handler's default
            self.refuse_number(payload, self.minimum, self.maximum)
        return super().preprocess(payload)


class Radio(_Named, gr.Radio):
    def get_block_name(self) -> str:
        return "radio"

    def preprocess(self, payload):
        if payload is not None:
            self.refuse_choice(payload, self.choices)
        return super().preprocess(payload)


def named(control, name: str, range_words: tuple[str, str] | None = None):
    """`control` with the name its refusals use (and, optionally, how its range reads)."""
    control.input_name = name
    control.range_words = range_words
    return control
