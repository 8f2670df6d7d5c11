"""End to end in a real browser: `python app.py` in a subprocess, driven by Debian chromium through the
playwright package (never `playwright install`). Saves docs/screenshot.png."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specdec_core import Trace

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update"]
FIGURES = ("plot-timeline", "plot-race", "plot-outcomes", "plot-pq", "plot-residual", "plot-positions", "plot-theory")

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                 reason=f"{CHROMIUM} is absent (apt-get install chromium, or make browser-deps)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    log_path = tmp_path_factory.mktemp("app") / "app.log"
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 150
        while True:
            if proc.poll() is not None:
                pytest.fail(f"app.py exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail(f"app.py did not serve {url} within 150 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        pg.set_default_timeout(30_000)
        pg.goto(server)
        pg.wait_for_selector("#run")
        yield pg
        browser.close()


def _plot_traces(pg, elem_id: str) -> int:
    return pg.evaluate(f"() => {{ const d = document.querySelector('#{elem_id} .js-plotly-plot');"
                       " return d && d.data ? d.data.length : -1; }")


def _plot_title(pg, elem_id: str) -> str:
    return pg.evaluate(f"() => {{ const d = document.querySelector('#{elem_id} .js-plotly-plot');"
                       " return d && d.layout && d.layout.title ? String(d.layout.title.text || '') : ''; }")


def test_live_run_step_export_replay(page, tmp_path):
    pg = page
    prompt = "Repeat this sentence exactly, twice: <b>Bold</b> cats & dogs sleep on the warm red mat."
    pg.fill("#prompt textarea", prompt)
    max_new = pg.locator("#max-new input[type=number]")
    max_new.fill("40")
    max_new.press("Enter")
    t0 = time.time()
    pg.click("#run")
    # tokens stream in while the run is going: the first ones appear before the baseline is done
    pg.wait_for_selector("#tokens .sd-stream .sd-tok", timeout=90_000)
    first_token_s = time.time() - t0
    pg.wait_for_function("() => (document.querySelector('#status') || {}).innerText?.includes('Done')",
                         timeout=150_000)
    assert first_token_s < 60, f"first token took {first_token_s:.0f} s"
    # every figure rendered with data (the residual may be an empty-state message figure)
    for fid in FIGURES:
        pg.wait_for_selector(f"#{fid} .js-plotly-plot")
    assert _plot_traces(pg, "plot-race") == 2, "race needs the speculative and the baseline curves"
    assert _plot_traces(pg, "plot-timeline") >= 4
    assert _plot_traces(pg, "plot-outcomes") == 5
    assert "measured speedup" in pg.inner_text("#summary")
    assert "identical to baseline" in pg.inner_text("#summary")
    assert "yes" in pg.locator("#summary tr", has_text="identical to baseline").inner_text()
    # user text is escaped, never interpreted
    assert pg.locator("#tokens b").count() == 0
    n_iter = pg.locator("#tokens .sd-stream .sd-it").count()
    assert n_iter >= 2
    # the default pair is the bundled model + its trained draft: real rejections are visible
    assert "trained draft" in pg.input_value("#pair input")
    assert pg.locator("#tokens .sd-stream .sd-rej").count() >= 1
    assert pg.get_attribute("#tokens .sd-sel", "data-it") == str(n_iter - 1)
    assert _plot_title(pg, "plot-pq").startswith(f"Iteration {n_iter}:")
    pg.screenshot(path=str(ROOT / "docs" / "screenshot.png"), full_page=True)

    # step back one iteration: the token stream and plot-pq / plot-residual follow
    pg.click("#prev")
    pg.wait_for_function(f"() => document.querySelector('#tokens .sd-sel')?.dataset.it === '{n_iter - 2}'")
    pg.wait_for_function(f"() => (document.querySelector('#plot-pq .js-plotly-plot')?.layout?.title?.text || '')"
                         f".startsWith('Iteration {n_iter - 1}:')")
    assert _plot_title(pg, "plot-residual").startswith(f"Iteration {n_iter - 1}:")
    pg.click("#next")
    pg.wait_for_function(f"() => document.querySelector('#tokens .sd-sel')?.dataset.it === '{n_iter - 1}'")

    # export: the downloaded file is a valid trace of what the page shows
    with pg.expect_download() as dl:
        pg.click("#export")
    exported = Trace.from_dict(json.loads(Path(dl.value.path()).read_text(encoding="utf-8")))
    assert len(exported.iterations) == n_iter and exported.prompt == prompt
    assert exported.baseline is not None and exported.stats.new_tokens <= 40

    # a hub preset that cannot be downloaded (offline) warns and keeps the current pair
    pg.click("#pair input")
    pg.get_by_role("option", name="distilgpt2 → gpt2-large (Hugging Face Hub)").click()
    pg.wait_for_function("() => (document.querySelector('#pair-status') || {}).innerText?.includes('Keeping')",
                         timeout=60_000)
    assert "trained draft" in pg.input_value("#pair input")

    # Replay: load an example with one click, then refuse a malformed upload with a clear message
    pg.get_by_role("tab", name="Replay").click()
    pg.click("#example-0")
    pg.wait_for_selector("#replay-tokens .sd-stream .sd-tok")
    pg.wait_for_selector("#replay-plot-theory .js-plotly-plot")
    assert _plot_traces(pg, "replay-plot-race") == 2
    assert "Loaded example" in pg.inner_text("#replay-note")
    pg.click("#replay-next")  # already on the last iteration: stays there, no error
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "specdec-trace/1", "config": {}}', encoding="utf-8")
    pg.set_input_files("#replay-upload input[type=file]", str(bad))
    pg.get_by_text("This file cannot be replayed").first.wait_for(timeout=20_000)


def test_stop_keeps_what_was_produced(page):
    pg = page
    pg.get_by_role("tab", name="Live").click()
    pg.fill("#prompt textarea", "Write a long story about a lighthouse keeper and a storm.")
    max_new = pg.locator("#max-new input[type=number]")
    max_new.fill("300")
    max_new.press("Enter")
    pg.click("#run")
    pg.wait_for_function("() => (document.querySelector('#status') || {}).innerText?.includes('Speculative decoding')",
                         timeout=90_000)
    pg.click("#stop")
    pg.wait_for_function("() => (document.querySelector('#status') || {}).innerText?.includes('Stopped')",
                         timeout=60_000, polling=250)
    pg.wait_for_selector("#plot-race .js-plotly-plot")
    assert "stopped by you" in pg.inner_text("#summary")
    kept = pg.locator("#tokens .sd-stream .sd-it").count()
    assert 1 <= kept < 150
    assert "no baseline" in " ".join(pg.evaluate(
        "() => (document.querySelector('#plot-race .js-plotly-plot').layout.annotations || []).map(a => a.text)"))


def _set_number(pg, elem_id: str, value: int) -> None:
    box = pg.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def _wait_for_data(pg, elem_id: str, timeout: int = 120_000) -> None:
    pg.wait_for_function(f"() => (document.querySelector('#{elem_id} .js-plotly-plot')?.data || []).length > 0",
                         timeout=timeout)


def test_teaching_tabs_each_run_once(page):
    """Exactness lab (correct, then with a bug switched on), simulator, theory, draft comparison, K sweep."""
    pg = page
    pg.get_by_role("tab", name="Exactness lab").click()
    _set_number(pg, "lab-n", 1500)
    pg.click("#lab-run")
    pg.wait_for_function("() => (document.querySelector('#lab-verdict') || {}).innerText?.includes('No bias detected')",
                         timeout=120_000)
    _wait_for_data(pg, "lab-plot")
    pg.click("#lab-bug-resample input")
    pg.click("#lab-run")
    pg.wait_for_function("() => (document.querySelector('#lab-verdict') || {}).innerText?.includes('Biased')",
                         timeout=120_000)

    pg.get_by_role("tab", name="Simulator").click()
    pg.click("#sim-slow input")                  # no slow motion in the test
    pg.click("#sim-run")
    pg.wait_for_selector("#sim-tokens .sd-stream .sd-tok", timeout=60_000)
    _wait_for_data(pg, "sim-plot")

    pg.get_by_role("tab", name="Theory").click()
    _wait_for_data(pg, "theory-heatmap")
    pg.click("#theory-refresh")                  # the Live run of this session is placed on the plots
    pg.wait_for_function("() => (document.querySelector('#theory-md') || {}).innerText?.includes('Your latest run')",
                         timeout=30_000)
    _wait_for_data(pg, "theory-time")            # where the time went, for that run
    pg.wait_for_function("() => (document.querySelector('#theory-cpu-md') || {}).innerText?.includes('Your latest "
                         "run')", timeout=30_000)

    pg.get_by_role("tab", name="Draft comparison").click()
    _set_number(pg, "compare-max-new", 8)
    pg.click("#compare-run")
    _wait_for_data(pg, "compare-plot", timeout=180_000)
    assert "toy" in pg.inner_text("#compare-rejected").lower()   # an incompatible candidate, with its failed check

    pg.get_by_role("tab", name="K sweep").click()
    _set_number(pg, "ksweep-kmax", 2)
    _set_number(pg, "ksweep-max-new", 8)
    pg.click("#ksweep-run")
    _wait_for_data(pg, "ksweep-plot", timeout=180_000)


def _slider(pg, elem_id: str) -> int:
    return int(pg.evaluate(f"() => document.querySelector('#{elem_id} input[type=range]').value"))


def _wait_for_anatomy(pg, iteration: int) -> None:
    # "Anatomy of iteration N — step …", or just "Anatomy of iteration N" for one that drafted nothing (a run's
    # last iteration may have no room left for a draft)
    pg.wait_for_function(f"() => /^Anatomy of iteration {iteration}( —|$)/.test("
                         "document.querySelector('#replay-plot-anatomy .js-plotly-plot')?.layout?.title?.text || '')")


def test_replay_opens_ready_and_the_keyboard_steps_and_plays(page):
    """Replay shows the first example with every figure drawn; ← / → / Home / End step, Space plays and pauses."""
    pg = page
    pg.reload()
    pg.wait_for_selector("#run")
    pg.get_by_role("tab", name="Replay").click()
    pg.wait_for_selector("#replay-tokens .sd-stream .sd-tok")
    assert "Loaded example" in pg.inner_text("#replay-note")
    frames = ("() => [...document.querySelectorAll('[id^=replay-plot-]')].map("
              "e => (e.querySelector('.js-plotly-plot')?.data || []).length)")
    pg.wait_for_function(f"() => ({frames})().every(n => n > 0)", timeout=20_000)
    assert len(pg.evaluate(frames)) == 8            # the seven figures and the anatomy, none an empty frame
    assert "Run" not in pg.inner_text("#replay-tokens")                  # no hint about a button it lacks
    assert "Space" in pg.inner_text("#replay-keys-hint")

    pg.click("#replay-note")                       # focus outside any field
    n = int(pg.evaluate("() => document.querySelector('#replay-iteration input[type=range]').max"))
    # each key's step is done when the anatomy (drawn last) shows it: a step still on its way would move the
    # slider back after the next key
    pg.keyboard.press("End")
    _wait_for_anatomy(pg, n)
    pg.keyboard.press("Home")
    _wait_for_anatomy(pg, 1)
    assert _slider(pg, "replay-iteration") == 1
    pg.keyboard.press("ArrowRight")
    pg.wait_for_function("() => (document.querySelector('#replay-plot-pq .js-plotly-plot')?.layout?.title?.text || '')"
                         ".startsWith('Iteration 2:')")
    assert _slider(pg, "replay-iteration") == 2
    _wait_for_anatomy(pg, 2)                       # drawn after plot-pq
    assert pg.get_attribute("#replay-tokens .sd-sel", "data-it") == "1"
    pg.keyboard.press("End")
    _wait_for_anatomy(pg, n)
    assert _slider(pg, "replay-iteration") == n

    # typing in a field does not step
    pg.click("#replay-pace input[type=number]")
    pg.keyboard.press("ArrowLeft")
    time.sleep(0.5)
    assert _slider(pg, "replay-iteration") == n

    # Space at the last iteration plays from the first one, by itself, at the pace (1 s per iteration)
    pg.click("#replay-note")
    pg.keyboard.press(" ")
    pg.wait_for_function("() => document.querySelector('#replay-play').innerText.includes('pause')")
    pg.wait_for_function("() => +document.querySelector('#replay-iteration input[type=range]').value >= 3",
                         timeout=10_000)
    pg.keyboard.press(" ")
    pg.wait_for_function("() => document.querySelector('#replay-play').innerText.includes('play')")
    stopped_at = _slider(pg, "replay-iteration")
    time.sleep(1.5)
    assert _slider(pg, "replay-iteration") == stopped_at < n


def test_presenter_mode_from_the_url(page, server):
    """?presenter=1: tokens at ≥ 24 px (computed style), larger figure text, the Live settings folded.
    Saves docs/presenter.png (the Replay tab in presenter mode)."""
    context = page.context.browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    try:
        pg.goto(server + "?presenter=1")
        pg.wait_for_selector("#run")
        pg.wait_for_function("() => document.body.classList.contains('sd-presenter')")
        pg.wait_for_function("() => document.querySelector('#presenter input')?.checked === true")
        pg.wait_for_function("() => !document.querySelector('#live-settings .label-wrap').classList.contains('open')")
        pg.get_by_role("tab", name="Replay").click()
        pg.wait_for_selector("#replay-tokens .sd-stream .sd-tok")
        px = pg.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#replay-tokens .sd-stream .sd-tok')).fontSize)")
        assert px >= 24, px
        pg.wait_for_selector("#replay-plot-pq .main-svg text")
        tick = pg.evaluate("() => parseFloat(getComputedStyle(document.querySelector("
                           "'#replay-plot-pq .main-svg text')).fontSize)")
        assert tick >= 16, tick
        pg.click("#replay-note")
        pg.keyboard.press("Home")
        pg.wait_for_function("() => document.querySelector('#replay-iteration input[type=range]').value === '1'")
        pg.keyboard.press("ArrowRight")
        pg.wait_for_function("() => (document.querySelector('#replay-plot-anatomy .js-plotly-plot')?.layout?.title"
                             "?.text || '').startsWith('Anatomy of iteration 2')")
        for i in (3, 4):                               # each step drawn before the next key (a busy machine is slow)
            pg.keyboard.press("ArrowRight")
            pg.wait_for_function(f"() => document.querySelector('#replay-iteration input[type=range]').value === '{i}'")
            pg.wait_for_function("() => (document.querySelector('#replay-plot-anatomy .js-plotly-plot')?.layout?.title"
                                 f"?.text || '').startsWith('Anatomy of iteration {i}')")
        pg.set_viewport_size({"width": 1400, "height": 1560})
        pg.evaluate("() => document.querySelector('#replay-note').scrollIntoView()")
        time.sleep(1.0)
        pg.screenshot(path=str(ROOT / "docs" / "presenter.png"), full_page=False)
        pg.click("#presenter input")                   # off again: normal type
        pg.wait_for_function("() => !document.body.classList.contains('sd-presenter')")
        assert pg.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#replay-tokens .sd-stream .sd-tok'))"
                           ".fontSize)") < 24
    finally:
        context.close()
