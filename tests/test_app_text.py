"""The page's words: the counters, the teaching text, the header and the frontier's caption say each
number once and each term before they lean on it."""
import json
import re

import pytest

from app.backend import shipped
from app.backend.lanes import run_to_end, summary
from app.backend.request import RELAXED_DEFAULTS, CompareRequest
from app.views import frontier_view, text
from engine.core.config import SamplingConfig
from engine.loading.embedded import embedded_metadata
from engine.methods import MethodOptions
from tests.conftest import TINY_GPT


@pytest.fixture
def finished(tiny_eagle):
    """A finished vanilla and EAGLE-2 run."""
    return run_to_end(tiny_eagle, ["vanilla", "eagle2"], SamplingConfig(temperature=0.0), 0, MethodOptions())


def _stat(counters: str, label: str) -> str:
    """The value of a counter box, as the panel prints it."""
    return re.search(r'600">([^<]*)</div><div[^>]*>' + re.escape(label) + "<", counters).group(1)


def test_the_teaching_text_and_the_counters_print_the_same_numbers(finished):
    vanilla, eagle = finished
    # Clocks whose ratio and per-pass times lie a hair below a rounding edge (7.28496 ms a pass, a 2.18496x
    # speed-up): a number rounded once for the counters and again for the text would print differently.
    vanilla.elapsed_ms = 7.28496 * (vanilla.passes - 1)
    eagle.elapsed_ms = vanilla.elapsed_ms / 2.18496
    rows = summary(finished)
    counters = [text.counters_html(row) for row in rows]
    lesson = text.how_it_works(finished, CompareRequest(), TINY_GPT.vocab_size)
    speed = _stat(counters[1], "speed-up")
    one_token = re.search(r"per target pass \(([\d.]+) ms\)", counters[0]).group(1)
    eagle_pass = re.search(r"per target pass \(([\d.]+) ms\)", counters[1]).group(1)
    assert f"(measured: {speed})" in lesson and f"| {speed} |" in lesson
    assert f"against {one_token} ms for vanilla" in lesson and f"= {eagle_pass} ms against" in lesson
    for counter in counters:
        assert f" {_stat(counter, 'time')} " in lesson  # the panels' clocks, summed in the text


def test_a_method_that_drafts_nothing_has_no_drafting_part(finished):
    vanilla, eagle = summary(finished)
    assert vanilla["ms_per_pass"]["draft"] == 0.0 < eagle["ms_per_pass"]["draft"]
    assert vanilla["undrafted_speedup"] == vanilla["speedup_vs_vanilla"] == 1.0
    assert 'data-part="draft"' not in text.counters_html(vanilla)
    assert 'data-part="draft"' in text.counters_html(eagle)


def test_the_counters_show_one_speed_up(finished):
    for row in summary(finished):
        counters = text.counters_html(row)
        assert re.findall(r">([\d.]+x)<", counters) == [_stat(counters, "speed-up")]
        assert "limit" not in counters and "MAL = tokens per target pass" in counters


def _sentences(markdown: str) -> list[str]:
    body = markdown.split("\n", 1)[1].strip()  # below the title
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*\[(])", body)


# A term's first use is defined where it stands (a bracket or a colon right after it) or its sentence
# links to the section that explains it.
_TERMS = {"MAL": r"\bMAL\b", "fid_proxy": r"fid_proxy", "speck": r"(?i)specks?\b", "top-p": r"(?i)top-p\b"}


def _undefined_terms(markdown: str) -> list[str]:
    seen, undefined = set(), []
    for sentence in _sentences(markdown):
        for term, pattern in _TERMS.items():
            found = re.search(pattern, sentence)
            if found is None or term in seen:
                continue
            seen.add(term)
            if not (re.match(r"\s*[(:]", sentence[found.end():]) or "](#teaching)" in sentence):
                undefined.append(term)
    return undefined


def test_the_header_is_four_plain_sentences_that_define_their_terms():
    header = text.intro_markdown(embedded_metadata())
    assert len(_sentences(header)) <= 4
    assert _undefined_terms(header) == []
    assert "](#teaching)" in header and "](#delta-whatif)" in header and "Swap in COOL-SD" in header
    # The check itself catches a term used bare.
    assert _undefined_terms("# t\nThe fid_proxy is low. MAL (tokens a pass) is 3. MAL is high.") == ["fid_proxy"]


def test_the_lesson_says_when_to_reach_for_cool_sd_and_where_its_settings_come_from():
    lesson = text.how_it_works(None, CompareRequest(), 1024)
    assert "When to reach for COOL-SD" in lesson and "p < 1e-4" in lesson and "Frontier" in lesson
    assert f"w {RELAXED_DEFAULTS['cool_w']:g}" in lesson and f"top-p {RELAXED_DEFAULTS['draft_top_p']:g}" in lesson
    assert "fid_proxy (" in lesson


def test_the_frontier_caption_says_why_a_panel_differs(tmp_path):
    frontier = json.loads(shipped.frontier_path(greedy=False).read_text())
    frontier["config"].update(n_images=128, speed_images=16, cpu="Example CPU 9000")
    path = shipped.frontier_path(greedy=False, assets=tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps(frontier))
    caption = frontier_view.frontier_chart(1.0, tmp_path)[1]
    assert "median over 16 images" in caption and "over all 128" in caption
    assert "on Example CPU 9000" in caption and "one image timed on this machine" in caption
    del frontier["config"]["cpu"]
    path.write_text(json.dumps(frontier))
    assert "on the machine that made this frontier" in frontier_view.frontier_chart(1.0, tmp_path)[1]
