"""Issue 65, the teaching side of a busy server: the (B, K) chart of the Theory tab on hand-built batch prices (the
break-even line where the predicted speedup crosses ×1, the best K per B, a batched run placed on it), the Learn
chapter "A busy server" judged as a pure function of hand-built results (right, wrong, can't tell), its Reveal
through the tab's handler and a class's, the batch-size sweep and its interval on tiny models, and the background
measurement's pause between batch sizes. The chapter's run on the bundled model is in the slow suite (about half a
minute here)."""
from __future__ import annotations

import json
import math
import re

import plotly.graph_objects as go
import pytest

from conftest import make_tiny_lm
from components.pages.classroom.publish import reveal_for_class
from components.pages.learn import CHAPTERS
from components.pages.learn.busy import BUSY, SIZES, Crossover, crossover, reveal_busy
from components.pages.learn.tab import reveal_chapter, run_chapter
from components.pages.teaching.batch_view import FROM_SLIDER, update_batch_view
from components.render.batching import (LOSES, PAYS, UNSURE, BatchRunPoint, SizeRow, batch_speedup_figure,
                                        batch_theory_figure, batch_work_figure, best_k_per_size, speedup_grid)
from components.serving import batch_prices
from components.serving.classroom.room import RevealJob
from specdec_core import NGramDrafter, SpecConfig
from specdec_core.batch.baseline import attach_batch_baseline, batch_baseline
from specdec_core.batch.engine import batch_generate
from specdec_core.batch.prices import measured_batch_prices
from specdec_core.policy.batch_cost import BatchPrices, batch_speedup, crossover as priced_crossover
from specdec_core.policy.costmodel import AcceptanceProfile
from specdec_core.stats.intervals import batch_speedup_interval, bootstrap_speedup
from specdec_core.teaching.batches import batch_size_sweep

pytestmark = pytest.mark.usefixtures("one_thread")

NUMBER = [c.slug for c in CHAPTERS].index("busy") + 1
SIZES_MEASURED = (1, 2, 4, 8, 16)
WIDTHS = (1, 2, 3, 4, 5, 7, 9, 11)


def prices(per_token: float = 2.5) -> BatchPrices:
    """A CPU-like machine: a forward costs 30 ms plus ``per_token`` ms for every token it feeds (B rows × w), a
    draft step 3.5 ms plus 0.8 per row, small host times."""
    sizes = SIZES_MEASURED
    return BatchPrices(sizes, WIDTHS, tuple(tuple(30 + per_token * b * w for w in WIDTHS) for b in sizes),
                       tuple(3.5 + 0.8 * b for b in sizes), True, tuple(0.5 + 0.25 * b for b in sizes),
                       tuple(0.3 + 0.1 * b for b in sizes), "cpu")


ALL_B = tuple(range(1, 17))
ALPHA = AcceptanceProfile.constant(0.6)


# --- the Theory tab's (B, K) chart ---------------------------------------------------------------------------

def test_the_grid_crosses_one_where_the_break_even_line_is_drawn():
    p = prices()
    ks = list(range(0, WIDTHS[-1]))
    grid = speedup_grid(p, ALPHA, ALL_B, ks)
    assert grid[0] == [1.0] * len(ALL_B)                     # K = 0: plain decoding, ×1 by definition
    assert grid[1][0] == pytest.approx(batch_speedup(p, ALPHA, 1, 1))
    assert grid[1][0] > 1 > grid[1][-1]                      # at K = 1 the speedup crosses ×1 along B ...
    fig = batch_theory_figure(p, ALPHA, ALL_B, None, "α = 0.60")
    line = next(t for t in fig.data if isinstance(t, go.Contour))
    assert (line.contours.start, line.contours.end, line.contours.coloring) == (1.0, 1.0, "none")
    assert list(line.y) == ks[1:] and [list(r) for r in line.z] == grid[1:]   # ... and the line is drawn there
    heat = next(t for t in fig.data if isinstance(t, go.Heatmap))
    assert list(heat.x) == list(ALL_B) and [list(r) for r in heat.z] == grid


def test_best_k_per_batch_size_falls_to_zero_where_drafting_stops_paying():
    assert best_k_per_size([[1.0, 1.0, 1.0], [1.3, 1.1, 0.9], [1.4, 1.05, 0.8]], [0, 1, 2]) == [2, 1, 0]
    p = prices()
    ks = list(range(0, WIDTHS[-1]))
    best = best_k_per_size(speedup_grid(p, ALPHA, ALL_B, ks), ks)
    stop = priced_crossover(p, ALPHA, ks[-1], ALL_B[-1])           # the policy's own crossover agrees
    assert stop is not None and 1 < stop < 16
    assert all(k >= 1 for k in best[:stop - 1]) and all(k == 0 for k in best[stop - 1:])
    assert best == sorted(best, reverse=True)                       # a fuller batch never wants more drafts here
    fig = batch_theory_figure(p, ALPHA, ALL_B)
    stars = next(t for t in fig.data if t.name and t.name.startswith("best K"))
    assert list(stars.y) == best and "speculation off" in stars.hovertext[-1]
    flat = prices(per_token=0.01)                                   # a memory-bound machine: it pays at every B
    assert priced_crossover(flat, ALPHA, 10, 16) is None
    assert 0 not in best_k_per_size(speedup_grid(flat, ALPHA, ALL_B, ks), ks)


def test_a_batched_run_is_placed_with_its_measured_speedup():
    fig = batch_theory_figure(prices(), ALPHA, ALL_B, BatchRunPoint(4, 3.0, 1.08), "α = 0.60")
    run = next(t for t in fig.data if t.name == "your latest batched run")
    assert (run.x[0], run.y[0], run.text[0]) == (4, 3.0, "×1.08") and "measured ×1.08" in run.hovertext[0]
    high = batch_theory_figure(prices(), ALPHA, ALL_B, BatchRunPoint(2, 14.0, None))
    run = next(t for t in high.data if t.name == "your latest batched run")
    assert run.y[0] == 10 and "beyond the chart" in run.hovertext[0] and "no baseline" in run.hovertext[0]
    waiting = batch_theory_figure(None, ALPHA, ALL_B, waiting=batch_prices.MEASURING)
    assert "Measuring" in waiting.layout.annotations[0].text and not waiting.data


@pytest.fixture
def machine_prices():
    """The Theory tab reads hand-built prices as if measured in the background."""
    job = batch_prices.BatchPriceJob(None)
    job.prices = prices()
    batch_prices.set_current(job)
    yield job
    batch_prices.set_current(None)


def test_the_theory_view_says_measuring_until_the_prices_are_there():
    batch_prices.set_current(None)
    fig, md = update_batch_view(0.6, FROM_SLIDER, None)
    assert "none here yet" in fig.layout.annotations[0].text and "break-even" in md
    job = batch_prices.BatchPriceJob(None)
    batch_prices.set_current(job)
    try:
        assert "Measuring this machine" in update_batch_view(0.6, FROM_SLIDER, None)[0].layout.annotations[0].text
        job.error = "RuntimeError: <b>no</b>"
        assert "could not be measured" in batch_prices.prices_now()[1]
    finally:
        batch_prices.set_current(None)


def test_the_theory_view_prices_a_batched_run_with_its_own_acceptance(machine_prices, tiny_pair):
    target, _ = tiny_pair
    cfg = SpecConfig(k=2, temperature=0.0, max_new_tokens=8)
    prompts = [[1, 2, 3, 1, 2], [4, 5, 1, 2, 3], [2, 3]]
    trace = batch_generate(target, NGramDrafter(), prompts, cfg)
    attach_batch_baseline(trace, *batch_baseline(target, prompts, cfg))
    fig, md = update_batch_view(0.6, "your latest batched run (measured by draft position)", trace.to_dict())
    run = next(t for t in fig.data if t.name == "your latest batched run")
    ks = [f.k for f in trace.batch.forwards]
    assert run.x[0] == 3 and run.y[0] == pytest.approx(sum(ks) / len(ks))
    assert "your batched run's, by draft position" in fig.layout.title.text
    assert f"measured ×{trace.batch.stats.speedup:.2f}" in md and "**Your latest batched run**: B = 3" in md
    assert re.search(r"drafting (stops paying at B = \d+|still pays at B = 16)\.", md)
    assert "prices for the feature-reading draft (your run drafted with ngram)" in md
    slider = update_batch_view(0.6, FROM_SLIDER, trace.to_dict())[0]
    assert "α = 0.60 at every draft position" in slider.layout.title.text
    single = trace.to_dict()                                  # a run of one sequence has no (B, K) point
    del single["batch"]
    single["schema"] = "specdec-trace/1"
    assert not any(t.name == "your latest batched run" for t in update_batch_view(0.6, FROM_SLIDER, single)[0].data)


# --- the chapter's answer, from hand-built results ----------------------------------------------------------

def row(b: int, s: float, lo: float, hi: float, enough: bool = True) -> SizeRow:
    return SizeRow(b, s, lo, hi, enough, 2.3, b * 3.6, 100 + 10 * b, 60 + 4 * b)


CLEAR = [row(1, 1.9, 1.2, 2.8), row(2, 1.3, 1.1, 1.5), row(4, 0.9, 0.8, 0.98), row(8, 0.8, 0.7, 0.9),
         row(16, 0.7, 0.6, 0.8)]


def test_the_verdict_of_each_size_is_its_interval():
    assert [r.verdict for r in CLEAR] == [PAYS, PAYS, LOSES, LOSES, LOSES]
    assert row(2, 1.2, 1.1, 1.3, enough=False).verdict == UNSURE and row(2, 1.0, 0.9, 1.1).verdict == UNSURE
    none = row(4, 1.3, 0.0, float("inf"), enough=False)                # a size without an interval
    assert none.verdict == UNSURE and none.interval_text() == "no interval"
    bars = batch_speedup_figure([none], 3).data
    assert [list(t.error_y.array) for t in bars if t.name == UNSURE] == [[0.0]]
    assert "B = 4: ×1.30 (no interval, can't tell)" in reveal_busy(4, [none], 3).judged


@pytest.mark.parametrize("rows, expected", [
    (CLEAR, Crossover(3, 4, 0, False)),                                        # pays at 2, not at 4: 3 or 4
    ([row(1, 1.5, 1.2, 1.8), row(2, 1.0, 0.9, 1.1), row(4, 0.8, 0.7, 0.9)], Crossover(2, 4, 1, False)),
    ([row(1, 1.5, 1.2, 1.8), row(2, 1.0, 0.9, 1.1), row(4, 1.0, 0.8, 1.2), row(8, 0.8, 0.7, 0.9)],
     Crossover(2, 8, 2, False)),                                               # two sizes it cannot call
    ([row(1, 0.8, 0.7, 0.9), row(2, 1.2, 1.1, 1.3)], Crossover(1, 1, 0, False)),     # the first loss counts
    ([row(1, 1.5, 1.2, 1.8), row(16, 1.2, 1.1, 1.3)], Crossover(16, 16, 0, True)),   # still pays: "16 or more"
    ([row(1, 1.5, 1.2, 1.8), row(8, 1.2, 1.1, 1.3), row(16, 1.0, 0.9, 1.1)], Crossover(9, 16, 1, True)),
])
def test_the_crossover_lies_between_the_last_size_that_pays_and_the_first_that_does_not(rows, expected):
    assert crossover(rows) == expected


def test_a_guess_inside_is_right_outside_wrong_and_too_wide_cannot_tell():
    assert reveal_busy(3, CLEAR, 3).verdict == reveal_busy(4, CLEAR, 3).verdict == "right"
    assert reveal_busy(2, CLEAR, 3).verdict == reveal_busy(16, CLEAR, 3).verdict == "wrong"
    wide = [row(1, 1.5, 1.2, 1.8), row(2, 1.0, 0.9, 1.1), row(4, 1.0, 0.8, 1.2), row(8, 0.8, 0.7, 0.9)]
    a = reveal_busy(4, wide, 3)
    assert a.verdict == "can't tell" and "Run longer" in a.html and "between B = 2 and 8" in a.html
    assert reveal_busy(16, wide, 3).verdict == "wrong"                       # wrong outside, however wide
    pays = [row(1, 1.5, 1.2, 1.8), row(16, 1.2, 1.1, 1.3)]
    b = reveal_busy(16, pays, 3)
    assert b.verdict == "right" and "still pays at B = 16" in b.html and "arithmetic to spare" in b.html
    c = reveal_busy(3, CLEAR, 3)
    assert c.truth.right == (3, 4) and (c.truth.low, c.truth.high) == (2.5, 4.5)
    assert "at B = 16 one verify fed 58 tokens (up to 16 × 4)" in c.html and "×0.70" in c.html
    assert "B = 4: ×0.90 (0.80–0.98, does not pay)" in c.judged and "Your guess:</b> B = 3" in c.html
    with pytest.raises(ValueError):
        crossover([])


def test_the_reveal_draws_the_speedups_and_works_for_a_class():
    memo = {"rows": [r.to_dict() for r in CLEAR], "tokens": 24}
    json.dumps(memo)                                          # plain values: what a shared class store keeps
    answer, first, second = reveal_chapter(None, NUMBER, 4, memo)
    assert "✓ right" in answer and "stops paying between B = 3 and 4" in answer
    assert isinstance(first, type(reveal_chapter(None, NUMBER, 4, None)[1]))           # figure 1 kept as it was
    assert second.layout.title.text.startswith("Measured speedup by batch size")
    points = [t for t in second.data if t.name in (PAYS, LOSES)]
    assert sorted(x for t in points for x in t.x) == list(SIZES_MEASURED)
    assert any(s.x0 == pytest.approx(3 - 0.45) for s in second.layout.shapes)          # the band where it stops
    revealed, result = reveal_for_class(None, RevealJob(NUMBER, 1, memo, None, {"a": 4, "b": 2, "c": 8}))
    assert revealed.right == 1 and revealed.total == 3
    verdicts = dict(revealed.verdicts)
    assert verdicts[4] == "right" and verdicts[2] == "wrong" and verdicts[8] == "wrong", verdicts


def test_the_chapter_is_declared_like_the_others():
    assert BUSY in CHAPTERS and CHAPTERS[NUMBER - 2].slug == "trees" and CHAPTERS[NUMBER].slug == "pitfalls"
    assert (BUSY.guess.minimum, BUSY.guess.maximum, BUSY.guess.step) == (SIZES[0], SIZES[-1], 1)
    text = BUSY.text + BUSY.guess.label
    assert "×" not in text.replace("B × (K + 1)", "") and "stops paying at" not in text   # no answer before Reveal
    assert batch_work_figure([], 3).layout.annotations and batch_speedup_figure([], 3).layout.annotations
    work = batch_work_figure(CLEAR, 3, "note")
    assert [list(t.y) for t in work.data][0] == list(SIZES_MEASURED)
    shown = json.dumps(work.to_plotly_json(), default=str)
    assert "speedup" not in shown and "pays" not in shown                 # the run's figure shows work, not the answer


# --- the sweep and its interval, on tiny models ----------------------------------------------------------------

def test_a_batched_runs_interval_resamples_its_forwards_and_steps(tiny_pair):
    target, _ = tiny_pair
    cfg = SpecConfig(k=2, temperature=0.0, max_new_tokens=12)
    prompts = [[1, 2, 3, 1, 2, 3], [2, 3, 1], [4, 5]]
    trace = batch_generate(target, NGramDrafter(), prompts, cfg)
    assert batch_speedup_interval(trace) is None                          # no baseline yet
    attach_batch_baseline(trace, *batch_baseline(target, prompts, cfg))
    iv = batch_speedup_interval(trace)
    assert iv.point == trace.batch.stats.speedup and iv.low <= iv.point <= iv.high
    assert iv.method == "bootstrap over the batch's forwards" and iv.enough == (len(trace.batch.forwards) >= 10)
    # one token per baseline step is the single-run bootstrap exactly
    args = ([3, 2, 4, 1], [10.0, 12.0, 9.0, 11.0], 5.0, [4.0, 5.0, 4.5, 6.0, 4.0], 8.0, 1)
    assert bootstrap_speedup(*args) == bootstrap_speedup(*args, base_tokens=[1] * 5)
    low, high = bootstrap_speedup(*args, base_tokens=[2] * 5)              # twice the tokens a step: half the speedup
    assert (low, high) != bootstrap_speedup(*args) and high < bootstrap_speedup(*args)[1]
    with pytest.raises(ValueError):
        bootstrap_speedup(*args, base_tokens=[1] * 4)


def test_the_sweep_runs_each_size_beside_its_baseline(tiny_pair):
    target, draft = tiny_pair
    from specdec_core import ModelDrafter
    cfg = SpecConfig(k=2, temperature=0.0, max_new_tokens=6)
    sweep = batch_size_sweep(target, ModelDrafter(draft), [[1, 2, 3], [2, 4], [5, 1, 2, 3]], (1, 3, 5), cfg)
    assert [p.size for p in sweep.points] == [1, 3, 5] and sweep.k == 2
    for p in sweep.points:
        assert p.trace.batch.size == p.size and p.trace.batch.baseline is not None
        assert p.speedup == p.trace.batch.stats.speedup > 0 and p.interval is not None
        assert p.fed_per_verify <= p.size * 3 and p.iteration_ms > 0 and p.baseline_step_ms > 0
        assert [r.new_token_ids for r in p.trace.rows()] == [r.baseline.new_token_ids for r in p.trace.rows()]
    assert sweep.points[2].trace.rows()[3].prompt_ids == [1, 2, 3]           # five rows from three prompts
    r = SizeRow.of(sweep.points[0])
    assert r.size == 1 and math.isfinite(r.high) and SizeRow(**r.to_dict()) == r
    with pytest.raises(ValueError, match="batch size"):
        batch_size_sweep(target, ModelDrafter(draft), [[1, 2]], (17,), cfg)
    with pytest.raises(ValueError, match="tree"):
        batch_size_sweep(target, ModelDrafter(draft), [[1, 2]], (1,), SpecConfig(k=2, tree_nodes=4))


def test_a_background_measurement_gives_way_between_batch_sizes():
    target = make_tiny_lm(vocab_size=160, seed=3)                     # the prices' context draws ids from 100 up
    cfg = SpecConfig(k=2, temperature=0.0, k_policy="cost")
    drafter = NGramDrafter()
    paused = []
    got = measured_batch_prices(target, drafter, cfg, batch_generate, (1, 2, 3), pause=lambda: paused.append(1))
    assert len(paused) == 2 and got.sizes == (1, 2, 3) and got.widths == (1, 2, 3)
    assert measured_batch_prices(target, drafter, cfg, batch_generate, (1, 2, 3), pause=paused.append) is got
    assert measured_batch_prices(target, drafter, cfg, batch_generate, (1, 2, 3)) is got and len(paused) == 2


# --- the chapter on the bundled model ----------------------------------------------------------------------------

@pytest.mark.slow
def test_the_chapter_runs_and_reveals_on_the_bundled_model(bundled):
    from test_app_handlers import BundledPool
    pool = BundledPool(*bundled)
    note, work, later, memo, cleared = run_chapter(pool, NUMBER)
    assert [r["size"] for r in memo["rows"]] == list(SIZES) and cleared == ""
    assert "Tokens each row kept per verify" in note and "×" not in note
    assert list(work.data[0].y) == list(SIZES)
    json.dumps(memo)
    rows = [SizeRow(**d) for d in memo["rows"]]
    assert all(r.speedup > 0 and r.low <= r.speedup <= r.high for r in rows)
    assert all(1 <= r.per_row <= 4 for r in rows)                           # K = 3: at most 4 tokens a row
    x = crossover(rows)
    answer = reveal_chapter(pool, NUMBER, x.low, memo)[0]
    assert ("✓ right" in answer) == x.decided and "Why:" in answer


@pytest.mark.parametrize("alpha", [float("nan"), 1.5, "<b>x</b>", None])
def test_the_theory_view_refuses_a_bad_alpha_in_words(alpha):
    import gradio as gr
    with pytest.raises(gr.Error) as e:
        update_batch_view(alpha, FROM_SLIDER, None)
    assert "α" in str(e.value) and "<b>" not in str(e.value)


def test_the_theory_view_ignores_a_broken_trace(machine_prices):
    fig, md = update_batch_view(0.6, "anything", {"schema": "specdec-trace/2", "batch": {"size": "<b>"}})
    assert not any(t.name == "your latest batched run" for t in fig.data) and "Run a batch on the Live tab" in md
