"""The batch's views (``components/render/batch.py``): pure builders compared by their data, on a hand-built
two-row batch (every number known) and on a real batched run of two tiny models; hostile request text escaped;
a single run's trace gives no batch view."""
from __future__ import annotations

import json

import pytest

from components.pages.batch_views import N_BATCH_OUTPUTS, batch_updates
from components.render import batch as rb
from conftest import make_tiny_lm
from specdec_core import NGramDrafter, SpecConfig, Trace
from specdec_core.batch.baseline import attach_batch_baseline, batch_baseline
from specdec_core.batch.engine import batch_generate
from specdec_core.trace import (BaselineResult, BatchBaseline, BatchForward, BatchRecord, BatchStats, BonusRecord,
                                DraftRecord, IterationRecord, ResampledRecord, Stats)

HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


def _draft(token: int, accepted: bool) -> DraftRecord:
    p = 1.0 if accepted else 0.0          # greedy prompt lookup: q = 1, alpha = p
    return DraftRecord(token_id=token, text=f"t{token}", q=1.0, p=p, alpha=p, u=None, accepted=accepted)


def _row(prompt: str, iterations: list[IterationRecord], baseline: list[int], seed: int) -> Trace:
    new = [t for it in iterations for t in it.emitted]
    drafted = sum(len(it.drafts) for it in iterations)
    accepted = sum(d.accepted for it in iterations for d in it.drafts)
    stats = Stats(new_tokens=len(new), iterations=len(iterations), drafted=drafted, accepted=accepted,
                  acceptance_rate=accepted / drafted if drafted else 0.0,
                  mean_tokens_per_iteration=len(new) / len(iterations), target_forwards=3, wall_ms=70.0,
                  tokens_per_s=len(new) / 0.07)
    return Trace(config={"k": 2, "temperature": 0.0, "max_new_tokens": 4, "seed": seed, "drafter": "ngram",
                         "target": "tiny <i>target</i>", "batch_size": 2}, prompt=prompt, prompt_ids=[1, 2, 3],
                 iterations=iterations, new_token_ids=new, text="".join(f"t{t}" for t in new), stats=stats,
                 baseline=BaselineResult(baseline, "", [15.0] * len(baseline), 51.0, len(baseline) / 0.051),
                 finish_reason="length" if len(new) == 4 else "eos")


def hand_built() -> Trace:
    """Two rows. Row 1: drafts 5, 6 accepted and bonus 7, then draft 8 rejected and 9 in its place (4 tokens in 2
    iterations). Row 2: nothing drafted, the target's own token 4, then it ends (1 token in 1 iteration); its
    baseline row differs (a planted disagreement)."""
    it = IterationRecord
    row1 = _row("Repeat: red green blue.", [
        it(0, 3, 2, [_draft(5, True), _draft(6, True)], None, BonusRecord(7, "t7", 1.0), [5, 6, 7], [0.1], 30.0, 2.0,
           t_start_ms=10.0, k_reason="fixed K"),
        it(1, 6, 2, [_draft(8, False)], ResampledRecord(9, "t9", 1.0), None, [9], [0.1], 20.0, 1.0, t_start_ms=42.1)],
        baseline=[5, 6, 7, 9], seed=0)
    row2 = _row(HOSTILE, [it(0, 3, 2, [], None, BonusRecord(4, "t4", 1.0), [4], [], 30.0, 2.0, t_start_ms=10.0)],
                baseline=[3], seed=1)
    row1.batch = BatchRecord(
        size=2, rows=[row2],
        forwards=[BatchForward(0, [0, 1], 2, 4, [0.1], 30.0, 2.0, 10.0, "fixed K"),
                  BatchForward(1, [0], 2, 2, [0.1], 20.0, 1.0, 42.1, "fixed K")],
        stats=BatchStats(new_tokens=5, iterations=2, row_iterations=3, drafted=3, accepted=2,
                         acceptance_rate=2 / 3, mean_acceptance_length=5 / 3, target_forwards=3, wall_ms=70.0,
                         tokens_per_s=5 / 0.07, prefill_ms=10.0, speedup=1.25),
        baseline=BatchBaseline(new_tokens=5, wall_ms=51.0, tokens_per_s=5 / 0.0875, target_forwards=5,
                               step_ms=[15.0, 12.0, 12.0, 12.0]))
    return Trace.from_dict(json.loads(json.dumps(row1.to_dict())))     # what a file holds: validated


def test_the_timeline_draws_each_forward_of_the_batch_where_it_happened():
    fig = rb.batch_timeline_figure(hand_built())
    by = {d.name: d for d in fig.data}
    assert list(by) == ["prefill (every row's prompt)", "draft step", "verify forward", "host time", "baseline step",
                        "rows in the batch", "K asked of each row"]
    assert list(by["draft step"].x) == [0.1, 0.1] and list(by["draft step"].base) == [10.0, 42.1]
    assert list(by["verify forward"].x) == [30.0, 20.0]
    assert list(by["verify forward"].base) == pytest.approx([10.1, 42.2])
    assert "rows 1, 2 (2 active), K = 2, 4 tokens fed" in by["verify forward"].hovertext[0]
    assert "rows 1 (1 active)" in by["verify forward"].hovertext[1]
    assert list(by["host time"].base) == pytest.approx([40.1, 62.2])
    assert list(by["baseline step"].base) == [0.0, 15.0, 27.0, 39.0]
    assert list(by["rows in the batch"].y) == [2, 1, 1] and list(by["K asked of each row"].y) == [2, 2]
    assert list(by["rows in the batch"].x) == pytest.approx([10.0, 42.1, 63.2])        # to the last one's end


def test_acceptance_is_drawn_per_row_and_pooled_under_both_names():
    fig = rb.batch_acceptance_figure(hand_built())
    rates, pooled_rate, lengths, pooled_length = fig.data
    assert list(rates.x) == ["row 1 (you)", "row 2"] and list(rates.y) == [pytest.approx(2 / 3), None]
    assert list(pooled_rate.y) == [pytest.approx(2 / 3)] and "nothing drafted" in rates.hovertext[1]
    assert list(lengths.y) == [2.0, 1.0] and list(pooled_length.y) == [pytest.approx(5 / 3)]
    assert [a.text for a in fig.layout.annotations] == ["per-draft acceptance rate", "mean acceptance length"]
    assert (fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text) == ("accepted ÷ drafted",
                                                                           "tokens ÷ target forwards")


def test_the_summary_gives_each_row_and_the_pool_and_says_which_row_differs():
    trace = hand_built()
    page = rb.batch_summary_html(trace)
    assert '<th scope="row">row 1 (you)</th><td>4</td><td>66.7% (2/3)</td><td>2.00</td><td>yes</td>' in page
    assert '<th scope="row">row 2</th><td>1</td><td>– (nothing drafted)</td><td>1.00</td><td>no</td>' in page
    assert '<th scope="row">pooled</th><td>5</td><td>66.7% (2/3)</td><td>1.67</td><td>no</td>' in page
    assert "pooled measured speedup over the batched baseline</strong>: ×1.25" in page
    assert "every row's text equals its baseline row</strong>: no (1 of 2 rows)" in page
    assert "tiny &lt;i&gt;target&lt;/i&gt;" in page and "<i>" not in page
    line = rb.batch_summary_line(trace)
    assert line.startswith("batch of 2: 5 new tokens in 2 batch iterations") and "\n" not in line
    for part in ("pooled per-draft acceptance rate 66.7% (2/3)", "pooled mean acceptance length 1.67",
                 "pooled measured speedup: ×1.25", "every row identical to its baseline row: no (1 of 2 rows)",
                 "row 2: per-draft acceptance rate – (nothing drafted), mean acceptance length 1.00"):
        assert part in line


def test_the_rows_stand_side_by_side_coloured_by_fate_with_their_requests_escaped():
    page = rb.rows_html(hand_built())
    assert page.count('<section class="sd-row') == 2 and 'tabindex="0"' in page    # each box scrolls by keyboard
    assert "row 1 · your request" in page and "row 2 · another user&#x27;s request" in page
    assert "<script>" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    row1 = page.split('<section class="sd-row sd-row-you"')[1].split("</section>")[0]
    assert row1.count("sd-tok sd-acc") == 2 and row1.count("sd-tok sd-bonus") == 1
    assert row1.count("sd-tok sd-rej") == 1 and row1.count("sd-tok sd-res") == 1
    assert "grid-template-columns: repeat(auto-fit, minmax(min(100%, 300px), 1fr))" in rb.CSS  # stacks on a phone
    import app
    assert app.PAGE_CSS.endswith(rb.CSS)          # the page's stylesheet, after the summary's rules it narrows


def test_a_single_run_has_no_batch_views():
    single = hand_built()
    single.batch = None
    assert rb.rows_html(single) == "" == rb.batch_summary_html(single) == rb.rows_html(None)
    for fig in (rb.batch_timeline_figure(single), rb.batch_acceptance_figure(single)):
        assert not fig.data and "batch size above 1" in fig.layout.annotations[0].text
    hidden = batch_updates(single)
    assert len(hidden) == N_BATCH_OUTPUTS and all(u.visible is False for u in hidden)
    assert all(isinstance(u, dict) for u in batch_updates(single, full=False))      # a light update leaves them


def test_the_views_read_a_real_batched_run(one_thread):
    """Three rows of a tiny target with prompt lookup, greedy, with the batched baseline: the figures hold what the
    engine recorded."""
    target = make_tiny_lm(vocab_size=16, seed=1)
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [4, 5, 4, 5, 4], [7, 8, 9]]
    cfg = SpecConfig(k=3, temperature=0.0, max_new_tokens=10)
    trace = batch_generate(target, NGramDrafter(), prompts, cfg, texts=["a", "b", "c"])
    attach_batch_baseline(trace, *batch_baseline(target, prompts, cfg))
    batch = trace.batch
    timeline = {d.name: d for d in rb.batch_timeline_figure(trace).data}
    assert list(timeline["verify forward"].x) == [f.verify_ms for f in batch.forwards]
    assert list(timeline["rows in the batch"].y)[:-1] == [len(f.rows) for f in batch.forwards]
    assert list(timeline["baseline step"].x) == batch.baseline.step_ms
    rates = rb.batch_acceptance_figure(trace).data[0]
    assert [r if r is not None else 0.0 for r in rates.y] == pytest.approx(
        [row.stats.acceptance_rate for row in trace.rows()])
    assert rb.rows_identical(trace) == (3, 3)                                   # greedy: every row its baseline's
    assert f"×{batch.stats.speedup:.2f}" in rb.batch_summary_html(trace)
    assert rb.rows_html(trace).count('<section class="sd-row') == 3
