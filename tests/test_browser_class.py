"""A class in a real browser (the session's app, ``app_server``; chromium as in tests/test_browser.py), marked slow:
one presenter page (presenter mode, Learn tab) and three student pages, each in a browser context of its own (one
at phone size, 390 × 844, one joining by the code typed in). The students follow the presenter to the next
chapter, see the presenter's run, each send a guess; the presenter's count reads 3; Reveal shows the three guesses
and the measured value on all four pages; a student's page has no control that moves the class; a wrong code gets
a clear message; the phone never scrolls sideways; a reload keeps a student's guess and the presenter's room;
ending the class tells every student; axe-core finds no critical or serious problem on the phone's
page or the presenter's after the Reveal."""
from __future__ import annotations

import re

import pytest

from tools.browser import (VIEWPORT, axe_violations, browser, chromium_missing, class_histogram, class_join,
                           class_start, class_status, learn_run)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]

PHONE = {"width": 390, "height": 844}
MOVERS = (".learn-run", ".learn-longer", ".learn-reveal", ".learn-next", ".learn-prev", "#class-start",
          "#class-reveal", "#class-next", "#class-lock", "#class-end", "#learn-list", "#presenter")


def _count(pg) -> int:
    return int(re.search(r"Guesses in: (\d+)", pg.inner_text("#class-count")).group(1))


def _guess(pg, value: int) -> None:
    box = pg.locator(".learn-chapter:visible .learn-guess:visible input[type=number]").first
    box.fill(str(value))
    box.press("Enter")
    pg.click("#class-send")
    class_status(pg, f"Sent: {value}")


def test_a_presenter_and_three_students_through_a_chapter(app_server):
    url = app_server.url
    with browser() as b:
        lead = b.new_page(viewport=dict(VIEWPORT))
        lead.set_default_timeout(30_000)
        lead.goto(url + "?presenter=1")
        lead.wait_for_selector("#class-start")
        code = class_start(lead)

        wrong = class_join(b, url, "7KX4-MP9A")
        assert "There is no class 7KX4-MP9A here" in wrong.inner_text("#class-status")
        assert wrong.locator("#class-join-form").is_visible()

        phone = class_join(b, url, code.replace("-", "").lower(), PHONE)
        laptop = class_join(b, url, code)
        typed = class_join(b, url + "class", None)
        typed.fill("#class-code-in textarea, #class-code-in input", code)
        typed.click("#class-join-button")
        students = [phone, laptop, typed]
        for pg in students:
            assert "/class?" in pg.url or pg is typed
            class_status(pg, f"Class {code} · chapter 1: wait")
        lead.wait_for_function("() => / of 3 students/.test(document.querySelector('#class-count')?.innerText)")

        # the presenter moves on: every student follows
        lead.click("#class-next")
        for pg in students:
            pg.wait_for_function("() => /Chapter 2 \\/ 13/.test(document.querySelector('#learn-title')?.innerText)")
        # a student's page has nothing that moves the class; its keys do nothing either
        for pg in students:
            assert all(pg.locator(f"{sel}:visible").count() == 0 for sel in MOVERS), pg.url
        phone.keyboard.press("ArrowRight")
        phone.wait_for_timeout(1500)
        assert "Chapter 2 / 13" in phone.inner_text("#learn-title")

        # the presenter's run reaches every student; each sends a guess
        learn_run(lead)
        for pg in students:
            class_status(pg, "guess, then Send", 60)
            pg.wait_for_function("() => [...document.querySelectorAll('.learn-chapter .learn-plot .js-plotly-plot')]"
                                 ".some(d => d.data && d.data.length > 0)")
        for pg, value in zip(students, (1, 2, 3)):
            _guess(pg, value)
        lead.wait_for_function("() => /Guesses in: 3 of 3/.test(document.querySelector('#class-count')?.innerText)")
        assert _count(lead) == 3

        # Reveal: the three guesses and the measured value on all four pages
        lead.click("#class-reveal")
        for pg in [lead, *students]:
            drawn = class_histogram(pg)
            assert drawn["guesses"] == 3 and "3 in" in drawn["title"] and drawn["measured"], drawn
            assert "measured:" in drawn["title"]
        for pg, value in zip(students, (1, 2, 3)):
            answer = pg.locator(".learn-chapter .learn-answer").first.inner_text()
            assert re.search(f"Your guess: {value} of \\d", answer) and "This run:" in answer and "The class:" in answer
            assert "the answer is out" in pg.inner_text("#class-status")
        assert "This run:" in lead.inner_text("#class-answer")
        assert phone.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
        assert axe_violations(phone) == [] and axe_violations(lead) == []     # no critical or serious problem

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
