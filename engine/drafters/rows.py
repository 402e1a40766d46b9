"""Row-parallel drafting: a lane per image row, each with a drafter of its own (engine/drafters/wavefront.py).

With a drafter that proposes nothing this is ZipAR's decoding (each row in flight decides one token a
pass); with Jacobi drafts it is PJD's (each row drafts a window of its own guesses, all rows verified
in one pass).
"""
from __future__ import annotations

from collections.abc import Callable

from engine.drafters.base import Drafter
from engine.drafters.wavefront import Wavefront


class RowDrafter(Drafter):
    def __init__(self, make_lane_drafter: Callable[[], Drafter], window: int, in_flight: int):
        """`window`: how many tokens the row above must be ahead; `in_flight`: most rows at once."""
        self.make_lane_drafter, self.window, self.in_flight = make_lane_drafter, window, in_flight

    def wavefront(self, grid: int) -> Wavefront:
        return Wavefront.rows(grid, self.window, self.in_flight, self.make_lane_drafter)

    def largest_tree(self) -> int:
        # Each row in flight verifies its tree, and a row finished last pass feeds its last token.
        return self.in_flight * (self.make_lane_drafter().largest_tree() + 1)
