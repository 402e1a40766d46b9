"""The start-up comparison, decoded once in the background and watched by every page that loads
while it runs: each page streams the same lanes as they grow, as a pressed Run would, instead of
waiting for the end. One decode serves any number of visitors, so page loads never compete with one
another (or with a Run) for the cores."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

from app.lanes import Lane
from engine.loading.image_model import ImageModel


class FirstRun:
    """Progress of the start-up comparison: published by the thread that decodes it, read by pages."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._version = 0
        self._model: ImageModel | None = None
        self._lanes: list[Lane] = []
        self._state = None  # the finished RunState
        self._ended = False
        self.expected = False  # True once a start-up comparison has been asked for

    def publish(self, model: ImageModel, lanes: list[Lane]) -> None:
        """The lanes after a step. They are copied: the decoding thread goes on changing its own."""
        snapshot = [replace(lane, traces=list(lane.traces)) for lane in lanes]
        with self._changed:
            self._model, self._lanes = model, snapshot
            self._version += 1
            self._changed.notify_all()

    def end(self, state=None) -> None:
        """The comparison is over: `state` is the finished RunState, or None if it failed."""
        with self._changed:
            self._state, self._ended = state, True
            self._changed.notify_all()

    @property
    def methods(self) -> list[str]:
        """The methods of the panels, as far as the run has gone."""
        with self._changed:
            return [lane.method for lane in self._lanes]

    @property
    def state(self):
        return self._state

    def wait(self, timeout: float):
        """The finished RunState, waiting up to `timeout` s; None if it failed, was never asked for
        or is not ready in time."""
        if not self.expected:
            return None
        with self._changed:
            self._changed.wait_for(lambda: self._ended, timeout)
            return self._state

    def progress(self, timeout: float) -> Iterator[tuple[ImageModel, list[Lane]]]:
        """(model, lanes) each time the lanes have moved on since the last look, until the run ends
        or `timeout` s have passed; nothing if none was asked for or it has already ended."""
        if not self.expected:
            return
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            with self._changed:
                self._changed.wait_for(lambda seen=seen: self._ended or self._version > seen,
                                       max(0.0, deadline - time.monotonic()))
                if self._ended or self._version == seen:  # over, or out of time
                    return
                seen, model, lanes = self._version, self._model, self._lanes
            yield model, lanes
