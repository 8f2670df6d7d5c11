"""The busy-server chapter and the Theory tab's (B, K) chart in a real browser (the session's app, ``app_server``;
chromium as in tests/test_browser.py): the chapter opened by its link in presenter mode at 1920 × 1080, run,
guessed and revealed — its figures legible at presenter sizes (no cut or overlapping text), nothing before Reveal
naming a speedup, axe-core finding nothing critical or serious — then, presenter mode off, the same page at a
390-px phone's width without sideways scroll; and the Theory tab's chart drawn (the prices, or "measuring…" while
the app measures them in the background). The walk through every chapter is tests/test_browser_learn.py's."""
from __future__ import annotations

import re

import pytest

from components.pages.learn import CHAPTERS
from tools.browser import (LEARN_PLOTS_JS, axe_violations, browser, chromium_missing, figure_problems, learn_guess,
                           learn_part, learn_reveal, learn_run)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]

NUMBER = [c.slug for c in CHAPTERS].index("busy") + 1
PROJECTOR = {"width": 1920, "height": 1080}
PHONE_PX = 390


@pytest.fixture(scope="module")
def chromium():
    with browser() as b:
        yield b


def _clean(pg, where: str, at_least: int) -> None:
    pg.wait_for_timeout(800)                          # the last automargin redraws
    found = figure_problems(pg)
    assert len(found) >= at_least, (where, found)
    bad = {f["figure"]: f["problems"] for f in found if f["problems"]}
    assert not bad, f"{where}: {bad}"


def test_the_busy_server_chapter_in_presenter_mode_on_a_phone_and_for_axe(chromium, app_server):
    pg = chromium.new_page(viewport=dict(PROJECTOR))
    pg.set_default_timeout(60_000)
    try:
        pg.goto(app_server.url + f"?presenter=1&tab=learn&chapter={NUMBER}")
        pg.wait_for_function(f"() => document.querySelector('#learn-title')?.innerText.includes('Chapter {NUMBER} /')")
        pg.wait_for_function("() => document.body.classList.contains('sd-presenter')")
        learn_run(pg)
        before = learn_part(pg, "learn-note").inner_text() + " ".join(
            pg.evaluate(f"() => {LEARN_PLOTS_JS}.map(d => JSON.stringify([d.layout.title, d.data.map(t => t.name)]))"))
        assert "Tokens each row kept per verify" in before and not re.search(r"×\s*\d", before), before
        _clean(pg, "the chapter after its run (presenter)", at_least=2)
        learn_guess(pg, number=2)
        answer = learn_reveal(pg)
        assert "Your guess: B = 2" in answer and "Why:" in answer and "95 % interval" in answer, answer
        titles = pg.evaluate(f"() => {LEARN_PLOTS_JS}.map(d => d.layout.title.text)")
        assert any(t.startswith("Measured speedup by batch size") for t in titles), titles
        _clean(pg, "the chapter after Reveal (presenter)", at_least=2)
        found = axe_violations(pg)
        assert not found, f"axe on the busy-server chapter: {found}"
        pg.set_viewport_size({"width": PHONE_PX, "height": 844})   # a phone's width, then presenter mode off: the
        pg.click("#presenter input")                                # page lays every figure out again at that width
        pg.wait_for_function("() => !document.body.classList.contains('sd-presenter')")
        pg.wait_for_timeout(1500)
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= PHONE_PX
        _clean(pg, "the chapter on a phone", at_least=2)
        pg.set_viewport_size(dict(PROJECTOR))
        pg.get_by_role("tab", name="Theory").click()
        pg.wait_for_selector("#theory-batch .main-svg text")
        title = pg.evaluate("() => document.querySelector('#theory-batch .js-plotly-plot').layout.title.text")
        assert title.startswith("Predicted speedup over batch size and K"), title
        _clean(pg, "Theory with the (B, K) chart", at_least=5)
    finally:
        pg.close()
