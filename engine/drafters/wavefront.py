"""Which image positions a target pass may decide: one lane in raster order, or a lane per row.

A lane is a run of raster positions decided left to right by a drafter of its own. Raster decoding is
one lane over the whole image. Row-parallel decoding (ZipAR, PJD) gives every row a lane and starts
row r + 1 once row r is `window` tokens ahead: an image token depends mostly on its neighbourhood,
so the next row need not wait for the end of the row above. A token of row r + 1 at column c is
decided only once row r has decided columns 0 .. c + window - 1, and sees, besides its own row, what
the rows above have decided so far: the wavefront runs diagonally down the image.

Each pass, every lane in flight feeds its root, the last token it decided, at that token's own
position; a lane that has just started has no token yet and feeds a stand-in at the position just
before its first (the row above's last decided token, as ZipAR feeds it), which predicts its first
token and is never kept. A finished row's last token is fed once more, alone, where a row below still
needs to see it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.config import InvalidInput

if TYPE_CHECKING:
    from engine.drafters.base import Drafter


@dataclass
class Lane:
    start: int  # raster index of the lane's first position
    end: int  # one past its last
    drafter: Drafter
    tokens: list[int] = field(default_factory=list)  # decided so far, left to right
    fed: int = 0  # how many of them the target's cache holds

    @property
    def done(self) -> bool:
        return self.start + len(self.tokens) >= self.end

    @property
    def started(self) -> bool:
        return bool(self.tokens)

    @property
    def next_position(self) -> int:
        return self.start + len(self.tokens)


@dataclass(frozen=True)
class Root:
    """What a lane feeds the target this pass, at sequence position prefix + `position`."""

    token: int
    position: int  # raster index whose input the root is
    kept: bool  # False for a stand-in, whose cache entries are dropped after the pass


@dataclass
class Wavefront:
    lanes: list[Lane]
    window: int  # tokens the row above must be ahead before a row may decide a column
    in_flight: int  # most lanes started and not finished at once

    @classmethod
    def raster(cls, num_tokens: int, drafter: Drafter) -> Wavefront:
        return cls([Lane(0, num_tokens, drafter)], window=num_tokens, in_flight=1)

    @classmethod
    def rows(cls, grid: int, window: int, in_flight: int, make_drafter) -> Wavefront:
        """A lane per grid row, each with a drafter from `make_drafter()`. A window of the grid's width
        or more waits for the row above to finish; more rows in flight than the grid has, for none."""
        if window < 1 or in_flight < 1:
            raise InvalidInput(f"row window {window} and rows in flight {in_flight}: allowed: 1 or more")
        return cls([Lane(r * grid, (r + 1) * grid, make_drafter()) for r in range(grid)],
                   min(window, grid), min(in_flight, grid))

    @property
    def done(self) -> bool:
        return all(lane.done for lane in self.lanes)

    def grid_tokens(self) -> list[int]:
        """Every position's token in raster order, -1 where none is decided yet; trailing -1s cut."""
        decided = max((lane.next_position for lane in self.lanes if lane.started), default=0)
        tokens = [-1] * decided
        for lane in self.lanes:
            tokens[lane.start:lane.next_position] = lane.tokens
        return tokens

    def room(self, index: int) -> int:
        """How many positions lane `index` may decide in the coming pass (0: it waits)."""
        lane = self.lanes[index]
        if lane.done:
            return 0
        limit = lane.end
        if index > 0 and not self.lanes[index - 1].done:
            above = self.lanes[index - 1]
            # Column c needs the row above decided through c + window - 1.
            limit = min(limit, lane.start + len(above.tokens) - self.window + 1)
        return max(0, limit - lane.next_position)

    def deciding(self) -> list[int]:
        """The lanes that decide tokens in the coming pass: those in flight that may, then rows that
        may start, while fewer than `in_flight` are under way."""
        running = [i for i, lane in enumerate(self.lanes) if lane.started and not lane.done]
        chosen = [i for i in running if self.room(i) > 0]
        for i, lane in enumerate(self.lanes):
            if len(running) >= self.in_flight:
                break
            if not lane.started and self.room(i) > 0:
                chosen.append(i)
                running.append(i)
        return sorted(chosen)

    def root(self, index: int) -> Root:
        """Lane `index`'s input this pass: its last token, or for a lane not yet started the row
        above's last token, fed where the row above ends (a stand-in unless that row is finished)."""
        lane = self.lanes[index]
        if lane.started:
            return Root(lane.tokens[-1], lane.next_position - 1, kept=True)
        above = self.lanes[index - 1]
        return Root(above.tokens[-1], lane.start - 1, kept=above.done and above.fed < len(above.tokens))

    def decided(self, index: int, tokens: list[int]) -> int:
        """Lane `index` decided `tokens` in a pass whose cache keeps all but the last (the lane's next
        root); returns the raster index of the first."""
        lane = self.lanes[index]
        first = lane.next_position
        lane.tokens.extend(tokens)
        lane.fed = len(lane.tokens) - 1
        return first

    def cached(self, position: int) -> None:
        """The token at raster index `position`, fed as a kept root, is in the cache now."""
        next(lane for lane in self.lanes if lane.start <= position < lane.end).fed += 1

    def unfed_finished(self, deciding: list[int]) -> list[int]:
        """Finished lanes whose last token the cache lacks while a later lane is still to decide,
        and which no starting lane feeds as its root this pass."""
        roots_of = {i - 1 for i in deciding if not self.lanes[i].started}
        pending = [i for i, lane in enumerate(self.lanes) if not lane.done]
        return [i for i, lane in enumerate(self.lanes)
                if lane.done and lane.fed < len(lane.tokens) and i not in roots_of
                and any(j > i for j in pending)]
