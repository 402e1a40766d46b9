"""Rows decided in parallel (ZipAR, PJD): the schedule, the raster parent with one row in flight, and
every multi-row pass against a reference computed without the cache."""
import numpy as np
import pytest
import torch

from engine.core.config import InvalidInput, SamplingConfig
from engine.core.sampling import combine_cfg, distribution
from engine.generation import generate
from engine.methods import MethodOptions
from tests.accepting import assert_lossless
from tests.conftest import TINY_GPT

GRID = TINY_GPT.grid_size  # 4 x 4 tokens
GREEDY = SamplingConfig(temperature=0.0, cfg_scale=2.0)
SAMPLING = SamplingConfig(temperature=1.0, cfg_scale=2.0, seed=3)


@pytest.mark.parametrize("options", [MethodOptions(rows_in_flight=1, row_window=1),
                                     MethodOptions(row_window=GRID)], ids=["one-row", "full-window"])
def test_one_row_in_flight_is_vanilla(tiny_model, options):
    """With one row in flight (a cap of one, or a window of a whole row) ZipAR is raster decoding:
    vanilla's tokens greedy, and, sampling, vanilla's very draws from the same seed."""
    for sampling in (GREEDY, SAMPLING):
        vanilla = generate(tiny_model, "vanilla", sampling, 1)
        zipar = generate(tiny_model, "zipar", sampling, 1, options)
        assert zipar.tokens.tolist() == vanilla.tokens.tolist()
        assert zipar.steps == vanilla.steps == GRID * GRID - 1


def test_pjd_with_one_row_in_flight_keeps_vanilla_greedy(jacobi_model):
    """PJD with one row in flight is SJD inside each row: lossless, drafts accepted (tests/accepting.py)."""
    vanilla = generate(jacobi_model, "vanilla", GREEDY, 1)
    pjd = generate(jacobi_model, "pjd", GREEDY, 1, MethodOptions(rows_in_flight=1, window=4))
    assert_lossless(pjd, vanilla, least=4)


def test_a_drafter_per_row_with_one_row_in_flight_keeps_vanilla_greedy(tiny_accepting):
    """EAGLE's chain drafted in each row, one row at a time: each row's drafter first reads the pairs of
    the rows above (the finished row's last token is its root), so it drafts from the row's first pass,
    and the tokens are vanilla's, with drafts accepted (measured: 8 of 13 drafted)."""
    vanilla = generate(tiny_accepting, "vanilla", GREEDY, 1)
    rows = generate(tiny_accepting, "rows_eagle", GREEDY, 1, MethodOptions(rows_in_flight=1))
    assert_lossless(rows, vanilla, least=6)
    first_passes = [t for t in rows.traces[1:] if t.new_positions[0] % GRID == 0]
    assert sum(t.drafted for t in first_passes) > 0


# Passes after the prefill of a greedy ZipAR decode of the 4 x 4 grid, counted by hand: with no cap,
# row r + 1 trails row r by the window, so the last row ends (GRID - 1) * window + GRID - 1 passes in.
# With two rows in flight the third row waits for the first to end: 8 passes at a window of 1 (rows
# 0-1 in passes 1-4, rows 2-3 in passes 4-8), 9 at a window of 2.
SCHEDULES = [(1, 64, 6), (2, 64, 9), (3, 64, 12), (4, 64, 15), (1, 2, 8), (2, 2, 9)]


@pytest.mark.parametrize("window, in_flight, passes", SCHEDULES)
def test_the_wavefront_keeps_its_window(tiny_model, window, in_flight, passes):
    """Each pass decides at most one token a row (ZipAR drafts nothing); a token of row r at column c
    is decided only once row r - 1 had decided columns 0 .. c + window - 1 (or all of them); never more
    rows than the cap are under way; and the whole grid gets decided, each position once."""
    options = MethodOptions(row_window=window, rows_in_flight=in_flight)
    run = generate(tiny_model, "zipar", GREEDY, 1, options)
    assert run.steps == passes
    decided = np.zeros(GRID, dtype=int)  # per row, columns decided before the pass
    decided[0] = 1  # the prefill's token
    for trace in run.traces[1:]:
        rows = [position // GRID for position in trace.new_positions]
        assert len(rows) == len(set(rows))
        for position in trace.new_positions:
            row, column = divmod(position, GRID)
            assert column == decided[row]
            if row > 0:
                assert decided[row - 1] == GRID or decided[row - 1] >= column + window
        under_way = sum(1 for r in range(GRID) if 0 < decided[r] < GRID or (r in rows and decided[r] == 0))
        assert under_way <= in_flight
        for row in rows:
            decided[row] += 1
    assert (decided == GRID).all()
    assert sorted(p for t in run.traces for p in t.new_positions) == list(range(GRID * GRID))
    assert (run.tokens >= 0).all()


def reference_probs(target, traces, class_id: int, sampling: SamplingConfig) -> list[np.ndarray]:
    """Every pass's target distributions recomputed in one forward without a cache. Every input fed so
    far is laid out in the order it was fed; input j sees input i when i is the condition, or i sits
    before j in the raster and was decided before j was fed (a kept root or accepted draft of an earlier
    pass, or a kept root of j's own pass), or i is j's ancestor in its own tree (itself included)."""
    tokens, positions, kept, passes, ancestors = [], [], [], [], []
    for t, trace in enumerate(traces[1:], start=1):
        base = len(tokens)
        parents = trace.tree_parents.tolist()
        accepted = set(trace.accepted_nodes)
        roots = set(trace.tree_roots) - set(trace.stand_ins)
        for node, (token, position) in enumerate(zip(trace.tree_tokens.tolist(), trace.tree_positions.tolist())):
            tokens.append(token)
            positions.append(position)
            kept.append(node in accepted or node in roots)
            passes.append((t, node in roots))
            line, at = set(), node
            while at >= 0:
                line.add(base + at)
                at = parents[at]
            ancestors.append(line)
    n = len(tokens)
    sees = torch.zeros(n, n, dtype=torch.bool)  # (n, n)
    for j in range(n):
        for i in range(n):
            earlier = passes[i][0] < passes[j][0] and kept[i]
            same_pass_root = passes[i][0] == passes[j][0] and passes[i][1]
            sees[j, i] = i in ancestors[j] or (positions[i] < positions[j] and (earlier or same_pass_root))
    prefix = target.cfg.cls_token_num
    mask = torch.ones(prefix + n, prefix + n, dtype=torch.bool).tril()  # (P + n, P + n)
    mask[prefix:, prefix:] = sees
    rows = torch.tensor([class_id, target.null_class])
    with torch.no_grad():
        h = torch.cat([target.embed_condition(rows), target.embed_tokens(torch.tensor(tokens).expand(2, -1))], 1)
        hidden = target(h, torch.cat([torch.arange(prefix), prefix + torch.tensor(positions)]), None, None, mask)
        p = distribution(combine_cfg(target.logits(hidden[:, prefix:]), sampling.cfg_scale), sampling).numpy()
    out, start = [], 0
    for trace in traces[1:]:
        out.append(p[start:start + len(trace.tree_tokens)])
        start += len(trace.tree_tokens)
    return out


@pytest.mark.parametrize("method, options, sampling", [
    ("zipar", MethodOptions(row_window=1), GREEDY),
    ("zipar", MethodOptions(row_window=2, rows_in_flight=2), SAMPLING),
    # Drafts copied from the left: the tiny Jacobi target's guesses then pass often enough to be kept.
    ("pjd", MethodOptions(row_window=2, window=4, sjd_init="left"), GREEDY),
    ("pjd", MethodOptions(row_window=3, window=4, sjd_init="left"), SAMPLING),
    ("rows_lantern", MethodOptions(row_window=1, k=8), GREEDY),
    ("rows_lantern", MethodOptions(row_window=2, k=8), SAMPLING),
], ids=["zipar-greedy", "zipar-sampling", "pjd-greedy", "pjd-sampling", "lantern-greedy", "lantern-sampling"])
def test_multi_row_passes_match_a_reference_without_cache(tiny_accepting, jacobi_model, method, options, sampling,
                                                         monkeypatch):
    """The cache (slots kept out of raster order, stand-ins dropped, finished rows fed once more) and
    the pass's mask give, at every node of every pass, the distribution of the reference above:
    several rows in flight, drafts accepted and rejected. Both sides multiply in float32 (a sampling
    decode may round its large products to bfloat16, tests/test_matmul.py), so they agree to 2e-5."""
    from engine.generation import stream

    monkeypatch.setattr("engine.loop.decode.rounds_large_products", lambda weight, greedy: False)
    model = tiny_accepting if method == "rows_lantern" else jacobi_model
    traces = list(stream(model, method, sampling, 1, options, keep_inputs=True))
    assert max(len(t.tree_roots) - len(t.stand_ins) for t in traces) >= 2  # rows really ran together
    assert any(t.stand_ins for t in traces)
    if method != "zipar":
        assert sum(len(t.accepted_nodes) for t in traces) >= 3  # measured: PJD 5 and 6, LANTERN 8 and 9
        assert any(not v.accepted for t in traces for v in t.verdicts)
    for trace, expected in zip(traces[1:], reference_probs(model.target, traces, 1, sampling)):
        got = trace.inputs.probs
        np.testing.assert_allclose(got, expected[: len(got)], atol=2e-5)


def test_row_knobs_out_of_range_are_refused():
    for field, value in (("row_window", 0), ("rows_in_flight", 65)):
        with pytest.raises(InvalidInput, match=field.replace("_", " ")):
            MethodOptions(**{field: value})


def test_judging_a_multi_row_pass_again_gives_its_verdicts(tiny_accepting):
    """The what-if view's walk (engine.loop.rejudge) over a pass of several rows: at the decode's own
    setting each row's tree is judged as the decode judged it, on the row's own slice of the draws, so
    that each row's walk also ends on the token the decode drew there."""
    from engine.generation import stream
    from engine.loop.rejudge import rejudge, rejudge_rows
    from engine.methods import bound_rule

    options = MethodOptions(row_window=1, k=8)
    for sampling in (GREEDY, SamplingConfig(temperature=1.0, seed=0)):
        traces = list(stream(tiny_accepting, "rows_lantern", sampling, 0, options, keep_inputs=True))
        rule = bound_rule(tiny_accepting, "rows_lantern", options, sampling)
        assert any(t.lanes >= 2 and t.verdicts for t in traces[1:])  # rows drafting side by side
        assert sampling.greedy or max(t.lanes for t in traces) >= 3
        for trace in traces[1:]:
            again = rejudge(trace, rule)
            assert again.accepted_nodes == trace.accepted_nodes
            assert [(v.node, v.token, v.accepted) for v in again.verdicts] == \
                [(v.node, v.token, v.accepted) for v in trace.verdicts]
            drawn = [token for token, from_draft in zip(trace.new_tokens, trace.bonus_from_draft) if not from_draft]
            assert [walk.next_token for walk in rejudge_rows(trace, rule)] == drawn
