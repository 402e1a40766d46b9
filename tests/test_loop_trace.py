"""What the loop records of each pass: the cache slots and raster indices it keeps, the trace's fields
checked against what they must add up to over passes of several rows, and its times in milliseconds
read from a clock the test controls."""
import numpy as np
import torch

from engine.core.config import SamplingConfig
from engine.core.tree import DraftTree
from engine.drafters.wavefront import Root
from engine.generation import stream
from engine.loop.decode import _kept_entries
from engine.loop.verify import Forest
from engine.methods import MethodOptions

SAMPLING = SamplingConfig(temperature=1.0, seed=0)


def chain(*tokens: int) -> DraftTree:
    return DraftTree.chain(torch.tensor(tokens), torch.ones(len(tokens), dtype=torch.float64))


def test_kept_entries_are_the_kept_roots_and_accepted_nodes_at_their_raster_indices():
    # A lane's root at raster index 4 with two accepted drafts; a stand-in at 9 (not kept) whose one
    # accepted draft is kept all the same; a finished row's last token, fed alone at 15 and kept.
    forest = Forest([chain(5, 6, 7), chain(9, 3), DraftTree.root_only(8)],
                    [Root(5, 4, True), Root(9, 9, False), Root(8, 15, True)])
    slots, positions = _kept_entries(forest, [[0, 1, 2], [0, 1], [0]], committed=20)
    assert slots == [20, 21, 22, 24, 25]  # tree 2 starts at node 3 of the pass, tree 3 at node 5
    assert positions.tolist() == [4, 5, 6, 10, 15] and positions.dtype == torch.long


def test_each_pass_reports_the_tokens_of_every_row_it_decided(tiny_accepting):
    traces = list(stream(tiny_accepting, "rows_lantern", SAMPLING, 0, MethodOptions(row_window=1, k=8)))
    assert max(t.lanes for t in traces) >= 3 and sum(len(t.accepted_nodes) for t in traces) >= 3
    image = traces[-1].tokens_so_far
    for number, trace in enumerate(traces):
        assert trace.step == number
        decided = len(trace.new_tokens)
        assert decided == trace.lanes + len(trace.accepted_nodes)  # each row: its accepted drafts, one token
        assert decided == len(trace.new_positions) == len(trace.bonus_from_draft) == len(trace.entropy_bits)
        assert sum(trace.bonus_from_draft) == len(trace.accepted_nodes)  # the last of each row is drawn
        assert image[trace.new_positions].tolist() == trace.new_tokens
        assert np.isfinite(trace.entropy_bits).all()
    assert traces[0].bonus_from_draft == [False]


def test_a_passes_times_are_the_milliseconds_of_its_phases(tiny_eagle, monkeypatch):
    class Clock:
        """time.perf_counter advancing one second a reading."""

        def __init__(self):
            self.now = 0.0

        def perf_counter(self) -> float:
            self.now += 1.0
            return self.now

    monkeypatch.setattr("engine.loop.decode.time", Clock())
    traces = list(stream(tiny_eagle, "eagle2", SAMPLING, 0, MethodOptions()))
    assert (traces[0].draft_ms, traces[0].verify_ms, traces[0].accept_ms) == (0.0, 1000.0, 0.0)
    assert all((t.draft_ms, t.verify_ms, t.accept_ms) == (1000.0, 1000.0, 1000.0) for t in traces[1:])
