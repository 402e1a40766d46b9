"""A comparison decoding in its own thread: what pages see of it, and how it stops."""
import threading

import pytest

from app.backend.lanes import Lane
from app.backend.live_run import LiveRun, decode_in_background

MODEL = object()  # the model travels with the lanes untouched; these tests never decode


def lanes_after(tokens: int) -> list[Lane]:
    return [Lane("vanilla", "Vanilla", True, 256, elapsed_ms=float(tokens))]


def test_a_page_sees_the_latest_lanes_once_each_then_the_end():
    live = LiveRun(expected=True)
    looks = live.progress(timeout=5)
    live.publish(MODEL, lanes_after(1))
    live.publish(MODEL, lanes_after(2))  # published before the page looked: only the latest is shown
    model, lanes = next(looks)
    assert model is MODEL and lanes[0].elapsed_ms == 2.0
    live.publish(MODEL, lanes_after(3))
    assert next(looks)[1][0].elapsed_ms == 3.0
    live.end("finished")
    with pytest.raises(StopIteration):
        next(looks)
    assert live.wait(0) == "finished" and live.methods == ["vanilla"]


def test_published_lanes_are_copies_the_decoding_may_go_on_changing():
    live = LiveRun(expected=True)
    lanes = lanes_after(1)
    live.publish(MODEL, lanes)
    lanes[0].traces.append("a later step")
    lanes[0].done = True
    _, seen = next(live.progress(timeout=5))
    assert seen[0].traces == [] and not seen[0].done


def test_nothing_to_watch_when_no_comparison_was_asked_for():
    live = LiveRun()
    assert list(live.progress(timeout=5)) == [] and live.wait(5) is None


def test_a_stopped_watch_stops_the_decoding():
    live = LiveRun()
    stepped = threading.Event()

    def endless():
        while True:
            stepped.set()
            yield lanes_after(1)

    thread = decode_in_background(live, MODEL, endless(), finish=lambda: "finished")
    assert stepped.wait(5)
    live.stopped = True
    thread.join(5)
    assert not thread.is_alive() and live.wait(0) is None and live.error is None


def test_a_failed_decoding_ends_with_its_error():
    live = LiveRun()

    def failing():
        yield lanes_after(1)
        raise RuntimeError("the drafter broke")

    decode_in_background(live, MODEL, failing(), finish=lambda: "finished").join(5)
    assert live.wait(0) is None and str(live.error) == "the drafter broke"
