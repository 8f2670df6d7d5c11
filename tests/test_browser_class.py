"""A class in a real browser (the session's app, ``app_server``; chromium as in tests/test_browser.py), marked slow:
one presenter page (presenter mode, Learn tab) and three students' pages (the app's own light page, no Gradio), each
in a browser context of its own (one at phone size, 390 × 844, one joining by the code typed in). The students follow
the presenter to the next chapter and see the presenter's run; the presenter starts the guess timer, every page counts
down, each student sends a guess, and at zero Send is locked (and the server refuses a late guess); the presenter's
count reads 3; Reveal shows the three guesses and the measured value on all four pages, and each student's own line;
the exported CSV holds exactly those three guesses; the phone never scrolls sideways and its figures' text is at
least 12 px; axe-core finds no critical or serious problem on the phone's page or the presenter's; a reload keeps a
student's guess and the presenter's room; ending the class tells every student. A second test: a class that asks for
nicknames, and a student the presenter removes."""
from __future__ import annotations

import csv
import io
import re

import pytest

from tools.browser import (VIEWPORT, axe_violations, browser, chromium_missing, class_histogram, class_join,
                           class_start, class_status, learn_run)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]

PHONE = {"width": 390, "height": 844}
MOVERS = (".learn-run", ".learn-longer", ".learn-reveal", ".learn-next", ".learn-prev", "#class-start",
          "#class-reveal", "#class-next", "#class-lock", "#class-end", "#learn-list", "#presenter")
# every piece of text Plotly drew in the visible figures of a students' page: its font size (px)
FIGURE_TEXT_PX = """() => [...document.querySelectorAll('#class-page .js-plotly-plot')]
  .filter((g) => g.offsetParent !== null)
  .flatMap((g) => [...g.querySelectorAll('svg text, svg tspan')])
  .filter((t) => t.textContent.trim() && t.getBoundingClientRect().width > 0)
  .map((t) => parseFloat(getComputedStyle(t).fontSize))"""


def _count(pg) -> int:
    return int(re.search(r"Guesses in: (\d+)", pg.inner_text("#class-count")).group(1))


def _guess(pg, value: int) -> None:
    box = pg.locator(".learn-guess input[type=number]")
    box.fill(str(value))
    pg.click("#class-send")
    class_status(pg, f"Sent: {value}")


def _phone_fits(pg) -> None:
    assert pg.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    sizes = pg.evaluate(FIGURE_TEXT_PX)
    assert sizes and min(sizes) >= 12, sorted(sizes)[:5]


def _presenter(b, url: str):
    """The presenter's page, ready to start a class."""
    lead = b.new_page(viewport=dict(VIEWPORT))
    lead.set_default_timeout(30_000)
    lead.goto(url + "?presenter=1")
    lead.wait_for_selector("#class-start")
    return lead


def test_a_presenter_and_three_students_through_a_chapter(app_server):
    url = app_server.url
    with browser() as b:
        lead = _presenter(b, url)
        code = class_start(lead)

        wrong = class_join(b, url, "7KX4-MP9A")
        assert "There is no class 7KX4-MP9A here" in wrong.inner_text("#class-status")
        assert wrong.locator("#class-join-form").is_visible()

        phone = class_join(b, url, code.replace("-", "").lower(), PHONE)
        laptop = class_join(b, url, code)
        typed = class_join(b, url + "class", None)
        typed.fill("#class-code-in", code)
        typed.click("#class-join-button")
        students = [phone, laptop, typed]
        for pg in students:
            assert "/class?" in pg.url or pg is typed
            class_status(pg, f"Class {code} · chapter 1: wait")
        lead.wait_for_function("() => / of 3 students/.test(document.querySelector('#class-count')?.innerText)")

        # the presenter moves on: every student follows; a student's page has nothing that moves the class
        lead.click("#class-next")
        for pg in students:
            pg.wait_for_function("() => /Chapter 2 \\/ 13/.test(document.querySelector('#learn-title')?.innerText)")
            assert all(pg.locator(f"{sel}:visible").count() == 0 for sel in MOVERS), pg.url

        # the presenter's run reaches every student, drawn for the screen it is on
        learn_run(lead)
        for pg in students:
            class_status(pg, "guess, then Send", 60)
            pg.wait_for_function("() => document.querySelector('#class-plot1.js-plotly-plot')?.data?.length > 0",
                                 timeout=60_000)
        _phone_fits(phone)

        # the timer: every page counts down; the guesses sent before zero count, after it Send is locked
        lead.click("#class-timer-seconds input")
        lead.get_by_role("option", name="15 s").click()
        lead.click("#class-timer-start")
        lead.wait_for_function("() => /⏱ \\d+ s left/.test(document.querySelector('#class-count')?.innerText)")
        for pg in students:
            pg.wait_for_function("() => /left to guess/.test(document.querySelector('#class-timer')?.innerText)")
        for pg, value in zip(students, (1, 2, 3)):
            _guess(pg, value)
        lead.wait_for_function("() => /Guesses in: 3 of 3/.test(document.querySelector('#class-count')?.innerText)")
        for pg in students:
            pg.wait_for_function("() => /Time is up/.test(document.querySelector('#class-timer')?.innerText)",
                                 timeout=30_000)
            assert pg.locator("#class-send").is_disabled()
        ids = phone.evaluate("() => JSON.parse(localStorage.getItem('sd-class-ids'))")
        # a late send, forced past the page: the server refuses it
        refused = phone.evaluate("""async ([code, student]) => { const r = await fetch('class/api/guess', {method: 'POST',
            headers: {'Content-Type': 'application/json'},
            body: JSON.stringify({code, student, chapter: 2, run_no: 1, value: 4})}); return [r.status, await r.json()]; }""",
                                 [ids["last"], ids["ids"][ids["last"]]])
        assert refused[0] == 409 and "closed" in refused[1]["error"]
        lead.wait_for_function("() => /guesses locked/.test(document.querySelector('#class-count')?.innerText)")
        assert _count(lead) == 3

        # Reveal: the three guesses and the measured value on all four pages, and each student's own line
        lead.click("#class-reveal")
        for pg in [lead, *students]:
            drawn = class_histogram(pg)
            assert drawn["guesses"] == 3 and "3 in" in drawn["title"] and drawn["measured"], drawn
            assert "measured:" in drawn["title"]
        for pg, value in zip(students, (1, 2, 3)):
            pg.wait_for_selector("#class-answer .sd-class-mine")
            mine = pg.inner_text("#class-answer .sd-class-mine")
            assert re.match(f"You said {value} · measured \\d of 4 kept · class median 2", mine), mine
            assert "This run:" in pg.inner_text("#class-answer") and "the answer is out" in pg.inner_text("#class-status")
        assert "This run:" in lead.inner_text("#class-answer")
        _phone_fits(phone)
        assert axe_violations(phone) == [] and axe_violations(lead) == []     # no critical or serious problem

        # the results the presenter keeps: exactly the three guesses
        lead.click("#class-export")
        lead.wait_for_selector("#class-export-file a[href*='.csv']")
        href = lead.locator("#class-export-file a[href*='.csv']").first.get_attribute("href")
        rows = list(csv.DictReader(io.StringIO(lead.request.get(href if href.startswith("http") else url + href.lstrip("/")).text())))
        assert sorted(int(r["guess"]) for r in rows) == [1, 2, 3] and {r["chapter"] for r in rows} == {"2"}
        assert {r["total"] for r in rows} == {"3"} and all(r["measured"].endswith("kept") for r in rows)

        # a reload keeps the student and the guess sent, and the presenter's room
        laptop.reload()
        class_status(laptop, "Your guess: 2 \\(sent\\)")
        class_histogram(laptop)
        lead.reload()
        lead.wait_for_function("(code) => document.querySelector('#class-code')?.innerText.includes(code)", arg=code)
        lead.wait_for_function("() => /Guesses in: 3 of 3/.test(document.querySelector('#class-count')?.innerText)")

        # the class ends: every student's page says so and offers the code field again
        lead.click("#class-end")
        for pg in students:
            class_status(pg, "There is no class", 15)
            pg.wait_for_selector("#class-join-form", state="visible")


def test_nicknames_and_a_student_removed(app_server):
    url = app_server.url
    with browser() as b:
        lead = _presenter(b, url)
        lead.check("#class-nicknames input")
        code = class_start(lead)
        phone = class_join(b, url, code, PHONE)
        class_status(phone, "asks for a nickname")
        phone.fill("#class-nick-in", "<b>Ann</b>")
        phone.click("#class-join-button")
        class_status(phone, "letters, digits")
        phone.fill("#class-nick-in", "Ann")
        phone.click("#class-join-button")
        class_status(phone, f"Class {code} · chapter 1")
        lead.wait_for_function("() => / of 1 student/.test(document.querySelector('#class-count')?.innerText)")
        lead.get_by_text("Students (remove one)").click()
        lead.click("#class-roster input")
        lead.get_by_role("option", name="Ann (#1)").click()
        lead.click("#class-remove")
        lead.wait_for_function("() => /removed from the class/.test(document.querySelector('#class-lead-status')?.innerText)")
        class_status(phone, "removed you from this class", 15)
        lead.click("#class-end")
