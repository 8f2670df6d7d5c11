"""The Learn tab in a real browser (the session's app, ``app_server``; chromium as in tests/test_browser.py).
The default run keeps one short check: a chapter link opens its chapter, its run draws a figure, and the
revealed answer is the one the run's own figure shows; the keyboard steps chapters. The walk through every
chapter from a fresh page is marked slow (each chapter runs the real models)."""
from __future__ import annotations

import re

import pytest

from components.pages.learn import CHAPTERS
from tools.browser import (LEARN_CHAPTER_JS, LEARN_PLOTS_JS, LEARN_SHOWN, VIEWPORT, browser, chromium_missing,
                           learn_guess, learn_part, learn_reveal, learn_run)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]

N = len(CHAPTERS)
SHOWN_AFTER_REVEAL = {"trees": ("Token tree of iteration", "Attention mask of iteration"),    # figure titles
                      "pays": ("on other hardware",)}


@pytest.fixture(scope="module")
def chromium():
    with browser() as b:
        yield b


def _fresh(chromium, url: str):
    pg = chromium.new_page(viewport=dict(VIEWPORT))
    pg.set_default_timeout(30_000)
    pg.goto(url)
    pg.wait_for_selector("#learn-title")
    return pg


def _title(pg, n: int) -> None:
    pg.wait_for_function(f"() => document.querySelector('#learn-title')?.innerText.includes('Chapter {n} / {N}')")


def _guess_and_reveal(pg, n: int) -> str:
    """Set chapter ``n``'s guess to its last choice (or the slider's maximum), then Reveal."""
    guess = CHAPTERS[n - 1].guess
    if guess.choices:
        learn_guess(pg, choice=-1)
    else:
        learn_guess(pg, number=guess.maximum)
    return learn_reveal(pg)


def _untouched_reveal(pg) -> str:
    """Reveal with the guess as the page set it (never moved): the answer block's text."""
    learn_part(pg, "learn-reveal").click()
    pg.wait_for_function(f"() => /Make your guess|Your guess/.test(({LEARN_CHAPTER_JS})?.querySelector("
                         "'.learn-answer')?.innerText || '')")
    return learn_part(pg, "learn-answer").inner_text()


def _page_before_reveal(pg) -> str:
    """Everything chapter 2 shows before Reveal: its note, and its figures' titles, annotations and hovers."""
    figures = pg.evaluate(f"() => JSON.stringify({LEARN_PLOTS_JS}.map(d => [d.layout.title, d.layout.annotations, "
                          "d.layout.xaxis, d.data.map(t => [t.hovertext, t.text, t.name])]))")
    return learn_part(pg, "learn-note").inner_text() + figures


def test_a_chapter_link_runs_reveals_and_the_keyboard_steps(chromium, app_server):
    """?tab=learn&chapter=2 opens chapter 2; its run draws the anatomy without saying how many drafts will be
    kept; Reveal on the untouched guess asks for a guess; the revealed count of kept drafts is the one the anatomy
    of that run then shows; → and ← step the chapters."""
    pg = _fresh(chromium, app_server.url + "?tab=learn&chapter=2")
    try:
        _title(pg, 2)
        assert pg.locator(LEARN_SHOWN).count() == 1 and "draft" in learn_part(pg, "learn-text").inner_text()
        learn_run(pg)
        shown = _page_before_reveal(pg)
        assert "accepted" not in shown and "kept" not in shown and "✓" not in shown and "reject" not in shown
        first = _untouched_reveal(pg)
        assert "Make your guess first" in first and "right" not in first
        answer = _guess_and_reveal(pg, 2)
        kept, n = map(int, re.search(r"This run: (\d+) of (\d+) kept", answer).groups())
        subtitle = pg.evaluate(f"() => {LEARN_PLOTS_JS}.map(d => d.layout.title.text).find(t => t.startsWith('Anatomy'))")
        assert f"{kept} of {n} drafts accepted" in subtitle
        assert "Your guess: 4 of" in answer and "Why:" in answer
        slider = learn_part(pg, "learn-guess").locator("input[type=range]")
        slider.focus()                                # the guess slider keeps its arrow keys
        pg.keyboard.press("ArrowLeft")
        pg.wait_for_timeout(500)
        assert slider.input_value() == "3"
        assert "Chapter 2 / " in pg.inner_text("#learn-title")
        pg.click("#learn-title")                      # focus outside any field: the arrows step chapters
        pg.keyboard.press("ArrowRight")
        _title(pg, 3)
        pg.keyboard.press("ArrowLeft")
        _title(pg, 2)
    finally:
        pg.close()


@pytest.mark.slow
def test_every_chapter_from_a_fresh_page(chromium, app_server):
    """From a fresh page (chapter 1), every chapter: its text shows, its run draws a figure with data, a guess
    and Reveal give an answer from that run; Next leads on; the chapter list, a bad link and presenter mode."""
    pg = _fresh(chromium, app_server.url)
    try:
        for n in range(1, N + 1):
            _title(pg, n)
            assert len(learn_part(pg, "learn-text").inner_text().split()) > 40
            assert learn_part(pg, "learn-link").inner_text().endswith(f"?tab=learn&chapter={n}")
            learn_run(pg)
            untouched = _untouched_reveal(pg)
            assert "Make your guess first" in untouched and "right" not in untouched, (n, untouched)
            answer = _guess_and_reveal(pg, n)
            assert "Your guess:" in answer and "Why:" in answer, (n, answer)
            titles = " | ".join(pg.evaluate(f"() => {LEARN_PLOTS_JS}.map(d => d.layout.title.text)"))
            for part in SHOWN_AFTER_REVEAL.get(CHAPTERS[n - 1].slug, ()):
                assert part in titles, (n, titles)
            if n < N:
                pg.click("#learn-next")
        pg.click("#learn-next")                       # at the last chapter Next stays there
        _title(pg, N)
        pg.locator("#learn-list label").nth(0).click()
        _title(pg, 1)
        pg.goto(app_server.url + "?tab=learn&chapter=<b>x</b>")
        pg.wait_for_selector("#learn-title")
        pg.wait_for_function("() => document.body.innerText.includes('Ignored in the link')")
        assert pg.locator("b", has_text="x").count() == 0
        _title(pg, 1)
        pg.goto(app_server.url + "?presenter=1&tab=learn&chapter=3")     # presenter mode: lesson text enlarged
        _title(pg, 3)
        pg.wait_for_function("() => document.body.classList.contains('sd-presenter')")
        px = pg.evaluate(f"() => parseFloat(getComputedStyle(({LEARN_CHAPTER_JS}).querySelector('.learn-text p')).fontSize)")
        assert px >= 22, px
    finally:
        pg.close()


PHONE = {"width": 390, "height": 844}
ORDER = ("learn-text", "learn-run", "learn-plot", "learn-guess", "learn-reveal", "learn-answer")


def test_a_phone_reads_a_chapter_top_to_bottom_without_sideways_scroll(chromium, app_server):
    """At 390 × 844: the title in one or two lines, the chapter list folded, then text → Run → figure → guess →
    Reveal → answer → Next, Run within ~1,600 px of the top, nothing wider than the screen."""
    pg = chromium.new_page(viewport=dict(PHONE), is_mobile=True, has_touch=True)
    pg.set_default_timeout(30_000)
    try:
        pg.goto(app_server.url + "?tab=learn&chapter=2")
        _title(pg, 2)
        pg.wait_for_function("() => !document.querySelector('#learn-list') || "
                             "document.querySelector('#learn-list').offsetParent === null")     # folded
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
        assert pg.locator("#learn-title").bounding_box()["height"] <= 140

        def top(cls: str) -> float:
            return pg.evaluate(f"() => ({LEARN_CHAPTER_JS}).querySelector('.{cls}').getBoundingClientRect().top "
                               "+ window.scrollY")
        tops = [top(c) for c in ORDER]
        assert tops == sorted(tops), dict(zip(ORDER, tops))
        assert tops[1] <= 1600, tops[1]
        below = pg.evaluate("() => Math.max(...[...document.querySelectorAll('.learn-next')].filter(b => "
                            "b.offsetParent !== null).map(b => b.getBoundingClientRect().top + window.scrollY))")
        assert below > tops[-1]
    finally:
        pg.close()
