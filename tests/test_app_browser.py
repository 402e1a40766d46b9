"""The page in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright): load, move delta,
run, wait, check images and plots, click a token; screenshots go to screenshots/ (git-ignored)."""
import json
import re
import time
from pathlib import Path

import pytest
import torch

from engine.methods import METHODS
from tests.conftest import free_port
from tests.test_app_server import method_args
from tests.test_app_server import pytestmark as needs_embedded_model

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
SHOTS = Path(__file__).resolve().parent.parent / "screenshots"
pytestmark = [needs_embedded_model,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed (apt-get install chromium)")]
torch.set_num_threads(1)


def make_runtime():
    from tests.test_app_server import make_runtime as server_runtime

    return server_runtime()


@pytest.fixture(scope="module")
def page_url():
    from app.page.ui import build_demo, launch_options

    runtime = make_runtime()
    runtime.start(warm=True)  # the page shows a first comparison at load
    demo = build_demo(runtime)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, server_port=free_port(), **launch_options())
    yield url, runtime
    demo.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        yield browser
        browser.close()


def _image_sources(page) -> list:
    return page.evaluate("[0, 1, 2].map(i => document.querySelector(`#image-${i} img`)?.src || null)")


def _run_to_the_end(page) -> None:
    """Press Run, see the first new picture, then wait for the comparison to end."""
    before = _image_sources(page)
    page.click("#run-button")
    page.wait_for_function(f"document.querySelector('#image-0 img')?.src !== {before[0]!r}", timeout=120_000)
    page.wait_for_function("!document.body.classList.contains('comparing')", timeout=300_000)


def _choose_methods(page, runtime) -> None:
    """Where the shipped model lacks a default method's drafter, pick the stand-in in its panel."""
    for name, method in method_args(runtime).items():
        index = int(name.rsplit("_", 1)[1]) - 1
        title = METHODS[method].title
        page.locator(f"#method-{index} input").click()
        page.get_by_role("option", name=title, exact=True).click()


# A panel's time split as the page shows it: its parts in ms per pass, its passes and decode time.
_SPLIT_JS = """selector => {
    const split = document.querySelector(selector + ' .time-split');
    if (!split) return null;
    return {parts: [...split.querySelectorAll('.split-ms')].map(e => Number(e.dataset.ms)),
            passes: Number(split.dataset.passes), wall_ms: Number(split.dataset.wallMs)};
}"""


def test_page_runs_a_comparison_end_to_end(page_url, browser):
    url, runtime = page_url
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.goto(url, wait_until="domcontentloaded")
    # Run sits above the folded settings: pressable without scrolling.
    page.wait_for_selector("#run-button")
    assert page.locator("#run-button").bounding_box()["y"] + page.locator("#run-button").bounding_box()["height"] < 1200
    # Something meaningful at load: the codebook map at once, then the start-up comparison's images.
    page.wait_for_selector("#latent-plot .js-plotly-plot", timeout=300_000)
    page.wait_for_function("[0, 1, 2].every(i => document.querySelector(`#image-${i} img`))", timeout=300_000)
    page.screenshot(path=str(SHOTS / "1_page_load.png"), full_page=True)
    _choose_methods(page, runtime)

    delta = page.locator("#delta-slider input[type=number]")
    delta.fill("0.25")
    delta.press("Enter")
    before = _image_sources(page)
    pressed = time.perf_counter()
    page.click("#run-button")
    page.wait_for_function(f"document.querySelector('#image-0 img')?.src !== {before[0]!r}", timeout=60_000,
                           polling=50)
    first_update_s = time.perf_counter() - pressed
    # The previous run's plots are greyed until this one ends.
    assert "comparing" in page.evaluate("document.body.className")
    # A mid-run picture: the LANTERN panel a quarter drawn (or done, should it finish first).
    page.wait_for_function("(() => { const text = document.querySelector('#stats-2').innerText;"
                           " const m = text.match(/(\\d+)\\s*tokens/);"
                           " return text.includes('done') || (m && Number(m[1]) >= 64); })()",
                           timeout=240_000, polling=50)
    page.screenshot(path=str(SHOTS / "2_streaming.png"), full_page=True)
    page.wait_for_function("document.querySelector('#teaching').innerText.includes('delta = 0.25')",
                           timeout=240_000)
    finished_s = time.perf_counter() - pressed
    page.wait_for_function("!document.body.classList.contains('comparing')", timeout=30_000)
    page.screenshot(path=str(SHOTS / "3_finished.png"), full_page=True)
    panels_s = sum(float(re.search(r"([\d.]+) s\s*time", page.text_content(f"#stats-{i}")).group(1))
                   for i in range(3))

    for index in range(3):
        size = page.evaluate(f"document.querySelector('#image-{index} img').naturalWidth")
        assert size == 256
        assert "done" in page.inner_text(f"#stats-{index}")
    # The three acceptance maps line up, whatever the length of the descriptions above them.
    tops = [page.locator(f"#map-{i}").bounding_box()["y"] for i in range(3)]
    assert max(tops) - min(tops) <= 2, tops
    # Each panel shows where its time went; the parts add up to its decode time.
    for index in range(3):
        split = page.evaluate(_SPLIT_JS, f"#stats-{index}")
        assert split is not None, f"panel {index + 1} has no time split"
        assert abs(sum(split["parts"]) * split["passes"] - split["wall_ms"]) <= 0.05 * split["wall_ms"], split
    for plot in ("length-plot", "latent-plot", "tree-plot"):
        assert page.locator(f"#{plot} .js-plotly-plot").count() == 1, plot
    assert page.locator("#length-plot .scatterlayer .trace").count() == 3

    # Click a token in the last panel (row 2, column 12 of 16): the inspector names it.
    image = page.locator("#image-2 img")
    box = image.bounding_box()
    image.click(position={"x": box["width"] * 12.5 / 16, "y": box["height"] * 2.5 / 16})
    page.wait_for_function("document.querySelector('#detail').innerText.includes('row 2, column 12')",
                           timeout=30_000)
    # The step slider follows the token: to the step named in the inspector.
    step = re.search(r"\(step (\d+)\)", page.inner_text("#detail")).group(1)
    page.wait_for_function(f"document.querySelector('#scrubber input[type=number]').value === '{step}'",
                           timeout=30_000)
    page.screenshot(path=str(SHOTS / "4_inspect_token.png"), full_page=True)
    page.close()
    timings = {"first_update_s": round(first_update_s, 2), "comparison_s": round(finished_s, 2),
               "panels_decode_s": round(panels_s, 2), "comparison_over_panels": round(finished_s / panels_s, 2)}
    (SHOTS / "timings.json").write_text(json.dumps(timings))


def test_a_phone_sees_the_race_near_the_top(page_url, browser):
    url, _ = page_url
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_function("[0, 1, 2].every(i => document.querySelector(`#image-${i} img`))", timeout=300_000)
    boxes = [page.locator(f"#image-{i}").bounding_box() for i in range(3)]
    run = page.locator("#run-button").bounding_box()
    page.screenshot(path=str(SHOTS / "5_phone.png"))
    assert run["y"] + run["height"] < 844
    assert all(box["y"] + box["height"] < 844 for box in boxes)  # the three pictures on the first screen ...
    assert len({round(box["y"]) for box in boxes}) == 1  # ... side by side
    assert all(box["x"] + box["width"] <= 390 for box in boxes)
    # After a Run: nothing wider than the phone, the page of a sensible height, menus readable.
    _run_to_the_end(page)
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / "6_phone_after_run.png"), full_page=True)
    width, height = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    assert width <= 390, f"the page is {width} px wide on a 390 px phone"
    # The race, the what-if view (about 1,000 px stacked), the inspector, the plots and the lesson.
    assert height <= 8500, f"the page is {height} px tall"
    for index in range(3):
        shown = page.evaluate(f"(() => {{ const i = document.querySelector('#method-{index} input');"
                              " return [i.value, i.scrollWidth, i.clientWidth]; })()")
        assert shown[1] <= shown[2], f"panel {index + 1}'s menu cuts {shown[0]!r}"


def _kept(page) -> str | None:
    return page.evaluate("document.querySelector('#delta-whatif .whatif-kept')?.dataset.kept ?? null")


def test_the_whatif_view_answers_the_delta_slider_without_a_decode(page_url, browser):
    url, _ = page_url
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("#delta-whatif .whatif-kept", timeout=300_000)
    _run_to_the_end(page)
    page.wait_for_selector("#delta-whatif .whatif-kept", timeout=30_000)
    panels = [page.inner_text(f"#stats-{i}") for i in range(3)]
    images = _image_sources(page)
    seen = []
    for value in ("0.5", "0.05", "0.9"):
        kept = _kept(page)
        box = page.locator("#delta-slider input[type=number]")
        moved = time.perf_counter()
        box.fill(value)
        box.press("Enter")
        page.wait_for_function("kept => document.querySelector('#delta-whatif .whatif-kept')?.dataset.kept !== kept",
                               arg=kept, timeout=10_000, polling=10)
        seen.append(time.perf_counter() - moved)
        assert f"delta {float(value):g}" in page.inner_text("#delta-whatif")
    # The fastest of three moves within half a second: the view follows the slider, not a decode.
    assert min(seen) <= 0.5, seen
    assert [page.inner_text(f"#stats-{i}") for i in range(3)] == panels and _image_sources(page) == images
    page.screenshot(path=str(SHOTS / "7_whatif.png"), full_page=True)
    # The replay slider spans the inspected panel's passes and follows a typed step and the arrow keys.
    last = int(re.search(r"\(0-(\d+)\)", page.inner_text("#scrubber")).group(1))
    assert last < 255  # LANTERN's passes, not vanilla's 256
    scrubber = page.locator("#scrubber input[type=number]")
    scrubber.fill(str(last))
    scrubber.press("Enter")
    page.wait_for_function(f"document.querySelector('#detail').innerText.includes('(step {last})')", timeout=10_000)
    page.locator("#scrubber input[type=range]").press("ArrowLeft")
    page.wait_for_function(f"document.querySelector('#detail').innerText.includes('(step {last - 1})')",
                           timeout=10_000)
    page.close()


def _settled(page) -> None:
    """Waits until the three panels are done and the page's height then holds for a second: what the
    comparison fills in below them has come."""
    # A panel's note begins "done · " once it has finished; textContent, since a phone hides the note.
    page.wait_for_function("[0, 1, 2].every(i => document.querySelector(`#stats-${i}`)?.textContent"
                           ".includes('done · '))", timeout=300_000)
    page.wait_for_function("(() => { const h = document.documentElement.scrollHeight;"
                           " const same = h === window.__settledHeight; window.__settledHeight = h;"
                           " return same; })()", polling=1000, timeout=300_000)


def test_more_settings_open_under_the_race_not_in_a_tall_column(page_url, browser):
    url, _ = page_url
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_function("[0, 1, 2].every(i => document.querySelector(`#image-${i} img`))", timeout=300_000)
    _settled(page)
    closed = page.evaluate("document.documentElement.scrollHeight")
    page.click("#more-settings .label-wrap")
    page.wait_for_selector("#lambda-slider", state="visible")
    _settled(page)
    opened = page.evaluate("document.documentElement.scrollHeight")
    page.screenshot(path=str(SHOTS / "8_more_settings.png"), full_page=True)
    # Measured at 1600x1200: open in the settings' narrow column, the folded settings grew the page by
    # 1,180 to 1,520 px (less where the what-if view beside them is filled in); spread under the race,
    # their groups side by side, by 544.
    assert opened - closed <= 700, f"opening More settings grew the page from {closed} to {opened} px"
    groups = [page.locator(f"#{name}").bounding_box() for name in ("lambda-slider", "cool-w-slider", "sjd-init")]
    assert len({round(box["x"]) for box in groups}) == 3 and max(b["y"] for b in groups) < min(
        b["y"] + b["height"] for b in groups), groups  # side by side
    page.close()


# Elements past the viewport's right edge, unless a box that scrolls sideways holds them.
_PAST_THE_EDGE_JS = """() => {
    const scrolled = e => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement)
        if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return true; return false; };
    return [...document.querySelectorAll('body *')].filter(e => {
        const box = e.getBoundingClientRect();
        return box.width > 0 && box.right > innerWidth + 0.5 && !scrolled(e);
    }).map(e => `${e.tagName}#${e.id}.${e.className.baseVal ?? e.className}`).slice(0, 10);
}"""
# Tables wider than the screen, or scrolling inside their own box.
_WIDE_TABLES_JS = """() => [...document.querySelectorAll('table')].filter(t => t.checkVisibility()).filter(t => {
    const box = t.getBoundingClientRect();
    return box.right > innerWidth + 0.5 || t.scrollWidth > Math.ceil(box.width) + 1;
}).map(t => [t.closest('[id]')?.id, t.scrollWidth, Math.round(t.getBoundingClientRect().right)])"""
# Plots whose toolbar covers their title, and tree codes cut at the plot's edge.
_COVERED_TITLES_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => {
    const bar = p.querySelector('.modebar'), title = p.querySelector('.gtitle');
    if (!bar || !title || !title.textContent) return false;
    const a = bar.getBoundingClientRect(), b = title.getBoundingClientRect();
    return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
}).map(p => p.closest('[id]')?.id)"""
# A code clipped at the axes (its layer under a clip-path) must lie within them, any other within the figure.
_CUT_CODES_JS = """() => {
    const svg = document.querySelector('#tree-plot .main-svg').getBoundingClientRect();
    const axes = document.querySelector('#tree-plot .nsewdrag').getBoundingClientRect();
    return [...document.querySelectorAll('#tree-plot .textpoint text')].filter(t => {
        const box = t.getBoundingClientRect(), bound = t.closest('[clip-path]') ? axes : svg;
        return box.right > bound.right + 0.5 || box.left < bound.left - 0.5;
    }).map(t => t.textContent);
}"""


def test_a_phone_shows_the_whole_page_after_a_run(page_url, browser):
    url, _ = page_url
    SHOTS.mkdir(exist_ok=True)
    # A touch screen, on which Plotly shows its toolbar at all times, not on hover.
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_function("[0, 1, 2].every(i => document.querySelector(`#image-${i} img`))", timeout=300_000)
    _run_to_the_end(page)
    page.wait_for_selector("#detail table", timeout=30_000)
    _settled(page)
    page.screenshot(path=str(SHOTS / "9_phone_touch_after_run.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.evaluate(_PAST_THE_EDGE_JS) == []
    assert page.evaluate(_WIDE_TABLES_JS) == []
    assert page.evaluate(_COVERED_TITLES_JS) == []
    assert page.evaluate(_CUT_CODES_JS) == []
    # Both tabs under the plots show in the tab bar, none folded into a "More tabs" menu.
    tabs = page.evaluate("[...document.querySelectorAll('#results [role=tab]')].filter(t => t.checkVisibility())"
                         ".map(t => t.getBoundingClientRect().right)")
    assert len(tabs) == 2 and max(tabs) <= 390, tabs
    page.close()


def test_a_refused_input_is_told_once_and_leaves_the_outputs_uncovered(page_url, browser):
    url, _ = page_url
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_function("[0, 1, 2].every(i => document.querySelector(`#image-${i} img`))", timeout=300_000)
    _settled(page)
    before = _image_sources(page)
    seed = page.get_by_label("Seed")
    seed.fill("-1")
    seed.press("Enter")
    page.click("#run-button")
    toast = page.locator("[data-testid=toast-body]")
    toast.wait_for(timeout=30_000)
    assert "seed -1 is out of range" in toast.inner_text()
    page.wait_for_timeout(500)  # the outputs' trackers have had the error
    page.screenshot(path=str(SHOTS / "10_refused_input.png"))
    badges = page.evaluate("[...document.querySelectorAll('[data-testid=status-tracker]')]"
                           ".filter(e => e.checkVisibility() && e.innerText.includes('Error'))"
                           ".map(e => e.closest('[id]')?.id)")
    assert badges == [], f"Error badges over {badges}"
    assert _image_sources(page) == before  # the previous run's pictures stay, uncovered
    page.close()


def _menu(page, index: int) -> str:
    return page.evaluate(f"document.querySelector('#method-{index} input').value")


# A click's event waits in Gradio's queue behind the page's start-up comparison, which on a loaded
# two-core machine takes tens of seconds.
QUEUED_EVENT_MS = 60_000


def test_the_menus_name_what_runs_and_cool_sd_is_one_click_away(page_url, browser):
    url, _ = page_url
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("#swap-relaxed")
    assert [_menu(page, i) for i in range(3)] == ["Vanilla", "EAGLE-2", "LANTERN (static tree)"]  # sampling
    page.click("#swap-relaxed")
    page.wait_for_function("document.querySelector('#method-2 input').value === 'COOL-SD'", timeout=QUEUED_EVENT_MS)
    page.wait_for_function("document.querySelector('#swap-relaxed').innerText.includes('LANTERN')",
                           timeout=QUEUED_EVENT_MS)
    page.click("#swap-relaxed")
    page.wait_for_function("document.querySelector('#method-2 input').value === 'LANTERN (static tree)'",
                           timeout=QUEUED_EVENT_MS)
    # Choosing LANTERN while sampling shows the method that will run.
    page.locator("#method-2 input").click()
    page.get_by_role("option", name="LANTERN", exact=True).click()
    page.wait_for_function("document.querySelector('#method-2 input').value === 'LANTERN (static tree)'",
                           timeout=QUEUED_EVENT_MS)
    page.close()


def test_a_row_parallel_panel_decides_several_rows_a_pass(page_url, browser):
    """ZipAR in the third panel: its counters show more than one row deciding in a pass, and the lesson
    quotes its rows a pass."""
    url, _ = page_url
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.goto(url, wait_until="domcontentloaded")
    # The start-up comparison first: it sets the menus to what it ran.
    page.wait_for_function("document.querySelector('#stats-2')?.innerText.includes('done')", timeout=300_000)
    page.locator("#method-2 input").click()
    page.get_by_role("option", name="ZipAR", exact=True).click()
    page.wait_for_function("document.querySelector('#method-2 input').value === 'ZipAR'", timeout=10_000)
    _run_to_the_end(page)
    assert _menu(page, 2) == "ZipAR"
    most = page.evaluate("document.querySelector('#stats-2 .rows-stat')?.dataset.mostRows")
    assert most is not None and int(most) >= 2, most
    assert "done" in page.inner_text("#stats-2")
    assert re.search(r"ZipAR decided tokens in [\d.]+ rows", page.inner_text("#teaching"))
    page.screenshot(path=str(SHOTS / "5_rows_in_parallel.png"), full_page=True)
    page.close()
