"""What LANTERN's rule does with a finished run's own drafts at another delta, k or variant: the
stored steps judged again (engine.loop.rejudge), no new decode. It answers the sliders at once, for
the panel whose method reads delta; Run gives the real decode at the new setting."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from app.backend.lanes import Lane, reads_delta
from app.backend.runtime import RunState
from engine.core.trace import StepTrace, Verdict
from engine.loop.rejudge import rejudge
from engine.methods import bound_rule

# The deltas the whole-run curve is drawn at, on top of the run's and the slider's own.
CURVE_DELTAS = tuple(np.round(np.linspace(0.0, 1.0, 11), 2).tolist())


@dataclass(frozen=True)
class Setting:
    delta: float
    k: int
    variant: str

    def label(self) -> str:
        return f"delta {self.delta:g}, k {self.k}, {self.variant}"


@dataclass
class WhatIf:
    """A run's drafts judged at `asked`, beside what the run itself (at `run`) kept."""

    panel: int
    title: str
    run: Setting
    asked: Setting
    curve: list[tuple[float, float]]  # (delta, mean drafts kept a step) at the asked k and variant
    run_kept: float  # mean drafts kept a step, as decoded
    asked_kept: float  # ... judged at the asked setting
    step: int  # the replayed step, 1 or later
    run_verdicts: list[Verdict]  # the step's verdicts as decoded
    asked_verdicts: list[Verdict]  # ... judged at the asked setting
    drafted: int  # tokens drafted at the replayed step


def whatif_panel(state: RunState) -> int | None:
    """The last panel whose method reads delta and kept its steps' inputs; None without one."""
    panels = [i for i, lane in enumerate(state.lanes) if reads_delta(lane.method) and _steps(lane)]
    return panels[-1] if panels else None


def what_if(state: RunState, delta: float, k: int, variant: str, step: int) -> WhatIf | None:
    """The run's drafts judged at (delta, k, variant), the whole run and replayed `step`; None when no
    panel reads delta. Out-of-range values raise InvalidInput, as they would for Run."""
    panel = whatif_panel(state)
    if panel is None:
        return None
    lane = state.lanes[panel]
    steps = _steps(lane)
    run_options = state.request.options()
    asked = Setting(float(delta), int(k), str(variant))
    options = dataclasses.replace(run_options, delta=asked.delta, k=asked.k, lantern_variant=asked.variant)
    sampling = state.request.sampling()

    def judged(delta_value: float) -> list[int]:
        rule = bound_rule(state.model, lane.method, dataclasses.replace(options, delta=delta_value), sampling)
        return [len(rejudge(trace, rule).accepted_nodes) for trace in steps]

    key = (asked.k, asked.variant)
    if key not in state.whatif_curves:
        state.whatif_curves[key] = {value: float(np.mean(judged(value))) for value in CURVE_DELTAS}
    curve = dict(state.whatif_curves[key])
    if asked.delta not in curve:
        curve[asked.delta] = float(np.mean(judged(asked.delta)))
    replayed = steps[min(max(int(step), 1), len(steps)) - 1]
    rule = bound_rule(state.model, lane.method, options, sampling)
    return WhatIf(panel=panel, title=lane.title,
                  run=Setting(run_options.delta, run_options.k, run_options.lantern_variant), asked=asked,
                  curve=sorted(curve.items()), run_kept=float(np.mean([len(t.accepted_nodes) for t in steps])),
                  asked_kept=curve[asked.delta], step=replayed.step, run_verdicts=replayed.verdicts,
                  asked_verdicts=rejudge(replayed, rule).verdicts, drafted=replayed.drafted)


def _steps(lane: Lane) -> list[StepTrace]:
    """The lane's drafting steps that kept their inputs (the prefill drafts nothing)."""
    return [trace for trace in lane.traces[1:] if trace.inputs is not None]
