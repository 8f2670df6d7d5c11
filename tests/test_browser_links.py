"""Links, exports and first impressions in a real browser (the session's app, ``app_server``; chromium as in
tests/test_browser.py). The default run keeps one short check: a hostile link and a hostile upload are refused
with their values shown as text, and no element of theirs appears. The rest is slow: a run made by hand, its
"copy link" opened in a fresh page (the same trace, run at once), "Export replay (HTML)" from the Live tab, and the
Simulator showing a run as soon as its tab opens."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from components.pages.live import page_defaults
from components.serving.pairs import PAIR_NGRAM
from components.pages.replay import EXAMPLES_DIR
from components.pages.links import parse_live_query
from specdec_core import Trace
from tools.browser import STATUS_JS, browser, chromium_missing, open_page, set_number, show_tab

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]
NO_HOSTILE_IMG = "() => document.querySelectorAll('img[src*=\"sd-hostile\"]').length === 0"


@pytest.fixture(scope="module")
def server(app_server):
    return app_server.url


@pytest.fixture(scope="module")
def chromium():
    with browser() as b:
        yield b


def test_a_hostile_link_and_a_hostile_upload_show_their_values_as_text(chromium, server, tmp_path):
    img = '<img src="sd-hostile-{}">'
    query = (f"?tab=live&k={quote(img.format('k'))}&prompt={quote(img.format('p'))}&pair={quote(img.format('pair'))}"
             "&run=1")
    pg = open_page(chromium, server + query, tab=None)
    try:
        pg.get_by_text("This link's settings were not applied").first.wait_for(timeout=30_000)
        toast = pg.get_by_text("This link's settings were not applied").first.inner_text()
        assert img.format("k") in toast and img.format("pair") in toast        # quoted as text
        assert "not applied" in pg.inner_text("#status")
        assert pg.evaluate(NO_HOSTILE_IMG)
        assert pg.input_value("#prompt textarea") == page_defaults().prompt     # nothing was applied ...
        assert pg.locator("#tokens .sd-stream").count() == 0                   # ... and nothing runs

        d = json.loads((EXAMPLES_DIR / "ngram_extractive.json").read_text(encoding="utf-8"))
        d["finish_reason"] = img.format("finish") + "eos"
        bad = tmp_path / "hostile.json"
        bad.write_text(json.dumps(d), encoding="utf-8")
        show_tab(pg, "Replay")
        pg.set_input_files("#replay-upload input[type=file]", str(bad))
        pg.get_by_text("This file cannot be replayed").first.wait_for(timeout=20_000)
        assert img.format("finish") in pg.get_by_text("This file cannot be replayed").first.inner_text()
        assert pg.evaluate(NO_HOSTILE_IMG)
    finally:
        pg.close()


def _choose(pg, elem_id: str, label: str) -> None:
    pg.click(f"#{elem_id} input")
    pg.get_by_role("option", name=label).click()


def _wait_done(pg) -> None:
    pg.wait_for_function(STATUS_JS, arg="Done", timeout=150_000)


def _exported(pg) -> Trace:
    with pg.expect_download() as dl:
        pg.click("#export")
    return Trace.from_dict(json.loads(Path(dl.value.path()).read_text(encoding="utf-8")))


def _run_signature(t: Trace) -> list:
    return [(it.k, [(d.token_id, d.u, d.accepted) for d in it.drafts], it.emitted) for it in t.iterations]


@pytest.mark.slow
def test_copy_link_reproduces_a_run_made_by_hand_and_export_writes_a_standalone_replay(chromium, server):
    prompt = "Repeat exactly: one two three, one two three, one two three."
    pg = open_page(chromium, server)
    try:
        _choose(pg, "pair", "SmolLM2-135M (bundled) + n-gram prompt lookup")
        pg.fill("#prompt textarea", prompt)
        set_number(pg, "k", 4)
        _choose(pg, "k-policy", "fixed K")
        set_number(pg, "temperature", 0.9)      # sampling: the seed decides the draws
        set_number(pg, "max-new", 12)
        set_number(pg, "seed", 7)
        pg.click("#baseline input")             # no baseline: only the speculative run is compared
        pg.click("#run")
        _wait_done(pg)
        by_hand = _exported(pg)
        assert by_hand.config["temperature"] == 0.9 and by_hand.config["seed"] == 7
        assert any(d.u is not None for it in by_hand.iterations for d in it.drafts)

        pg.click("#copy-link")
        pg.wait_for_function("() => (document.querySelector('#copy-link-url textarea, #copy-link-url input') "
                             "|| {}).value?.startsWith('http')")
        link = pg.input_value("#copy-link-url textarea, #copy-link-url input")
        assert link.startswith(server.rstrip("/"))
        settings = parse_live_query(parse_qs(urlsplit(link).query), page_defaults()).settings
        assert settings is not None and settings.pair == PAIR_NGRAM and settings.prompt == prompt

        # Export replay (HTML): one file, the trace and plotly.js inside
        pg.click("#export-html")
        with pg.expect_download() as dl:
            pg.locator("#export-html-file a").first.click(timeout=60_000)
        page = Path(dl.value.path()).read_text(encoding="utf-8")
        assert page.startswith("<!DOCTYPE html>") and 'id="sd-figures"' in page and len(page) > 4_000_000
    finally:
        pg.close()

    fresh = open_page(chromium, link, tab=None)          # the link opens the Live tab and runs at once
    try:
        fresh.wait_for_selector("#run", state="visible")
        _wait_done(fresh)
        from_link = _exported(fresh)
    finally:
        fresh.close()
    assert from_link.new_token_ids == by_hand.new_token_ids
    assert _run_signature(from_link) == _run_signature(by_hand)


@pytest.mark.slow
def test_the_simulator_shows_a_run_when_its_tab_opens(chromium, server):
    pg = open_page(chromium, server, tab=None)
    try:
        show_tab(pg, "Simulator")
        pg.wait_for_selector("#sim-tokens .sd-stream .sd-tok", timeout=60_000)
        pg.wait_for_function("() => /^Anatomy of iteration/.test(document.querySelector('#sim-plot-anatomy "
                             ".js-plotly-plot')?.layout?.title?.text || '')", timeout=60_000)
    finally:
        pg.close()
