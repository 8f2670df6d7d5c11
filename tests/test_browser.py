"""End to end in a real browser: the session's app (``app_server`` in conftest.py, ``python app.py`` in a
subprocess) driven by Debian chromium through the playwright package, never ``playwright install``
(``tools/browser.py``). The default run keeps one smoke test: the default Live run streams tokens, draws every
figure and reports its speedup. The rest drives every tab and is marked slow (``make test-slow``). Nothing is
written to the tree: ``make screenshots`` refreshes the README's pictures (``tools/screenshots.py``)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specdec_core import Trace
from tools.browser import (FIGURES, STATUS_JS, VIEWPORT, browser, chromium_missing, open_page,
                           plot_title as _plot_title, plot_traces as _plot_traces, presenter_replay_at, run_live,
                           set_number as _set_number, wait_for_anatomy)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")]


@pytest.fixture(scope="module")
def server(app_server):
    return app_server.url


@pytest.fixture(scope="module")
def page(server):
    with browser() as b:
        yield open_page(b, server, accept_downloads=True)


def test_smoke_the_default_live_run(page):
    """The page as a visitor finds it: Run with the default prompt, pair and settings."""
    pg = page
    first_token_s = run_live(pg)
    assert first_token_s < 60, f"first token took {first_token_s:.0f} s"
    assert pg.locator("#tokens .sd-stream .sd-tok").count() >= 1
    assert pg.locator("#tokens .sd-stream .sd-it").count() >= 1
    assert all(_plot_traces(pg, fid) >= 0 for fid in FIGURES)
    assert _plot_traces(pg, "plot-race") == 2, "race needs the speculative and the baseline curves"
    assert _plot_traces(pg, "plot-timeline") >= 4
    summary = pg.inner_text("#summary")
    assert "measured speedup" in summary and "identical to baseline" in summary and "95 % CI" in summary
    assert "yes" in pg.locator("#summary tr", has_text="identical to baseline").inner_text()


def _tree_drawn(pg, prefix: str, iteration: int | None = None) -> None:
    """Until the tree figure and its mask show an iteration (``iteration``, 1-based, when given) with data, the
    one-line hint hidden."""
    shows = f"Token tree of iteration {iteration or ''}"
    pg.wait_for_function(f"() => (document.querySelector('#{prefix}plot-tree .js-plotly-plot')?.layout?.title?.text"
                         f" || '').startsWith('{shows}')", timeout=60_000)
    for elem_id in (f"{prefix}plot-tree", f"{prefix}plot-tree-mask"):
        _wait_for_data(pg, elem_id, timeout=60_000)
    assert not pg.locator(f"#{prefix}tree-hint").is_visible()


def _tree_labels(pg, elem_id: str) -> list[str]:
    return pg.evaluate(f"() => document.querySelector('#{elem_id} .js-plotly-plot').data"
                       ".find(t => t.mode === 'markers+text').text")


def test_replay_shows_the_recorded_token_tree(page):
    """The tree example in Replay: its iteration's tree (nodes, the path) and the verify's attention mask."""
    pg = page
    pg.get_by_role("tab", name="Replay").click()
    pg.wait_for_selector("#replay-tokens .sd-stream .sd-tok")
    assert pg.locator("#replay-tree-hint").is_visible()          # the opening example verified chains only
    pg.locator("button", has_text="token trees:").click()
    pg.wait_for_function("() => (document.querySelector('#replay-note') || {}).innerText?.includes('token_tree')")
    _tree_drawn(pg, "replay-")
    labels = _tree_labels(pg, "replay-plot-tree")
    assert len(labels) >= 3 and "root" in labels[0]
    assert "target draw" in _plot_title(pg, "replay-plot-tree")
    pg.click("#replay-first")                                    # stepping redraws the tree of that iteration
    _tree_drawn(pg, "replay-", 1)
    pg.get_by_role("tab", name="Live").click()


@pytest.mark.slow
def test_a_live_tree_run_draws_its_tree(page):
    """Live with tree nodes = 6 (fixed K, greedy): every iteration a tree; the output equals the baseline's."""
    pg = page
    pg.get_by_role("tab", name="Live").click()
    pg.click("#k-policy input")
    pg.get_by_role("option", name="fixed K").click()
    _set_number(pg, "tree-nodes", 6)
    try:
        run_live(pg, max_new=16)
        pg.click("#first")
        _tree_drawn(pg, "", 1)
        assert len(_tree_labels(pg, "plot-tree")) >= 3                      # the root, its nodes, the last token
        assert "A token tree of" in _plot_title(pg, "plot-anatomy")
        assert "yes" in pg.locator("#summary tr", has_text="identical to baseline").inner_text()  # greedy: exact
    finally:
        _set_number(pg, "tree-nodes", 0)
        pg.click("#k-policy input")
        pg.get_by_role("option", name="cost-aware: the K with the most predicted tokens/s").click()


@pytest.mark.slow
def test_theory_prices_the_live_run_on_other_hardware(page):
    pg = page
    run_live(pg, max_new=24)
    pg.get_by_role("tab", name="Theory").click()
    pg.click("#theory-refresh")
    pg.wait_for_function("() => (document.querySelector('#theory-whatif-md') || {}).innerText?.includes('NVIDIA "
                         "H100')", timeout=60_000)
    _wait_for_data(pg, "theory-whatif")
    table = pg.inner_text("#theory-whatif-md")
    assert "this device (cpu), measured costs" in table and "Measured here" in table and "95 % CI" in table
    assert _plot_traces(pg, "theory-whatif") == 2        # measured here; predicted on this device and the profiles


@pytest.mark.slow
def test_live_run_step_export_replay(page, tmp_path):
    pg = page
    prompt = "Repeat this sentence exactly, twice: <b>Bold</b> cats & dogs sleep on the warm red mat."
    first_token_s = run_live(pg, prompt, max_new=40)
    assert first_token_s < 60, f"first token took {first_token_s:.0f} s"
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
    # the finished run opens on its first rejection
    first_rejection = pg.evaluate("() => [...document.querySelectorAll('#tokens .sd-stream .sd-it')]"
                                  ".findIndex(it => it.querySelector('.sd-rej'))")
    assert pg.get_attribute("#tokens .sd-sel", "data-it") == str(first_rejection)
    assert _plot_title(pg, "plot-pq").startswith(f"Iteration {first_rejection + 1}:")

    # step to the last iteration and back one: the token stream and plot-pq / plot-residual follow
    pg.click("#last")
    pg.wait_for_function(f"() => document.querySelector('#tokens .sd-sel')?.dataset.it === '{n_iter - 1}'")
    pg.click("#prev")
    pg.wait_for_function(f"() => document.querySelector('#tokens .sd-sel')?.dataset.it === '{n_iter - 2}'")
    for fid in ("plot-pq", "plot-residual"):       # the page draws one figure at a time, the newest data of each
        pg.wait_for_function(f"() => (document.querySelector('#{fid} .js-plotly-plot')?.layout?.title?.text || '')"
                             f".startsWith('Iteration {n_iter - 1}:')")
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
    # one figure per browser task: the race may be drawn after the theory figure
    pg.wait_for_function("() => document.querySelector('#replay-plot-race .js-plotly-plot')?.data?.length === 2")
    assert "Loaded example" in pg.inner_text("#replay-note")
    pg.click("#replay-last")
    pg.click("#replay-next")  # already on the last iteration: stays there, no error
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "specdec-trace/1", "config": {}}', encoding="utf-8")
    pg.set_input_files("#replay-upload input[type=file]", str(bad))
    pg.get_by_text("This file cannot be replayed").first.wait_for(timeout=20_000)


@pytest.mark.slow
def test_stop_keeps_what_was_produced(page):
    pg = page
    pg.get_by_role("tab", name="Live").click()
    pg.fill("#prompt textarea", "Write a long story about a lighthouse keeper and a storm.")
    max_new = pg.locator("#max-new input[type=number]")
    max_new.fill("300")
    max_new.press("Enter")
    pg.click("#run")
    pg.wait_for_function(STATUS_JS, arg="Speculative decoding", timeout=90_000)
    pg.click("#stop")
    pg.wait_for_function(STATUS_JS, arg="Stopped", timeout=60_000, polling=250)
    pg.wait_for_selector("#plot-race .js-plotly-plot")
    assert "stopped by you" in pg.inner_text("#summary")
    kept = pg.locator("#tokens .sd-stream .sd-it").count()
    assert 1 <= kept < 150
    assert "no baseline" in " ".join(pg.evaluate(
        "() => (document.querySelector('#plot-race .js-plotly-plot').layout.annotations || []).map(a => a.text)"))


def _wait_for_data(pg, elem_id: str, timeout: int = 120_000) -> None:
    pg.wait_for_function(f"() => (document.querySelector('#{elem_id} .js-plotly-plot')?.data || []).length > 0",
                         timeout=timeout)


@pytest.mark.slow
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

    if not pg.evaluate(STATUS_JS, "Done"):
        run_live(pg, max_new=8)                  # run alone: Theory needs a Live run of this page to place
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


@pytest.mark.slow
def test_replay_opens_ready_and_the_keyboard_steps_and_plays(page):
    """Replay shows the first example with every figure drawn; ← / → / Home / End step, Space plays and pauses."""
    pg = page
    pg.reload()
    pg.wait_for_selector("#learn-title")
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
    wait_for_anatomy(pg, n)
    pg.keyboard.press("Home")
    wait_for_anatomy(pg, 1)
    assert _slider(pg, "replay-iteration") == 1
    pg.keyboard.press("ArrowRight")
    pg.wait_for_function("() => (document.querySelector('#replay-plot-pq .js-plotly-plot')?.layout?.title?.text || '')"
                         ".startsWith('Iteration 2:')")
    assert _slider(pg, "replay-iteration") == 2
    wait_for_anatomy(pg, 2)                       # drawn after plot-pq
    assert pg.get_attribute("#replay-tokens .sd-sel", "data-it") == "1"
    pg.keyboard.press("End")
    wait_for_anatomy(pg, n)
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


@pytest.mark.slow
def test_presenter_mode_from_the_url(page, server):
    """?presenter=1: tokens at ≥ 24 px (computed style), larger figure text, the Live settings folded; the
    keyboard steps the Replay tab; switched off, the normal type is back."""
    context = page.context.browser.new_context(viewport=dict(VIEWPORT))
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    try:
        presenter_replay_at(pg, server, iteration=4)
        px = pg.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#replay-tokens .sd-stream .sd-tok')).fontSize)")
        assert px >= 24, px
        tick = pg.evaluate("() => parseFloat(getComputedStyle(document.querySelector("
                           "'#replay-plot-pq .main-svg text')).fontSize)")
        assert tick >= 16, tick
        pg.click("#presenter input")                   # off again: normal type
        pg.wait_for_function("() => !document.body.classList.contains('sd-presenter')")
        assert pg.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#replay-tokens .sd-stream .sd-tok'))"
                           ".fontSize)") < 24
    finally:
        context.close()
