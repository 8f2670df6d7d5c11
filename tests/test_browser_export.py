"""The standalone replay (``components/export_html.py``) in a real browser: the exported file opened from file://
with every request that is not a file:// one aborted, so a page that needed the network would break. No app:
the file is built from a shipped example trace, with a hostile token text added to show it stays text."""
from __future__ import annotations

import json

import pytest

from components.render.replay_html import replay_html
from components.render.base import instructive_index
from components.pages.replay import EXAMPLES_DIR
from specdec_core import Trace
from tools.browser import VIEWPORT, browser, chromium_missing

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]
HOSTILE = '</script><img src="x" onerror="window.sdPwned=1">'


def _trace() -> Trace:
    d = json.loads((EXAMPLES_DIR / "sampling_t08.json").read_text(encoding="utf-8"))
    d["prompt"] = HOSTILE + d["prompt"]
    d["iterations"][0]["drafts"][0]["text"] = HOSTILE
    return Trace.from_dict(d)


def _anatomy_title(pg) -> str:
    return pg.evaluate("() => document.querySelector('#sd-anatomy').layout?.title?.text || ''")


def test_the_exported_replay_works_offline_from_a_file(tmp_path):
    trace = _trace()
    path = tmp_path / "replay.html"
    path.write_text(replay_html(trace), encoding="utf-8")
    start, n = instructive_index(trace), len(trace.iterations)
    blocked: list[str] = []
    with browser() as b:
        pg = b.new_page(viewport=dict(VIEWPORT))
        pg.set_default_timeout(30_000)

        def only_files(route):
            if route.request.url.startswith("file://"):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()
        pg.route("**/*", only_files)
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(path.as_uri())
        pg.wait_for_function("() => document.querySelector('#sd-anatomy .main-svg') !== null")
        assert _anatomy_title(pg).startswith(f"Anatomy of iteration {start + 1} ")
        assert pg.inner_text("#sd-position") == f"iteration {start + 1} / {n}"
        assert pg.locator(".sd-stream .sd-it").count() == n
        assert pg.locator(f'.sd-stream .sd-it.sd-sel[data-it="{start}"]').count() == 1
        assert "measured speedup" in pg.inner_text(".sd-summary")
        pg.keyboard.press("ArrowRight")
        pg.wait_for_function(f"() => /^Anatomy of iteration {start + 2} /.test("
                             "document.querySelector('#sd-anatomy').layout?.title?.text || '')")
        assert pg.inner_text("#sd-position") == f"iteration {start + 2} / {n}"
        assert pg.locator(f'.sd-stream .sd-it.sd-sel[data-it="{start + 1}"]').count() == 1
        pg.click("#sd-last")
        pg.wait_for_function(f"() => document.querySelector('#sd-position').innerText === 'iteration {n} / {n}'")
        assert pg.locator("#sd-next").is_disabled()
        pg.keyboard.press("Home")
        pg.wait_for_function("() => /^Anatomy of iteration 1 /.test("
                             "document.querySelector('#sd-anatomy').layout?.title?.text || '')")
        # hostile token text and prompt: shown as text, never as an element or a script
        assert HOSTILE in pg.inner_text(".sd-prompt")
        assert pg.locator("img").count() == 0 and pg.evaluate("() => window.sdPwned") is None
        assert json.loads(pg.evaluate("() => document.getElementById('sd-trace').textContent")) == trace.to_dict()
        assert not errors, errors
    assert blocked == []          # nothing even tried the network
