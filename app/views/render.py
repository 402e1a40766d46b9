"""Pictures drawn from traces: partial images and acceptance maps, as pure functions over arrays.

Tokens are produced in raster order, so "known" cells are always a prefix of the grid. Pictures are
scaled up by whole pixels (nearest neighbour) so that every token cell stays a crisp square.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from engine.core.trace import StepTrace
from engine.evaluation.quality import LOW_P

DISPLAY = 256  # pixels per side of the pictures the page shows, at least
PENDING = np.array([52, 57, 68], np.uint8)  # cells not generated yet
PENDING_EDGE = np.array([70, 76, 90], np.uint8)

# Acceptance map codes and their colours. UNLIKELY marks an accepted draft the target gives less
# than LOW_P: the speckle a relaxed rule lets in, which the benchmark counts as low_p_share.
NOT_YET, DRAFTED, BONUS, UNLIKELY = 0, 1, 2, 3
MAP_COLOURS = np.array([[43, 48, 59], [46, 196, 120], [245, 166, 35], [232, 62, 140]], np.uint8)  # (4, RGB)
HIGHLIGHT = np.array([255, 255, 255], np.uint8)


def known_cells(tokens: np.ndarray, grid: int) -> np.ndarray:
    """(grid, grid) bool: True for the cells whose token is decided in `tokens` (raster order, -1
    where a row decided in parallel has not got yet, shorter than the grid while decoding)."""
    known = np.zeros(grid * grid, bool)
    known[: len(tokens)] = np.asarray(tokens) >= 0
    return known.reshape(grid, grid)


def display_size(side: int) -> int:
    """Pixels per side of the picture of something `side` cells or pixels wide: the smallest whole
    multiple of `side` that is at least DISPLAY (256 for 16 x 16 tokens, 264 for 24 x 24, 384 for a
    384-pixel image), so that every cell and pixel stays a whole square."""
    return -(-DISPLAY // side) * side


def _cell_size(grid: int, size: int) -> int:
    if size % grid:
        raise ValueError(f"picture size {size} is not a multiple of the grid {grid}")
    return size // grid


def upscale(image: np.ndarray, size: int | None = None) -> np.ndarray:
    """(H, W, C) -> (size, size, C) by repeating pixels (H must divide size; default: display_size)."""
    size = size or display_size(image.shape[0])
    factor = _cell_size(image.shape[0], size)
    return image.repeat(factor, axis=0).repeat(factor, axis=1)


def _cell_edges(cell: int) -> np.ndarray:
    """(cell, cell) bool: the one-pixel border of a cell, to draw a faint grid."""
    edge = np.zeros((cell, cell), bool)
    edge[0, :] = edge[:, 0] = True
    return edge


def grey_out(image: np.ndarray, known: np.ndarray, size: int | None = None) -> np.ndarray:
    """Scale `image` (H, W, 3) to size x size and paint every unknown cell as a pending tile."""
    size = size or display_size(image.shape[0])
    big = upscale(image, size).copy()
    grid = known.shape[0]
    cell = _cell_size(grid, size)
    pending = np.where(_cell_edges(cell)[..., None], PENDING_EDGE, PENDING)  # (cell, cell, 3)
    tiles = np.tile(pending, (grid, grid, 1))  # (size, size, 3)
    unknown = upscale((~known)[..., None], size)[..., 0]  # (size, size)
    big[unknown] = tiles[unknown]
    return big


def pending_picture(grid: int, size: int = DISPLAY) -> np.ndarray:
    """A picture not begun: every one of its grid x grid cells pending, (size, size, 3) uint8."""
    return grey_out(np.zeros((size, size, 3), np.uint8), known_cells(np.zeros(0, np.int64), grid), size)


def acceptance_codes(traces: Sequence[StepTrace], total: int, upto: int | None = None) -> np.ndarray:
    """(total,) int8 per raster position: NOT_YET, DRAFTED (an accepted draft), UNLIKELY (an
    accepted draft the target, as decoded, gives p < LOW_P) or BONUS (the token the target itself
    drew at the end of a pass: a bonus or correction), after step `upto`."""
    codes = np.full(total, NOT_YET, np.int8)
    for trace in traces[: None if upto is None else upto + 1]:
        # The accepted drafts' target probabilities, root to leaf, as the new tokens list them.
        tested_p = {v.node: v.token_prob for v in trace.verdicts}
        accepted_p = iter([tested_p.get(node, 1.0) for node in trace.accepted_nodes])
        for position, from_draft in zip(trace.new_positions, trace.bonus_from_draft):
            if not from_draft:
                codes[position] = BONUS
                continue
            codes[position] = UNLIKELY if next(accepted_p, 1.0) < LOW_P else DRAFTED
    return codes


def acceptance_map(codes: np.ndarray, grid: int, highlight: Iterable[int] = (),
                   size: int | None = None) -> np.ndarray:
    """(size, size, 3) uint8: one coloured square per token, highlighted positions outlined."""
    size = size or display_size(grid)
    cell = _cell_size(grid, size)
    colours = MAP_COLOURS[codes.reshape(grid, grid)]  # (grid, grid, 3)
    big = upscale(colours, size).copy()
    gap = upscale(np.ones((grid, grid, 1), bool), size)[..., 0] & np.tile(_cell_edges(cell), (grid, grid))
    big[gap] = (big[gap] * 0.55).astype(np.uint8)  # dark seams keep the cells apart
    for position in highlight:
        row, col = divmod(int(position), grid)
        top, left = row * cell, col * cell
        big[top: top + cell, left: left + 2] = HIGHLIGHT
        big[top: top + cell, left + cell - 2: left + cell] = HIGHLIGHT
        big[top: top + 2, left: left + cell] = HIGHLIGHT
        big[top + cell - 2: top + cell, left: left + cell] = HIGHLIGHT
    return big


def tokens_after(traces: Sequence[StepTrace], step: int) -> np.ndarray:
    """The tokens decided after `step` (clamped to the last step), in raster order, -1 where none is yet."""
    if not traces:
        return np.zeros(0, np.int64)
    return traces[min(step, len(traces) - 1)].tokens_so_far


def position_of_pixel(x: float, y: float, grid: int, size: int | None = None) -> int:
    """The raster position of the token cell under a pixel of a displayed picture `size` pixels wide
    (default: display_size(grid))."""
    size = size or display_size(grid)
    cell = _cell_size(grid, size)
    row = min(grid - 1, max(0, int(y) // cell))
    col = min(grid - 1, max(0, int(x) // cell))
    return row * grid + col


def step_of_position(traces: Sequence[StepTrace], position: int) -> tuple[int, int] | None:
    """(step, offset) of the pass that produced `position`, offset counting its new tokens; None
    if it has not been produced."""
    for step, trace in enumerate(traces):
        if position in trace.new_positions:
            return step, trace.new_positions.index(position)
    return None
