"""The page's words: per-panel counters, the inspector's table and the "how it works" section,
built from run statistics as pure functions."""
from __future__ import annotations

import html

import numpy as np

from app.backend.lanes import Lane, summary
from app.backend.request import ALTERNATIVE_RELAXED, RELAXED_DEFAULTS, CompareRequest
from app.views.detail import TokenDetail
from engine.drafters.static_tree import EXACT_CHAIN, RELAXED_CHAIN
from engine.evaluation.speed import BASELINE
from engine.methods import METHODS, OPTION_RANGES, get_method

_BOX = ("display:inline-block;min-width:44px;margin:2px 3px 2px 0;padding:3px 6px;border-radius:8px;"
        "background:rgba(120,130,150,0.12);text-align:center;font-variant-numeric:tabular-nums")


def _stat(label: str, value: str) -> str:
    return (f'<div style="{_BOX}"><div style="font-size:1.15em;font-weight:600">{html.escape(value)}</div>'
            f'<div style="font-size:0.75em;opacity:0.75">{html.escape(label)}</div></div>')


# Every number the page prints in more than one place (a panel's counters and the teaching text) is
# formatted from the same `summary` row by the same function, so the two can never disagree.
def _times(ratio: float) -> str:
    return f"{ratio:.2f}x"


def _num(value: float) -> str:
    """A MAL or a time in ms."""
    return f"{value:.2f}"


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.2f} s"


def counters_html(row: dict) -> str:
    """One panel's live counters from its `summary` row, and what its method does."""
    ratio = row["speedup_vs_vanilla"]
    speed = ("…" if not row["done"] else "n/a") if ratio is None else _times(ratio)
    state = "done" if row["done"] else "decoding"
    kind = "lossless" if row["lossless"] else "lossy (relaxed)"
    return ('<div class="lane-stats">'
            + _stat("passes", str(row["target_passes"]))
            + _stat("tokens", f"{row['tokens']}")
            + _stat("MAL", _num(row["mean_accepted_length"]))
            + _stat("time", _seconds(row["wall_ms"]))
            + _stat("speed-up", speed)
            + _rows_stat(row)
            + time_split_html(row)
            + '<div class="lane-note" style="font-size:0.75em;opacity:0.7;margin-top:2px">'
            f'{state} · {kind} · MAL = tokens per target pass · speed-up against vanilla, once both are done</div>'
            + f'<div class="lane-note" style="font-size:0.8em;margin-top:4px">'
            f'{html.escape(METHODS[row["method"]].summary)}</div>'
            '</div>')


def _rows_stat(row: dict) -> str:
    """Rows a pass, for a method that decides rows in parallel (nothing in raster order)."""
    most = row["most_rows_in_a_pass"]
    if most <= 1:
        return ""
    return (f'<span class="rows-stat" data-most-rows="{most}">'
            + _stat(f"rows a pass (up to {most})", _num(row["rows_per_pass"])) + "</span>")


# The parts of a target pass, in the order the bar stacks them, with their colours.
_SPLIT_COLOURS = {"draft": "#e8a33d", "verify": "#4c78a8", "accept": "#59a14f", "other": "#9aa0a6"}


def time_split_html(row: dict) -> str:
    """Where a panel's decode time went: one stacked bar, each part's ms per target pass and share."""
    split = row["ms_per_pass"]
    wall = split["wall"]
    if wall <= 0:
        return ""
    # A method that drafts nothing has no drafting part (engine.evaluation.speed.pass_split gives it 0).
    parts = [(part, colour, max(0.0, split[part]) / wall) for part, colour in _SPLIT_COLOURS.items()
             if part != "draft" or split[part]]
    bar = "".join(f'<span class="split-{part}" title="{part}: {_num(split[part])} ms a pass, {share:.0%}" '
                  f'style="height:100%;width:{share * 100:.2f}%;background:{colour}"></span>'
                  for part, colour, share in parts)
    legend = " · ".join(f'<span style="color:{colour}">■</span> {part} <span class="split-ms" data-part="{part}" '
                        f'data-ms="{split[part]:.3f}">{_num(split[part])}</span> ms ({share:.0%})'
                        for part, colour, share in parts)
    return (f'<div class="time-split" data-wall-ms="{row["wall_ms"]}" data-passes="{max(1, row["target_passes"] - 1)}" '
            'style="margin-top:4px;font-size:0.75em">'
            f'<div style="display:flex;height:10px;border-radius:4px;overflow:hidden;background:#eee">{bar}</div>'
            f'<div style="margin-top:2px;opacity:0.8">per target pass ({_num(wall)} ms): {legend}</div></div>')


def intro_markdown(metadata: dict) -> str:
    """The page's header: four plain sentences above the panels, every term either said in words or
    linked to the "How it works" section (elem_id "teaching"), the last describing the embedded model
    from its weights' own metadata (engine.loading.embedded.embedded_metadata)."""
    config, classes, sets = metadata.get("config", {}), metadata.get("class_names", []), metadata.get("image_sets", [])
    words = ["a LlamaGen GPT" + (f" of {config['n_layer']} layers, width {config['dim']}" if config else "")]
    if classes:
        words.append(f"which draws {len(classes)} emoji categories ({', '.join(classes)})")
    if sets:
        named = f"{', '.join(sets[:-1])} and {sets[-1]}" if len(sets) > 1 else sets[0]
        words.append(f"learnt from {len(sets)} artists' sets: {named}" if len(sets) > 1 else f"learnt from {named}")
    alternative = get_method(ALTERNATIVE_RELAXED).title
    return ("# LANTERN Explorer\n"
            "Three panels paint the same picture token by token and race, each clock counting only its own "
            "work: vanilla decoding runs the model once for every token, while EAGLE-2 and LANTERN let a small "
            "drafter guess several tokens that the model then checks in a single pass "
            "([How it works](#teaching)). "
            "LANTERN also accepts a guess when look-alike codes are likely enough, which is faster but lets in "
            "specks (tokens the model would almost never draw); its settings are delta, how much probability a "
            "guess may borrow from its look-alikes, and k, how many may lend it, and the "
            "[what-if view](#delta-whatif) below shows what they change as you move their sliders. "
            f"{alternative}, a relaxed rule that keeps vanilla's pictures at a smaller speed-up, is one click "
            f"away: *Swap in {alternative}* puts it in the third panel. "
            f"The model is small enough for a CPU: {', '.join(words)} (credits in the README).")


def relaxed_alternative_sentence() -> str:
    """When to reach for the relaxed alternative (app.backend.request.ALTERNATIVE_RELAXED), and where its
    settings (app.backend.request.RELAXED_DEFAULTS) come from."""
    title = get_method(ALTERNATIVE_RELAXED).title
    settings = ", ".join(f"{OPTION_RANGES[name][0].removeprefix(title + ' ')} {value:g}"
                         for name, value in RELAXED_DEFAULTS.items())
    return (f"**When to reach for {title}.** When the pictures must stay vanilla's. LANTERN is faster but adds "
            "specks: tokens the target would almost never draw, p < 1e-4. The fastest setting on the frontier (the "
            "*Frontier* tab) whose class accuracy, fid_proxy (how far the pictures' classifier features lie from "
            f"held-out ones) and share of specks stay within vanilla's 95 % intervals is {title} at {settings}, "
            f"where the page's {title} settings start (w scales the target's belief in a draft; top-p keeps drafts "
            "among the drafter's likeliest codes).")


def model_status(model, methods: list[str], is_text: bool) -> str:
    """One line under the model selector: what was loaded and what it can run."""
    cfg = model.target.cfg
    free = ", ".join(method.title for method in METHODS.values() if method.drafter is None)
    drafters = ", ".join(sorted(model.drafters)) or f"none ({free} run without one)"
    condition = "a caption" if is_text else f"{cfg.num_classes} classes"
    return (f"**{model.name}**: {cfg.n_layer} layers, width {cfg.dim}, {cfg.grid_size} x {cfg.grid_size} "
            f"tokens from {cfg.vocab_size} codes, conditioned on {condition}. Drafters: {drafters}. "
            f"Panels: {', '.join(methods)}.")


def waiting_html(message: str) -> str:
    return f'<div class="lane-stats" style="opacity:0.7">{html.escape(message)}</div>'


def detail_markdown(title: str, detail: TokenDetail | None, grid: int, neighbours: np.ndarray | None,
                    request: CompareRequest) -> str:
    """The inspector: what was drafted at a position, and why it was kept or not. `neighbours` (the
    draft's nearest codes) is given only for methods whose rule credits them."""
    if detail is None:
        return "Click a token of an image (or move the step slider) to inspect how it was decided."
    row, col = divmod(detail.position, grid)
    how = "an **accepted draft**" if detail.from_draft else "drawn by the **target itself** (bonus or correction)"
    lines = [f"**{title}, row {row}, column {col} (step {detail.step})**: kept code **{detail.token}**, {how}."]
    if not detail.candidates:
        lines.append("\nNo draft reached this position (the draft tree ended before it, or the method drafts "
                     "nothing), so the target drew it itself: the pass's bonus token.")
        return "\n".join(lines)
    lines += ["", "| draft x | p(x) | accept | | credited with x (A \\ {x} or group): code (p) |",
              "|---|---|---|---|---|"]
    for cand in detail.candidates:
        used = ", ".join(f"{t} ({m:.3f})" for t, m in zip(cand.neighbours[:5], cand.neighbour_mass[:5]))
        more = f", … {len(cand.neighbours) - 5} more" if len(cand.neighbours) > 5 else ""
        credit = "none"
        if len(cand.neighbours):
            credit = f"{len(cand.neighbours)} codes, Σp = {cand.neighbour_mass.sum():.3f}: {used}{more}"
        verdict = "✔ kept" if cand.accepted else "✘"
        lines.append(f"| {cand.token} | {cand.token_prob:.3f} | {cand.accept_prob:.3f} | {verdict} | {credit} |")
    if neighbours is not None:
        probs = detail.candidates[0].latent_probs
        if len(probs) == len(neighbours):
            shown = ", ".join(f"{int(t)} ({q:.3f})" for t, q in zip(neighbours[:8], probs[:8]))
            total = f" (Target p in brackets; together they hold {probs.sum():.3f}.)"
        else:
            shown, total = ", ".join(str(int(t)) for t in neighbours[:8]), ""
        lines.append(f"\nThe {len(neighbours)} nearest codes of draft {detail.drafted} (k = {request.k}), nearest "
                     f"first: {shown}{' …' if len(neighbours) > 8 else ''}.{total} "
                     "Under LANTERN's rule, A takes them in this order while their summed target probability "
                     f"stays within delta = {request.delta:g} (LANTERN++: within (lambda - 1) p(x), "
                     f"lambda = {request.lantern_lambda:g}).")
    return "\n".join(lines)


def _mean_entropy(lanes: list[Lane]) -> float | None:
    values = [e for lane in lanes for t in lane.traces for e in t.entropy_bits]
    return float(np.mean(values)) if values else None


def _mean_credit(lane: Lane) -> tuple[float, float] | None:
    """(mean |A \\ {x}|, mean credited mass) over a lane's tested drafts; None for exact rules."""
    verdicts = [v for t in lane.traces for v in t.verdicts]
    sizes = [len(v.neighbours) for v in verdicts]
    if not verdicts or not any(sizes):
        return None
    return float(np.mean(sizes)), float(np.mean([np.sum(v.neighbour_mass) for v in verdicts]))


def _run_table(lanes: list[Lane], rows: list[dict]) -> list[str]:
    table = ["| method | mean accept prob | MAL | speed-up | mean A \\ {x} |", "|---|---|---|---|---|"]
    for lane, stats in zip(lanes, rows):
        prob = "-" if stats["mean_accept_prob"] is None else f"{stats['mean_accept_prob']:.3f}"
        ratio = "n/a" if stats["speedup_vs_vanilla"] is None else _times(stats["speedup_vs_vanilla"])
        credit = _mean_credit(lane)
        a_size = "-" if credit is None else f"{credit[0]:.1f} codes, p {credit[1]:.3f}"
        rule = "lossless" if lane.lossless else "relaxed"
        table.append(f"| {lane.title} ({rule}) | {prob} | {_num(stats['mean_accepted_length'])} | {ratio} | {a_size} |")
    return table


def _clocks(rows: list[dict], wall_ms: float | None) -> str:
    """Where the comparison's time went: the panels' own clocks against the whole wall time."""
    decoding = sum(row["wall_ms"] for row in rows)
    clocks = " + ".join(_seconds(row["wall_ms"]) for row in rows)
    line = f"The panels' clocks count their own decoding only: {clocks} = {_seconds(decoding)}"
    if wall_ms is None:
        return line + "."
    return (line + f". The whole comparison took **{_seconds(wall_ms)}** here, one panel at a time on the "
            "same cores; the rest went to setting up and drawing the pictures.")


def _cost_sentence(rows: list[dict]) -> str | None:
    """Why the fastest-accepting panel's speed-up is what it is, in the run's own numbers: its `summary`
    row's, which its counters show too."""
    baseline = next((row for row in rows if row["method"] == BASELINE and row["done"]), None)
    others = [row for row in rows if row["method"] != BASELINE and row["done"] and row["target_passes"] > 1]
    if baseline is None or not others:
        return None
    row = max(others, key=lambda other: other["mean_accepted_length"])
    mal, one_token, split = row["mean_accepted_length"], baseline["ms_per_pass"]["wall"], row["ms_per_pass"]
    estimate = mal * one_token / split["wall"]
    rest = split["accept"] + split["other"]
    return (f"**Why accepted length is not speed.** A speed-up is about MAL x (one-token pass) / (drafting + "
            f"verifying the tree + the rest). In the last run {row['title']} kept **{_num(mal)}** "
            f"tokens a pass, its limit, but each of its passes cost {_num(split['draft'])} ms drafting + "
            f"{_num(split['verify'])} ms verifying + {_num(rest)} ms the rest = "
            f"{_num(split['wall'])} ms against {_num(one_token)} ms for vanilla's one-token pass: "
            f"{_num(mal)} x {_num(one_token)} / {_num(split['wall'])} = {_times(estimate)} "
            f"(measured: {_times(row['speedup_vs_vanilla'])}). Drafting alone costs "
            f"{split['draft'] / one_token:.0%} of a one-token pass here, where each drafter call pays a fixed "
            f"per-operation cost on the CPU; verifying the tree costs {split['verify'] / one_token:.2f} one-token "
            f"passes, so even free drafting would give at most {_num(mal)} x {_num(one_token)} / "
            f"{_num(split['verify'] + rest)} = {_times(row['undrafted_speedup'])}. "
            "On LlamaGen-XL on a GPU a drafter call is one layer of 36 (about 3 % of a pass) and verifying tens "
            "of tokens costs about one pass, so nearly all of the accepted length survives.")


def how_it_works(lanes: list[Lane] | None, request: CompareRequest, vocab: int,
                 wall_ms: float | None = None) -> str:
    """The teaching section, quoting the numbers of the last run when there is one."""
    uniform = np.log2(vocab)
    entropy = _mean_entropy(lanes) if lanes else None
    flat = (f"In the last run the target's next-token distribution had **{entropy:.2f} bits** of entropy "
            f"on average" if entropy is not None else "Its entropy is typically several bits")
    parts = [
        "### How it works",
        f"**Token selection ambiguity.** Every image token is one of {vocab:,} codebook entries, and many "
        f"of them decode to almost the same patch. So the model's next-token distribution is flat. {flat} "
        f"(a certain choice is 0 bits, a uniform guess over the codebook {uniform:.0f} bits). A drafter's "
        "best guess is then often not the token the target picks, and an exact acceptance test throws "
        "many drafts away.",
        "**The acceptance rule.** A drafter proposes a tree of tokens; the target scores all of them in "
        "one forward pass. A lossless rule (EAGLE-2) keeps a drafted token x with probability "
        "min(1, p(x) / q(x)), where p is the target's distribution and q the drafter's (q(x) = 1 for a "
        "tree drafter's deterministic picks), and otherwise draws from what is left of p: the output "
        "is distributed exactly as vanilla decoding's. Lossless means the same distribution, not the same "
        "picture: when sampling, a lossless method spends its random numbers differently, so one seed draws "
        "another sample; at temperature 0 the pictures are identical.",
        "**LANTERN's relaxation.** LANTERN also credits x with the probability of its nearest codes in the "
        "latent space: the set A = {x, n1, …, nj} of x's k nearest neighbours, taken nearest first while "
        "their summed probability stays within **delta**. It accepts with min(1, (p(x) + Σ p(ni)) / q(x)). "
        "delta bounds how far (in total variation) each decided distribution may move: a larger delta "
        "accepts more drafts and runs faster, at some cost in fidelity; **k** caps how many neighbours "
        f"are eligible. Current setting: delta = {request.delta:g}, k = {request.k}, {request.lantern_variant} "
        f"variant, lambda = {request.lantern_lambda:g}.",
        relaxed_alternative_sentence(),
        second_dimension(lanes, request),
    ]
    if lanes:
        rows = summary(lanes)  # the numbers the panels' counters show, so that both say the same
        parts += ["**The last run in numbers** (MAL: tokens kept per target pass):", "\n".join(_run_table(lanes, rows)),
                  _clocks(rows, wall_ms)]
        parts += [sentence for sentence in [_cost_sentence(rows)] if sentence]
    return "\n\n".join(parts)


def second_dimension(lanes: list[Lane] | None, request: CompareRequest) -> str:
    """Why rows may be decided in parallel, with the last run's rows a pass where it had several."""
    parallel = [lane for lane in lanes or [] if lane.rows_per_pass > 1.0]
    measured = "".join(f" In the last run **{lane.title}** decided tokens in **{lane.rows_per_pass:.2f} rows** a pass "
                       "on average." for lane in parallel)
    return ("**A second dimension.** Speculative decoding still decides the picture in reading order, row after "
            "row. But an image token depends mostly on the tokens around it: the start of a row needs the row "
            "above near it, not that row's far end. So the row-parallel methods (ZipAR, PJD, and a drafter per "
            "row) start row r + 1 once row r is a **window** of tokens ahead, and decide every row in flight in "
            "one target pass: the acceptance map then outlines a diagonal front of cells a pass, not a run along "
            "one row. A token sees only what the rows above had decided when it was decided, so a smaller window "
            f"is faster and strays further from the target (current window: {request.row_window}, rows in flight "
            f"at most {request.rows_in_flight}; a window of the grid's width is raster order).{measured}")


def methods_markdown() -> str:
    """The methods of the panels' menus, each in its registry's words, then the settings they share:
    the page folds it away, beside the lesson."""
    return "\n\n".join(_more_methods())


def _more_methods() -> list[str]:
    listed = "\n".join(f"* **{method.title}** ({'lossless' if method.lossless else 'relaxed'}): {method.summary}"
                       for method in METHODS.values())
    return [
        "**The methods:**\n\n" + listed,
        "**The LANTERN variant** (LANTERN, LANTERN++, relaxed SJD): *official* follows LANTERN's released "
        "code, which after rejecting a draft that borrowed mass also rules out the k + 1 nearest codes of "
        "x and, when greedy, keeps x if crediting A makes it the most likely code; *paper* moves A's mass "
        "onto x and runs the exact rule on that distribution, so each step moves at most delta.",
        "**LANTERN++** drafts a static tree with the EAGLE drafter (its **static tree** lists paths of draft "
        "ranks: `0 1 0.0` is the best and second-best token, then the best after the best; left empty, "
        f"each method drafts its own chain, {len(RELAXED_CHAIN)} deep for LANTERN's rules and {len(EXACT_CHAIN)} "
        "for EAGLE) and bounds A's "
        "mass by (**lambda** - 1) p(x) instead of delta, so a likely draft may borrow more than an unlikely one. "
        "EAGLE drafts the same static tree under the exact rule: LANTERN++'s lossless baseline, and "
        "*LANTERN (static tree)* judges it with LANTERN's delta. When sampling, a static tree samples its "
        "drafts and judges each with p̃(x) / q(x), where p̃ is p after the credit, which lifts it to near "
        "certainty, while the dynamic tree's deterministic drafts pass with p̃(x) alone. So above "
        "temperature 0 a LANTERN panel runs *LANTERN (static tree)*, and its menu says so.",
        "**The dynamic tree** (EAGLE-2, LANTERN) grows up to **depth** levels and keeps the **total tokens** "
        "most promising nodes; ranked by the *rule*, a node's score is its estimated chance of being "
        "reached and accepted, so LANTERN's trees grow deep where its rule accepts nearly everything, and "
        "a node is only expanded while that chance is at least the **least score**.",
        "**Jacobi methods** need no trained drafter: the target's own guesses from its last pass are the next "
        "drafts. SJD accepts them with the exact rule; coupled SJD redraws each guess by maximal coupling "
        "with the previous one, so drafts stay put as often as possible and it remains lossless; relaxed "
        "SJD judges them with LANTERN's rule. Their **initialisation** is what a position never guessed "
        "starts as: a random code, a copy of the code to its left, or of the one above.",
        "**GSD** judges a Jacobi draft x together with a group: codes within the rank **window** of x in the "
        "target's sorted p whose probability differs from p(x) by less than the **p gap** and whose "
        "embedding lies within the **distance** of x's (a fraction of the mean squared distance); it accepts "
        "with min(1, Σ p / Σ q) over the group. An empty window scales the published 7 to the codebook.",
    ]
