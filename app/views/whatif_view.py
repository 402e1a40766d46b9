"""The what-if view (app.backend.whatif) in words and a chart: pure functions of a WhatIf."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from app.backend.whatif import WhatIf
from app.views.plots import layout
from engine.core.trace import Verdict

RUN_COLOUR, ASKED_COLOUR, CURVE_COLOUR = "#6b7a99", "#f5a623", "#3d8bfd"
ELEMENT_ID = "delta-whatif"  # the page's element; the browser test reads it


def whatif_html(whatif: WhatIf | None, message: str = "") -> str:
    """The headline and the replayed step's verdicts, at the sliders' setting beside the run's."""
    if whatif is None:
        return f'<div class="whatif-empty">{html.escape(message)}</div>'
    same = whatif.asked == whatif.run
    headline = (f"<b>{html.escape(whatif.title)}</b> (panel {whatif.panel + 1}): its own drafts from the last run, "
                f"judged again at <b>{html.escape(whatif.asked.label())}</b>, keep "
                f'<b class="whatif-kept" data-kept="{whatif.asked_kept:.4f}">{whatif.asked_kept:.2f}</b> drafts a '
                f"target pass (about {whatif.asked_kept + 1:.2f} tokens a pass); the decode at "
                f"{html.escape(whatif.run.label())} kept {whatif.run_kept:.2f}.")
    caveat = ("This is the run's own setting: the verdicts are the run's own." if same else
              "Same drafts, same target probabilities and random draws, another rule: a real decode at this "
              "setting would draft other tokens from its first changed step on. Press Run to decode it.")
    return (f'<div class="whatif"><p>{headline}</p><p style="opacity:0.8;font-size:0.9em">{caveat}</p>'
            f"{_step_table(whatif)}</div>")


def _step_table(whatif: WhatIf) -> str:
    """One row per draft the walk judged at either setting, in node order."""
    asked = {v.node: v for v in whatif.asked_verdicts}
    run = {v.node: v for v in whatif.run_verdicts}
    rows = []
    for node in sorted(set(asked) | set(run)):
        now, then = asked.get(node), run.get(node)
        shown = now or then
        assert shown is not None  # the node came from one of the two
        changed = (now is None) != (then is None) or (now is not None and then is not None
                                                      and now.accepted != then.accepted)
        style = ' style="font-weight:700"' if changed else ""
        rows.append(f"<tr{style}><td>{node}</td><td>{shown.token}</td>"
                    f"<td>{shown.token_prob:.3f}</td><td>{_credit(now)}</td><td>{_verdict(now)}</td>"
                    f"<td>{_verdict(then)}</td></tr>")
    if not rows:
        return f"<p>Step {whatif.step} drafted nothing.</p>"
    return (f"<p>Step {whatif.step} (the replayed step), {whatif.drafted} drafts; rows in bold changed "
            "verdict.</p><table><thead><tr><th>node</th><th>code x</th><th>p(x)</th><th>credited set A</th>"
            "<th>here</th><th>as decoded</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _credit(verdict: Verdict | None) -> str:
    if verdict is None:
        return "-"
    return f"{len(verdict.neighbours)} codes, p {float(verdict.neighbour_mass.sum()):.3f}"


def _verdict(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not reached"
    return f"{'✔ kept' if verdict.accepted else '✘'} ({verdict.accept_prob:.2f})"


def whatif_figure(whatif: WhatIf | None) -> go.Figure | None:
    """Mean drafts kept a pass against delta, at the sliders' k and variant, the run and the sliders marked."""
    if whatif is None:
        return None
    deltas, kept = zip(*whatif.curve)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=deltas, y=kept, mode="lines+markers", name=f"k {whatif.asked.k}, {whatif.asked.variant}",
                             line=dict(color=CURVE_COLOUR, width=2), marker=dict(size=5)))
    fig.add_trace(go.Scatter(x=[whatif.run.delta], y=[whatif.run_kept], mode="markers", name="as decoded",
                             marker=dict(size=12, symbol="diamond", color=RUN_COLOUR)))
    fig.add_trace(go.Scatter(x=[whatif.asked.delta], y=[whatif.asked_kept], mode="markers", name="sliders",
                             marker=dict(size=14, color=ASKED_COLOUR, line=dict(color="#333", width=1))))
    fig.update_xaxes(title_text="delta", range=[-0.03, 1.03])
    fig.update_yaxes(title_text="drafts kept a pass", rangemode="tozero")
    return layout(fig, "The run's drafts judged at each delta", height=300)
