"""A batched Live run in a real browser (the session's app, ``app_server``; chromium as in tests/test_browser.py): a
batch of 3 (greedy, prompt lookup, fixed K, 16 new tokens) on a desktop, set by hand in the controls, and on a
390-pixel phone, opened from a link that carries the batch size. Every row shows its tokens (side by side on the
desktop, one under the other on the phone, each scrolling inside its box), the page never scrolls sideways, the
batch's figures are drawn without a cut or overlapping label, the summary says every row equals its baseline
row, and axe-core finds nothing critical or serious."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from components.serving.pairs import PAIR_NGRAM, pair_label
from tools.browser import (STATUS_JS, axe_violations, browser, chromium_missing, figure_problems, open_page,
                           plot_traces, set_number, wait_for_figures)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]
PHONE = {"width": 390, "height": 844}
PROMPT = "Repeat exactly: red green blue, red green blue, red green blue."
LINK = (f"?tab=live&pair={quote(PAIR_NGRAM)}&k_policy=fixed&k=3&max_new_tokens=16&batch_size=3&prompt={quote(PROMPT)}"
        "&run=1")


@pytest.fixture(scope="module")
def chromium():
    with browser() as b:
        yield b


def _the_batch_is_shown(pg, width: int) -> list[dict]:
    """Once the run is done and drawn: the checks both pages share; the three rows' boxes."""
    pg.wait_for_function(STATUS_JS, arg="Done", timeout=300_000)
    wait_for_figures(pg)
    assert "3 rows" in pg.inner_text("#status")
    rows = pg.locator("#batch-rows .sd-row")
    assert rows.count() == 3
    for i in range(3):
        assert rows.nth(i).locator(".sd-stream .sd-tok").count() >= 1
    boxes = [rows.nth(i).bounding_box() for i in range(3)]
    assert all(b["x"] >= 0 and b["x"] + b["width"] <= width for b in boxes), boxes
    assert pg.evaluate("() => document.documentElement.scrollWidth") <= width       # no sideways scroll
    assert plot_traces(pg, "plot-batch-timeline") >= 6 and plot_traces(pg, "plot-batch-acceptance") == 4
    for fid in ("#plot-batch-timeline", "#plot-batch-acceptance"):
        assert [f["problems"] for f in figure_problems(pg, fid)] == [[]], fid
    summary = pg.inner_text("#batch-summary")
    assert "every row's text equals its baseline row: yes (3 of 3 rows)" in summary
    assert "per-draft acceptance rate" in summary and "mean acceptance length" in summary
    assert pg.evaluate("() => { const t = document.querySelector('#batch-summary table');"
                       " return t.scrollWidth <= t.parentElement.clientWidth; }")   # the table fits its box
    assert axe_violations(pg) == []
    return boxes


def test_a_batch_of_3_on_a_desktop_set_by_hand(chromium, app_server):
    pg = open_page(chromium, app_server.url)
    try:
        pg.fill("#prompt textarea", PROMPT)
        pg.click("#pair input")
        pg.get_by_role("option", name=pair_label(PAIR_NGRAM)).click()
        pg.click("#k-policy input")
        pg.get_by_role("option", name="fixed K").click()
        for elem_id, value in (("k", 3), ("max-new", 16), ("batch-size", 3)):
            set_number(pg, elem_id, value)
        pg.click("#run")
        boxes = _the_batch_is_shown(pg, pg.viewport_size["width"])
        assert len({round(b["y"]) for b in boxes}) == 1                             # side by side
    finally:
        pg.close()


def test_a_batch_of_3_on_a_phone_from_a_link(chromium, app_server):
    pg = chromium.new_page(viewport=dict(PHONE), is_mobile=True, has_touch=True)
    pg.set_default_timeout(60_000)
    try:
        pg.goto(app_server.url + LINK)
        boxes = _the_batch_is_shown(pg, PHONE["width"])
        assert boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"]                        # one under the other
        assert pg.input_value("#batch-size input[type=number]") == "3"
    finally:
        pg.close()
