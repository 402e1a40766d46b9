"""Plotly figures drawn from traces and shipped arrays; pure functions, no model needed."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from app.views.detail import TokenDetail
from engine.core.trace import StepTrace

PANEL_COLOURS = ("#6b7a99", "#3d8bfd", "#f5a623")  # one per panel, left to right
FRONTIER_COLOURS = ("#f5a623", "#c2410c", "#3d8bfd", "#2ec478", "#a855f7", "#0f766e",
                    "#db2777", "#64748b", "#854d0e", "#0891b2", "#65a30d", "#1e3a8a")  # one per frontier series
MAX_TICKS = 8  # per axis of the accepted-length plot: more crowd a third of the page's width
ACCEPTED, REJECTED, UNTESTED, ROOT = "#2ec478", "#e5484d", "#c9ced8", "#6b7a99"
# Plotly's toolbar (the modebar) lies over a figure's top right corner: on hover with a mouse, but
# always on a touch screen, where it covered the titles of a phone's narrow charts. The title goes
# under a strip the height of the toolbar's row, and the toolbar keeps only the buttons these charts
# use, so that it stays one row on a narrow chart.
MODEBAR_HEIGHT = 34  # px from the figure's top: the toolbar's row (measured: 27) and a gap
TITLE_SIZE, TITLE_LINE = 14, 18  # px: the titles' font and a line of it
TITLE_LIFT = 10  # px: Plotly lifts a title by about half a line for each line past its first (measured)
MODEBAR_UNUSED = ("select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d")
NODE_SIZE, NODE_LABEL_SIZE = 13, 9  # px: a draft tree's markers and the codes written beside them


def _has_legend(fig: go.Figure) -> bool:
    return any(trace.showlegend is not False for trace in fig.data)


def _title_pad(title: str) -> int:
    """How far below the figure's top a title is placed so that its first line clears the toolbar."""
    return MODEBAR_HEIGHT + title.count("<br>") * TITLE_LIFT


def _title_top(title: str) -> int:
    """The top margin a title needs under the toolbar's strip: one line per <br>, and a gap."""
    return MODEBAR_HEIGHT + (title.count("<br>") + 1) * TITLE_LINE + 12


def layout(fig: go.Figure, title: str, height: int = 300) -> go.Figure:
    """Title, margins and legend; `height` is the figure's below the toolbar's strip, which is added
    to it rather than taken from the axes."""
    # The legend goes under the axes: beside the title it would cover it on a phone's narrow chart.
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=TITLE_SIZE), yref="container", y=1,
                                 yanchor="top", pad=dict(t=_title_pad(title))), height=height + MODEBAR_HEIGHT,
                      margin=dict(l=48, r=16, t=_title_top(title), b=110 if _has_legend(fig) else 48),
                      template="plotly_white", paper_bgcolor="rgba(0,0,0,0)",
                      modebar=dict(remove=list(MODEBAR_UNUSED)),
                      legend=dict(orientation="h", x=0, xanchor="left", yref="container", y=0.0, yanchor="bottom"))
    return fig


def accepted_length_figure(series: Sequence[tuple[str, Sequence[int]]], step: int | None = None) -> go.Figure:
    """Tokens per target pass, per step, one line per method; `step` draws the scrubber's position."""
    fig = go.Figure()
    for index, (title, lengths) in enumerate(series):
        mean = float(np.mean(lengths)) if len(lengths) else 0.0
        fig.add_trace(go.Scatter(x=np.arange(1, len(lengths) + 1), y=list(lengths), mode="lines",
                                 line=dict(shape="hv", width=1.6, color=PANEL_COLOURS[index % 3]),
                                 name=f"{title} (mean {mean:.2f})"))
    if step is not None:
        fig.add_vline(x=step, line=dict(color="#888", dash="dot"))
    longest = max((max(lengths) for _, lengths in series if len(lengths)), default=1)
    fig.update_xaxes(title_text="target pass (after the prefill)", nticks=MAX_TICKS)
    # Whole tokens only, and no more ticks than MAX_TICKS however long the accepted runs get.
    fig.update_yaxes(title_text="tokens produced", rangemode="tozero", dtick=-(-longest // MAX_TICKS) or 1)
    return layout(fig, "Accepted length per step", height=320)


def latent_figure(coords: np.ndarray, projection: str, detail: TokenDetail | None = None,
                  neighbours: np.ndarray | None = None, probs: dict[int, float] | None = None) -> go.Figure:
    """The codebook in 2-D; with a selected token: its drafts, k nearest neighbours and set A."""
    fig = go.Figure()
    ids = np.arange(len(coords))
    fig.add_trace(go.Scatter(x=coords[:, 0], y=coords[:, 1], mode="markers", name="codebook",
                               marker=dict(size=4, color="#c9ced8"), text=[f"code {i}" for i in ids],
                               hoverinfo="text"))
    if detail is not None and detail.candidates:
        first = detail.candidates[0]
        if neighbours is not None:
            probs = first.latent_probs if len(first.latent_probs) == len(neighbours) else None
            # Marker area follows the target's probability, so where the mass sits shows at a glance.
            size = 7 if probs is None else 6 + 60 * np.sqrt(probs)
            hover = None if probs is None else [f"code {t}: target p = {q:.4f}" for t, q in zip(neighbours, probs)]
            _points(fig, coords, neighbours, f"{len(neighbours)} nearest of draft {first.token}",
                    dict(size=size, color="rgba(61,139,253,0.15)", line=dict(color="#3d8bfd", width=1)), hover)
        for cand in detail.candidates:
            if len(cand.neighbours):
                _points(fig, coords, cand.neighbours, f"A of {cand.token} (mass {cand.neighbour_mass.sum():.3f})",
                        dict(size=9 + 60 * np.sqrt(cand.neighbour_mass), color="#f5a623", opacity=0.85),
                        [f"code {t}: p = {m:.4f}" for t, m in zip(cand.neighbours, cand.neighbour_mass)])
        tried = np.array([c.token for c in detail.candidates])
        _points(fig, coords, tried, "drafts tried", dict(size=12, symbol="x", color=REJECTED),
                [f"draft {c.token}: target p = {c.token_prob:.4f}, accept prob {c.accept_prob:.3f}"
                 for c in detail.candidates])
    if detail is not None:
        label = "kept (accepted draft)" if detail.from_draft else "kept (target's own draw)"
        _points(fig, coords, np.array([detail.token]), label,
                dict(size=16, symbol="star", color=ACCEPTED, line=dict(color="#114", width=1)))
    fig.update_xaxes(showticklabels=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, zeroline=False, scaleanchor="x")
    fig = layout(fig, f"VQ codebook ({projection})", height=360)
    # Up to five entries: below the plot they never run into the title.
    return fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", yref="paper", y=0, yanchor="top"),
                             margin=dict(b=90))


def _points(fig: go.Figure, coords: np.ndarray, tokens: np.ndarray, name: str, marker: dict,
            text: list[str] | None = None) -> None:
    tokens = np.asarray(tokens, np.int64)
    fig.add_trace(go.Scatter(x=coords[tokens, 0], y=coords[tokens, 1], mode="markers", name=name,
                             marker=marker, hoverinfo="text",
                             text=text or [f"code {t}" for t in tokens]))


def tree_layout(parents: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """(N, 2) node coordinates: x = depth, y spreads the nodes of each depth evenly around 0."""
    xy = np.zeros((len(parents), 2))
    for depth in np.unique(depths):
        nodes = np.flatnonzero(depths == depth)
        xy[nodes, 0] = depth
        xy[nodes, 1] = np.arange(len(nodes))[::-1] - (len(nodes) - 1) / 2
    return xy


def tree_figure(trace: StepTrace, highlight: Sequence[int] = ()) -> go.Figure:
    """The step's draft tree: accepted path green, rejected drafts red, untested ones grey."""
    parents, depths = np.asarray(trace.tree_parents), np.asarray(trace.tree_depths)
    xy = tree_layout(parents, depths)
    tested = {v.node: v for v in trace.verdicts}
    colours, text = [], []
    for node, token in enumerate(np.asarray(trace.tree_tokens)):
        verdict = tested.get(node)
        if node == 0:
            colours.append(ROOT)
        else:
            colours.append(UNTESTED if verdict is None else ACCEPTED if verdict.accepted else REJECTED)
        status = "root" if node == 0 else "untested" if verdict is None else (
            f"accept prob {verdict.accept_prob:.3f}, {'accepted' if verdict.accepted else 'rejected'}")
        text.append(f"node {node}: code {int(token)}, q {float(trace.tree_q[node]):.3f}, {status}")
    edge_x, edge_y = [], []
    for node in range(1, len(parents)):
        parent = int(parents[node])
        edge_x += [xy[parent, 0], xy[node, 0], None]
        edge_y += [xy[parent, 1], xy[node, 1], None]
    fig = go.Figure(go.Scatter(x=edge_x, y=edge_y, mode="lines", line=dict(color="#b8bfcc", width=1),
                               hoverinfo="skip", showlegend=False))
    ring = [2.5 if node in set(highlight) else 0.5 for node in range(len(parents))]
    deepest = int(depths.max())
    # Beyond MAX_TICKS levels a node's code no longer fits beside it: hovering shows it instead.
    labelled = deepest <= MAX_TICKS
    labels = [str(int(t)) for t in trace.tree_tokens]
    # A code is written right of its node; the deepest level's run past the axes into the right
    # margin, which is made wide enough for them instead of cutting them at the axes' edge.
    fig.add_trace(go.Scatter(x=xy[:, 0], y=xy[:, 1], mode="markers+text" if labelled else "markers",
                             showlegend=False, cliponaxis=False,
                             marker=dict(size=NODE_SIZE, color=colours, line=dict(color="#111", width=ring)),
                             text=labels if labelled else None,
                             textposition="middle right", textfont=dict(size=NODE_LABEL_SIZE), hovertext=text,
                             hoverinfo="text"))
    fig.update_xaxes(title_text="depth", dtick=-(-deepest // MAX_TICKS) or 1, zeroline=False)
    fig.update_yaxes(showticklabels=False, zeroline=False, showgrid=False)
    fig = layout(fig, f"Draft tree of step {trace.step} ({len(parents) - 1} drafts)", height=240)
    if labelled:
        fig.update_layout(margin=dict(r=max(fig.layout.margin.r, label_reach(max(map(len, labels))))))
    return fig


def label_reach(digits: int) -> int:
    """How far, in px, a node's code written right of it reaches past the node's centre: half the
    marker, Plotly's gap and the digits (about 0.6 of the font size each), with a little to spare."""
    return int(NODE_SIZE / 2 + 3 + digits * 0.6 * NODE_LABEL_SIZE) + 8


# The quality axes of the trade-off chart: the value, its interval where the sweep has one, the axis title.
QUALITY_AXES = (("class_accuracy", "class_accuracy_ci", "class accuracy"),
                ("logp_gap", "logp_gap_ci", "log p per token vs vanilla"))


def _error_bars(points: Sequence[dict], key: str, interval: str) -> dict | None:
    if not all(interval in p for p in points):
        return None
    return dict(type="data", symmetric=False, thickness=1, width=3, color="#888",
                array=[p[interval][1] - p[key] for p in points], arrayminus=[p[key] - p[interval][0] for p in points])


def tradeoff_figure(points: Sequence[dict], delta: float, k: int, title: str = "") -> go.Figure:
    """Speed-up against quality over a (delta, k) sweep, 95 % intervals as bars where the sweep has
    them, the current slider setting ringed."""
    from plotly.subplots import make_subplots

    # One quality measure above the other: side by side, their axis titles collide on a phone.
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.16)
    ks = sorted({int(p["k"]) for p in points})
    current = nearest_point(points, delta, k)
    for row, (key, interval, name) in enumerate(QUALITY_AXES, start=1):
        shown = [p for p in points if p.get(key) is not None]
        labels = [f"delta {p['delta']:g}, k {p['k']}: {p['speedup']:.2f}x, MAL {p['mal']:.2f}, {name} {p[key]:.3f}"
                  for p in shown]
        fig.add_trace(go.Scatter(
            x=[p["speedup"] for p in shown], y=[p[key] for p in shown], mode="markers",
            error_y=_error_bars(shown, key, interval), text=labels, hoverinfo="text", showlegend=row == 1,
            name="sweep point", marker=dict(size=[8 + 3 * ks.index(int(p["k"])) for p in shown],
                                            color=[p["delta"] for p in shown], colorscale="Viridis", cmin=0,
                                            colorbar=dict(title="delta", len=0.45, y=0.78) if row == 1 else None,
                                            line=dict(color="#333", width=0.5))), row=row, col=1)
        if current is not None and current.get(key) is not None:
            fig.add_trace(go.Scatter(
                x=[current["speedup"]], y=[current[key]], mode="markers", showlegend=row == 1,
                name=ringed_label(current, delta, k), hoverinfo="skip",
                marker=dict(size=22, symbol="circle-open", color="#e5484d", line=dict(width=3))),
                row=row, col=1)
        fig.update_xaxes(title_text="speed-up vs vanilla" if row == 2 else None, row=row, col=1)
        fig.update_yaxes(title_text=name, row=row, col=1)
    return layout(fig, title or "Speed-up against quality (size: k)", height=440)


def ringed_label(point: dict, delta: float, k: int) -> str:
    """What the ring marks: the sliders' own setting when the sweep measured it, else the nearest
    point the sweep has, with the sliders' values beside it."""
    if np.isclose(point["delta"], delta) and int(point["k"]) == int(k):
        return f"your setting (delta {delta:g}, k {k}), as measured"
    return f"measured point nearest your setting: delta {point['delta']:g}, k {point['k']} (sliders: {delta:g}, {k})"


def nearest_point(points: Sequence[dict], delta: float, k: int) -> dict | None:
    """The sweep point closest to the slider setting (delta first, then k on a log scale)."""
    if not points:
        return None
    return min(points, key=lambda p: (abs(p["delta"] - delta), abs(np.log(p["k"]) - np.log(max(k, 1)))))


def frontier_figure(frontier: dict, title: str) -> go.Figure:
    """Speed-up against one quality measure per relaxed rule, a line along each rule's knob, with
    95 % intervals; vanilla's interval is the grey band. A series run on another CPU is dashed and judged
    against that CPU's vanilla, the dashed band. A menu switches the measure."""
    from engine import QUALITY_MEASURES

    fig = go.Figure()
    vanilla = frontier.get("vanilla") or {}
    measures = [m for m in QUALITY_MEASURES if any(p.get(m[0]) is not None
                                                   for s in frontier["series"] for p in s["points"])]
    for index, (key, interval, name) in enumerate(measures):
        for number, series in enumerate(frontier["series"]):
            shown = [p for p in series["points"] if p.get(key) is not None]
            knob = series["knob"]
            elsewhere = f" (on {series.get('cpu')}, against its vanilla)" if "vanilla" in series else ""
            fig.add_trace(go.Scatter(
                x=[p["speedup"] for p in shown], y=[p[key] for p in shown], mode="lines+markers",
                name=series["label"], legendgroup=series["label"], showlegend=index == 0, visible=index == 0,
                line=dict(color=FRONTIER_COLOURS[number % len(FRONTIER_COLOURS)], width=1.5,
                          dash="dash" if elsewhere else "solid"),
                error_y=_error_bars(shown, key, interval),
                text=[f"{series['label']}{elsewhere}: {knob} {p[knob]:g}, {p['speedup']:.2f}x, MAL {p['mal']:.2f}, "
                      f"{name} {p[key]:.3f}" for p in shown], hoverinfo="text"))
    traces_per_measure = len(frontier["series"])
    # Each other CPU's vanilla once, however many series ran there.
    elsewhere_vanillas = list({s.get("cpu"): s["vanilla"] for s in frontier["series"] if "vanilla" in s}.values())

    def band(key: str, interval: str) -> list[dict]:
        shapes = []
        if vanilla.get(interval) is not None:
            low, high = vanilla[interval]
            shapes.append(dict(type="rect", xref="paper", x0=0, x1=1, y0=low, y1=high,
                               fillcolor="rgba(120,120,120,0.18)", line=dict(width=0), layer="below"))
        for other in elsewhere_vanillas:
            if other.get(interval) is not None:
                low, high = other[interval]
                shapes.append(dict(type="rect", xref="paper", x0=0, x1=1, y0=low, y1=high, layer="below",
                                   fillcolor="rgba(0,0,0,0)", line=dict(width=1, dash="dash", color="#777")))
        return shapes

    buttons = [dict(label=name, method="update",
                    args=[{"visible": [i // traces_per_measure == index for i in range(len(fig.data))]},
                          {"yaxis.title.text": name, "shapes": band(key, interval)}])
               for index, (key, interval, name) in enumerate(measures)]
    if measures:
        fig.update_layout(shapes=band(measures[0][0], measures[0][1]), yaxis_title=measures[0][2],
                          updatemenus=[dict(buttons=buttons, x=0, xanchor="left", y=1.0, yanchor="bottom",
                                            direction="down", showactive=True)])
    fig.update_xaxes(title_text="speed-up vs vanilla")
    layout(fig, title, height=460)
    # The measure's menu sits between the title and the axes.
    return fig.update_layout(margin=dict(t=_title_top(title) + 32))
