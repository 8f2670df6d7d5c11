"""The page on a projector and for a screen reader or a keyboard, in a real browser (the session's app,
``app_server``; chromium as in tests/test_browser.py):

- **projector**: presenter mode at 1920 × 1080 — Replay (the shipped example it opens with), Theory, and Live after
  a short greedy run started by a link — every visible figure laid out by Plotly at presenter sizes (18 px text),
  with no two legend entries overlapping, no legend over a title, axis title or tick labels, and no title, axis
  title, tick label, annotation or legend cut by the figure's edge (``tools.browser.FIGURE_PROBLEMS_JS``); the same
  once presenter mode is switched off again;
- **axe-core** (the PyPI ``axe-playwright-python``, its bundled axe.min.js): no critical and no serious violation on
  Learn after a chapter's run, Live after a run, Replay with an example loaded, and presenter mode;
- every figure has a text alternative (``role="figure"`` and an ``aria-label`` that starts "Chart: <title>");
- the keyboard: Tab reaches every control of Live and Learn in order, and the page's shortcuts
  (``presenter.KEYBOARD_JS``) neither hold the focus nor take Space from a focused button.

docs/accessibility.md says what was found before and what a screen reader hears."""
from __future__ import annotations

import pytest

from tools.browser import (FIGURES, STATUS_JS, axe_violations, browser, chromium_missing, figure_font_sizes,
                           figure_labels, figure_problems, learn_run, open_page, tab_walk)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]

PROJECTOR = {"width": 1920, "height": 1080}
PRESENTER_PX = 18            # 13 px × figures_js.FONT_SCALE, rounded down
LIVE_LINK = "?presenter=1&tab=live&temperature=0&max_new_tokens=16&run=1"


@pytest.fixture(scope="module")
def chromium():
    with browser() as b:
        yield b


def _projector_page(chromium, url: str):
    pg = chromium.new_page(viewport=dict(PROJECTOR))
    pg.set_default_timeout(60_000)
    pg.goto(url)
    pg.wait_for_selector("#learn-title")
    return pg


def _assert_legible(pg, where: str, at_least: int, px: float | None = PRESENTER_PX) -> None:
    """Every visible figure: drawn at ``px`` (or more), no overlap or cut, labelled for a screen reader."""
    pg.wait_for_timeout(800)                         # the last figures' automargin redraws
    found = figure_problems(pg)
    assert len(found) >= at_least, (where, [f["figure"] for f in found])
    bad = {f["figure"]: f["problems"] for f in found if f["problems"]}
    assert not bad, f"{where}: {bad}"
    if px is not None:
        sizes = figure_font_sizes(pg)
        assert all(s >= px for s in sizes.values()), (where, sizes)
    for elem, role, label in figure_labels(pg):
        assert role == "figure" and label.startswith("Chart: ") and len(label) > 12, (where, elem, role, label)


def _no_serious(pg, where: str) -> None:
    found = axe_violations(pg)
    assert not found, f"axe on {where}: {found}"


def test_presenter_replay_and_theory_legible_and_accessible(chromium, app_server):
    """Presenter mode at 1920 × 1080 without a model run: the Replay tab's example, then the Theory tab."""
    pg = _projector_page(chromium, app_server.url + "?presenter=1")
    try:
        pg.wait_for_function("() => document.body.classList.contains('sd-presenter')")
        pg.get_by_role("tab", name="Replay").click()
        pg.wait_for_selector("#replay-tokens .sd-stream .sd-tok")
        pg.wait_for_function("() => [...document.querySelectorAll('[id^=replay-plot-] .js-plotly-plot')]"
                             ".filter(g => g.offsetParent).every(g => g._fullLayout?.font.size >= 18)")
        _assert_legible(pg, "Replay (presenter)", at_least=8)
        _no_serious(pg, "presenter mode (Replay)")
        pg.get_by_role("tab", name="Theory").click()
        pg.wait_for_selector("#theory-heatmap .main-svg text")
        _assert_legible(pg, "Theory (presenter)", at_least=5)
    finally:
        pg.close()


@pytest.mark.slow
def test_presenter_live_run_legible_then_normal_and_accessible(chromium, app_server):
    """A short greedy Live run started by a link in presenter mode: every figure legible at 1920 × 1080; presenter
    mode off: laid out again at the normal sizes, still clean; axe finds nothing serious on Live after the run."""
    pg = _projector_page(chromium, app_server.url + LIVE_LINK)
    try:
        pg.wait_for_function(STATUS_JS, arg="Done", timeout=150_000)
        for fid in FIGURES:
            pg.wait_for_function(f"() => (document.querySelector('#{fid} .js-plotly-plot')?.data || []).length > 0")
        _assert_legible(pg, "Live after a run (presenter)", at_least=len(FIGURES) + 1)
        pg.click("#presenter input")                 # off: the same figures laid out again, normal type
        pg.wait_for_function("() => !document.body.classList.contains('sd-presenter')")
        pg.wait_for_function("() => [...document.querySelectorAll('#plot-race .js-plotly-plot')]"
                             ".every(g => g._fullLayout.font.size < 16)")
        _assert_legible(pg, "Live after a run (normal)", at_least=len(FIGURES) + 1, px=None)
        assert max(figure_font_sizes(pg).values()) < 16
        _no_serious(pg, "Live after a run")
        pg.get_by_role("tab", name="Replay").click()  # the shipped example it opens with
        pg.wait_for_selector("#replay-plot-pq .main-svg text")
        _no_serious(pg, "Replay (an example loaded)")
    finally:
        pg.close()


@pytest.mark.slow
def test_learn_after_a_run_accessible_and_the_keyboard_walks_learn(chromium, app_server):
    pg = open_page(chromium, app_server.url, tab=None)
    try:
        learn_run(pg)
        _no_serious(pg, "Learn after a chapter's run")
        assert all(role == "figure" and label.startswith("Chart: ") for _, role, label in figure_labels(pg))
        walk = tab_walk(pg, 60)
        for needed in ("#presenter", "#learn-prev", "#learn-next", "#learn-list"):
            assert any(w.startswith(needed) for w in walk), (needed, walk)
        chapter = " ".join(walk)
        assert "Run" in chapter and "Reveal" in chapter, walk              # the chapter's own buttons
        assert "range" in chapter                                          # its guess
        _moves(walk)
    finally:
        pg.close()


def test_the_keyboard_walks_live_and_space_presses_the_focused_button(chromium, app_server):
    pg = open_page(chromium, app_server.url)          # the Live tab
    try:
        walk = tab_walk(pg, 80)
        for needed in ("#prompt textarea", "#pair", "#k ", "#temperature", "#max-new", "#run", "#stop", "#first",
                       "#prev", "#next", "#last", "#play", "#pace", "#export-html", "#copy-link"):
            assert any(w.startswith(needed) for w in walk), (needed, walk)
        _moves(walk)
        # Space on a focused button presses that button, not the viewer's play (the page's shortcut)
        pg.focus("#copy-link")
        pg.keyboard.press(" ")
        pg.wait_for_function("() => document.querySelector('#copy-link-url') !== null"
                             " && document.querySelector('#copy-link-url').offsetParent !== null")
        assert "pause" not in pg.inner_text("#play")
    finally:
        pg.close()


def _moves(walk: list[str]) -> None:
    """The focus moved on at each Tab (no element held it for two presses running) and went all the way round the
    page, past its last control and back to its first: nothing traps it."""
    held = [a for a, b in zip(walk, walk[1:]) if a == b]
    assert not held, held
    assert "body" in walk and walk[walk.index("body") + 1:][:1] == walk[:1], walk

