"""A comparison decoding in a thread of its own, watched by the pages that show it.

The decoding thread publishes the lanes after every step and never waits for a page: drawing a
preview, and Gradio encoding and sending it, happen beside the decoding instead of between its
steps, where they would add to the wall time of every comparison. The start-up comparison is one
too: one decode serves every page that loads while it runs, so page loads never compete with one
another (or with a Run) for the cores.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from app.backend.lanes import Lane
from engine.loading.image_model import ImageModel

log = logging.getLogger("app.backend.live_run")


class LiveRun:
    """Progress of one comparison: published by the thread that decodes it, read by pages."""

    def __init__(self, expected: bool = False) -> None:
        self._changed = threading.Condition()
        self._version = 0
        self._model: ImageModel | None = None
        self._lanes: list[Lane] = []
        self._state = None  # the finished RunState
        self._ended = False
        self.error: Exception | None = None  # what stopped the decoding, if it failed
        self.stopped = False  # set by the page when nobody watches any more: the decoding stops
        self.expected = expected  # True once a comparison has been asked for

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

    def wait(self, timeout: float | None):
        """The finished RunState, waiting up to `timeout` s (None: as long as it takes); None if it
        failed, was never asked for or is not ready in time."""
        if not self.expected:
            return None
        with self._changed:
            self._changed.wait_for(lambda: self._ended, timeout)
            return self._state

    def progress(self, timeout: float | None, interval: float = 0.0) -> Iterator[tuple[ImageModel, list[Lane]]]:
        """(model, lanes) when the lanes have moved on since the last look, at most once every
        `interval` s, until the run ends or `timeout` s have passed (None: no limit); nothing if
        none was asked for or it has already ended."""
        if not self.expected:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = 0
        while True:
            with self._changed:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._changed.wait_for(lambda seen=seen: self._ended or self._version > seen, left)
                if self._ended or self._version == seen:  # over, or out of time
                    return
                seen, model, lanes = self._version, self._model, self._lanes
            yield model, lanes
            if interval:  # the next look after `interval`, or at once when the run ends
                with self._changed:
                    self._changed.wait_for(lambda: self._ended, interval)


def decode_in_background(live: LiveRun, model: ImageModel, steps: Iterator[list[Lane]],
                         finish: Callable[[], object]) -> threading.Thread:
    """Run `steps` (the lanes after each step) to the end in a daemon thread, publishing each step
    to `live`, then end it with what `finish()` makes of the finished lanes; stop early if
    `live.stopped`."""
    def decode() -> None:
        state = None
        try:
            for lanes in steps:
                live.publish(model, lanes)
                if live.stopped:
                    return
            state = finish()
        except Exception as err:  # handed to the page, which reports it
            log.exception("decoding failed")
            live.error = err
        finally:
            live.end(state)

    live.expected = True
    thread = threading.Thread(target=decode, name="explorer-decode", daemon=True)
    thread.start()
    return thread
