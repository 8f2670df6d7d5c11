"""Figure builders, token-stream HTML and summary, checked against hand-made traces (figure data, not pixels)."""
from __future__ import annotations

import copy
import json
from itertools import accumulate

import plotly.graph_objects as go
import pytest

from components.render import figures as F
from components.render.measures import (accepted_length_counts, identical_to_baseline, measured_speedup, outcome,
                                 position_counts, running_acceptance, speculative_progress)
from components.render.summary import summary_html, summary_rows
from components.render.tokens import tokens_html
from specdec_core import Trace
from specdec_core.policy.closed_form import expected_tokens, speedup


def _draft(tok, text, p, q, u, tested=True, p_raw=None, q_raw=None):
    alpha = min(1.0, p / q)
    return {"token_id": tok, "text": text, "q": q, "p": p, "alpha": alpha, "u": u if tested else None,
            "accepted": tested and u is not None and u < alpha, "tested": tested, "p_raw": p_raw, "q_raw": q_raw}


def _trace_dict() -> dict:
    """Three iterations (K=3): a rejection with a resample, a clean sweep with a bonus, and an iteration with
    no drafts (the n-gram found nothing); plus a same-run baseline."""
    it0 = {"index": 0, "start_len": 5, "k": 3,
           "drafts": [_draft(11, " the", 0.9, 0.8, 0.5), _draft(12, "<b>cat</b>", 0.6, 0.5, 0.2),
                      _draft(13, " sat", 0.1, 0.5, 0.7), _draft(14, " on", 0.3, 0.4, None, tested=False)],
           "resampled": {"token_id": 21, "text": " ran", "p": 0.5, "position": 2, "residual_prob": 0.625,
                         "residual_top": [[21, " ran", 0.625], [22, " sat\n", 0.375]],
                         "p_top": [[21, " ran", 0.5], [22, " sat\n", 0.3], [13, " sat", 0.1]],
                         "q_top": [[13, " sat", 0.5], [21, " ran", 0.0]]},
           "bonus": None, "emitted": [11, 12, 21], "draft_ms": [2.0, 2.5, 3.0, 3.5], "verify_ms": 10.0,
           "other_ms": 1.0, "t_start_ms": 20.0}
    it1 = {"index": 1, "start_len": 8, "k": 3,
           "drafts": [_draft(31, " a", 0.7, 0.7, 0.9), _draft(32, " mat", 0.8, 0.4, 0.99),
                      _draft(33, ".", 0.5, 0.6, 0.1)],
           "resampled": None, "bonus": {"token_id": 34, "text": "\n", "p": 0.4},
           "emitted": [31, 32, 33, 34], "draft_ms": [2.0, 2.0, 2.0], "verify_ms": 11.0, "other_ms": 1.5,
           "t_start_ms": 39.5}
    it2 = {"index": 2, "start_len": 12, "k": 3, "drafts": [], "resampled": None,
           "bonus": {"token_id": 41, "text": "End", "p": 1.0}, "emitted": [41], "draft_ms": [0.01],
           "verify_ms": 8.0, "other_ms": 0.5, "t_start_ms": 58.0}
    new = [11, 12, 21, 31, 32, 33, 34, 41]
    stats = {"new_tokens": 8, "iterations": 3, "drafted": 7, "accepted": 5, "acceptance_rate": 5 / 7,
             "mean_tokens_per_iteration": 8 / 3, "target_forwards": 4, "draft_forwards": 8, "wall_ms": 66.5,
             "tokens_per_s": 8 / 0.0665, "prefill_ms": 20.0}
    baseline = {"new_token_ids": list(new), "text": "x", "token_ms": [30.0, 12.0, 12.0, 12.0, 12.0, 12.0, 12.0, 12.0],
                "wall_ms": 114.0, "tokens_per_s": 8 / 0.114, "target_forwards": 9}
    return {"schema": "specdec-trace/1", "config": {"k": 3, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                                                    "max_new_tokens": 8, "seed": 0, "drafter": "model",
                                                    "target": "T<x>", "draft": "D", "adaptive_k": False,
                                                    "device": "cpu", "dtype": "float32"},
            "prompt": "p", "prompt_ids": [1, 2, 3, 4, 5], "iterations": [it0, it1, it2], "new_token_ids": new,
            "text": "the cat ran", "stats": stats, "baseline": baseline, "finish_reason": "length"}


@pytest.fixture
def trace() -> Trace:
    return Trace.from_dict(_trace_dict())


@pytest.fixture
def empty() -> Trace:
    d = _trace_dict()
    d.update(iterations=[], new_token_ids=[], baseline=None, finish_reason="")
    d["stats"].update(new_tokens=0, iterations=0)
    return Trace.from_dict(d)


def _by_name(fig: go.Figure, name: str):
    hits = [t for t in fig.data if t.name == name]
    assert len(hits) == 1, [t.name for t in fig.data]
    return hits[0]


def _annotations(fig: go.Figure) -> str:
    return " | ".join(a.text for a in fig.layout.annotations)


# --- measures -----------------------------------------------------------------------------------------

def test_measures_count_what_happened(trace):
    o = [outcome(it) for it in trace.iterations]
    assert [(x.accepted, x.rejected, x.discarded, x.resampled, x.bonus) for x in o] == [
        (2, 1, 1, 1, 0), (3, 0, 0, 0, 1), (0, 0, 0, 0, 1)]
    assert running_acceptance(trace) == pytest.approx([2 / 4, 5 / 7, 5 / 7])
    assert accepted_length_counts(trace) == [1, 0, 1, 1, 0]
    # position: (proposed, tested, accepted, mean alpha of tested)
    rows = position_counts(trace)
    assert [r[:3] for r in rows] == [(2, 2, 2), (2, 2, 2), (2, 2, 1), (1, 0, 0)]
    assert rows[2][3] == pytest.approx((0.2 + 0.5 / 0.6) / 2)
    times, toks = speculative_progress(trace)
    assert toks == [0, 3, 7, 8]
    assert times == pytest.approx([0, 20 + 11 + 10 + 1, 39.5 + 6 + 11 + 1.5, 58 + 0.01 + 8 + 0.5])
    assert measured_speedup(trace) == pytest.approx(114.0 / 66.5)
    assert identical_to_baseline(trace) is True


def test_identical_to_baseline_detects_a_difference(trace):
    trace.baseline.new_token_ids[3] = 99
    assert identical_to_baseline(trace) is False
    trace.baseline = None
    assert identical_to_baseline(trace) is None and measured_speedup(trace) is None


# --- the seven figures --------------------------------------------------------------------------------

def test_timeline_places_every_forward_on_the_time_axis(trace):
    fig = F.timeline_figure(trace)
    draft = _by_name(fig, "draft forward")
    assert list(draft.x) == [2.0, 2.5, 3.0, 3.5, 2.0, 2.0, 2.0, 0.01]
    assert list(draft.base) == pytest.approx([20, 22, 24.5, 27.5, 39.5, 41.5, 43.5, 58])
    verify = _by_name(fig, "verify forward")
    assert list(verify.x) == [10.0, 11.0, 8.0]
    assert list(verify.base) == pytest.approx([31.0, 45.5, 58.01])
    assert set(verify.y) == {F.LANE_TARGET} and set(draft.y) == {F.LANE_DRAFT}
    base = _by_name(fig, "baseline forward")
    assert list(base.x) == trace.baseline.token_ms
    assert list(base.base) == pytest.approx([0.0] + list(accumulate(trace.baseline.token_ms))[:-1])
    assert set(base.y) == {F.LANE_BASELINE}
    assert _by_name(fig, "prefill").x == (20.0,)
    assert fig.layout.barmode == "overlay"


def test_race_curves_and_speedup_annotation(trace):
    fig = F.race_figure(trace)
    spec, base = fig.data
    assert list(spec.y) == [0, 3, 7, 8]
    assert list(base.y) == list(range(9))
    assert list(base.x) == pytest.approx([0.0] + list(accumulate(trace.baseline.token_ms)))
    assert f"×{114.0 / 66.5:.2f}" in _annotations(fig)
    trace.baseline = None
    fig = F.race_figure(trace)
    assert len(fig.data) == 1 and "no baseline" in _annotations(fig)


def test_outcomes_stacks_and_running_rate(trace):
    fig = F.outcomes_figure(trace)
    assert list(_by_name(fig, "accepted").y) == [2, 3, 0]
    assert list(_by_name(fig, "rejected").y) == [2, 0, 0]      # the failed draft + the untested one after it
    assert list(_by_name(fig, "resampled").y) == [1, 0, 0]
    assert list(_by_name(fig, "bonus").y) == [0, 1, 1]
    assert list(_by_name(fig, "running acceptance rate").y) == pytest.approx([0.5, 5 / 7, 5 / 7])
    assert fig.layout.barmode == "stack"


def test_pq_shows_p_q_alpha_u_and_verdicts(trace):
    fig = F.pq_figure(trace, 0)
    assert list(_by_name(fig, "p (target)").y) == [0.9, 0.6, 0.1, 0.3]
    assert list(_by_name(fig, "q (draft)").y) == [0.8, 0.5, 0.5, 0.4]
    alpha = list(_by_name(fig, "α = min(1, p/q)").y)
    assert alpha[:3] == pytest.approx([1.0, 1.0, 0.2]) and alpha[3] is None
    assert list(_by_name(fig, "u ~ U[0, 1)").y) == [0.5, 0.2, 0.7, None]
    verdicts = [a.text for a in fig.layout.annotations]
    assert verdicts == ["✓ accepted", "✓ accepted", "✗ rejected", "– not tested"]
    labels = list(_by_name(fig, "p (target)").x)
    assert labels[1] == "2: &lt;b&gt;cat&lt;/b&gt;"           # model text is escaped for Plotly
    assert F.pq_figure(trace, None).layout.title.text.startswith("Iteration 3:")   # default: the last
    assert F.pq_figure(trace, 99).layout.title.text.startswith("Iteration 3:")     # clamped
    assert "proposed nothing" in _annotations(F.pq_figure(trace, 2))


def test_an_iteration_without_drafts_says_why():
    d = _trace_dict()
    assert "no n-gram match" in _annotations(F.pq_figure(Trace.from_dict(d), 2))
    d["config"]["confidence_stop"] = 0.3
    assert "below the confidence stop" in _annotations(F.pq_figure(Trace.from_dict(d), 2))
    d["iterations"][2]["draft_stop"] = "no features yet"        # recorded: said as it is
    assert "(no features yet)" in _annotations(F.pq_figure(Trace.from_dict(d), 2))
    d["iterations"][2]["k"] = 0
    assert "K was 0" in _annotations(F.pq_figure(Trace.from_dict(d), 2))


def test_pq_in_greedy_mode_shows_the_unwarped_softmax():
    d = _trace_dict()
    d["config"]["temperature"] = 0.0
    d["iterations"][1]["drafts"] = [
        {"token_id": 31, "text": " a", "q": 1.0, "p": 1.0, "alpha": 1.0, "u": None, "accepted": True,
         "p_raw": 0.42, "q_raw": 0.61},
        {"token_id": 32, "text": " mat", "q": 1.0, "p": 1.0, "alpha": 1.0, "u": None, "accepted": True,
         "p_raw": 0.7, "q_raw": None},
        {"token_id": 33, "text": ".", "q": 1.0, "p": 1.0, "alpha": 1.0, "u": None, "accepted": True}]
    fig = F.pq_figure(Trace.from_dict(d), 1)
    assert list(_by_name(fig, "p (target) softmax").y) == [0.42, 0.7, 1.0]
    assert list(_by_name(fig, "q (draft) softmax").y) == [0.61, 1.0, 1.0]
    assert "argmax" in fig.layout.title.text
    assert not [t for t in fig.data if t.name == "u ~ U[0, 1)"]


def test_residual_highlights_the_sampled_token(trace):
    fig = F.residual_figure(trace, 0)
    res = _by_name(fig, "norm(max(0, p − q))")
    labels = list(res.x)
    assert labels[:2] == ["␣ran", "␣sat↵"]                  # residual's own order first
    assert list(res.y)[:2] == [0.625, 0.375]
    widths = list(res.marker.line.width)
    assert widths[0] == 4 and all(w == 0 for w in widths[1:])
    assert list(_by_name(fig, "p (target)").y) == [0.5, 0.3, 0.1]
    assert list(_by_name(fig, "q (draft)").y) == [0.0, None, 0.5]   # None: not in q's recorded top list
    assert "sampled" in _annotations(fig) and "rejected draft" in _annotations(fig)
    assert "draft 3 rejected" in fig.layout.title.text


def test_residual_empty_state_when_nothing_was_rejected(trace):
    fig = F.residual_figure(trace, 1)
    assert len(fig.data) == 0 and "Nothing was rejected" in _annotations(fig)
    assert "Nothing was drafted" in _annotations(F.residual_figure(trace, 2))


def test_positions_rates_and_histogram(trace):
    fig = F.positions_figure(trace)
    rate = _by_name(fig, "accepted / tested (95 % CI)")
    assert list(rate.x) == [1, 2, 3, 4]
    assert list(rate.y) == [1.0, 1.0, 0.5, None]
    # Wilson error bars: position 3 is 1 of 2 -> 0.0945 .. 0.9055 (symmetric around 0.5)
    assert rate.error_y.array[2] == pytest.approx(0.4055, abs=1e-4) == rate.error_y.arrayminus[2]
    hist = _by_name(fig, "iterations")
    assert list(hist.x) == [0, 1, 2, 3, 4] and list(hist.y) == [1, 0, 1, 1, 0]


def test_theory_against_the_closed_form(trace):
    from specdec_core.policy.closed_form import estimate_alpha, estimate_c
    fig = F.theory_figure(trace)
    a, c = estimate_alpha(trace), estimate_c(trace)
    curve = _by_name(fig, "naive closed form")
    assert list(curve.x) == list(range(1, 17))
    assert list(curve.y) == pytest.approx([expected_tokens(a, k) for k in range(1, 17)])
    assert list(_by_name(fig, "naive closed form E / (cK + 1)").y) == pytest.approx([speedup(a, k, c) for k in range(1, 17)])
    from specdec_core.policy.costmodel import predicted_speedup_curve
    calibrated = _by_name(fig, "calibrated (this device's verify curve)")
    assert list(calibrated.y) == pytest.approx(predicted_speedup_curve(trace, 16))
    flat = _by_name(F.theory_figure(trace, flat=True), "calibrated, flat verify (GPU-like)")
    assert all(f >= m - 1e-9 for f, m in zip(flat.y, calibrated.y))     # a flat verify never costs more here
    assert list(_by_name(fig, "measured").y) == pytest.approx([8 / 3])
    point = _by_name(fig, "measured speedup")
    assert list(point.y) == pytest.approx([114.0 / 66.5])
    assert point.error_y.array[0] >= 0 and "95 % CI" in point.hovertext[0]
    assert f"{a:.3f}" in fig.layout.title.text


def test_every_builder_has_an_empty_state(empty):
    for fig in F.all_figures(empty):
        assert isinstance(fig, go.Figure)
        assert len(fig.data) == 0 and len(fig.layout.annotations) == 1
        json.loads(fig.to_json())


def test_all_figures_serialize(trace):
    figs = F.all_figures(trace, 0)
    assert len(figs) == len(F.FIGURE_IDS) == 7
    for fig in figs:
        json.loads(fig.to_json())


def test_figures_do_not_mutate_the_trace(trace):
    before = copy.deepcopy(trace.to_dict())
    F.all_figures(trace, 1)
    tokens_html(trace, 1)
    summary_html(trace)
    assert trace.to_dict() == before


# --- token stream ---------------------------------------------------------------------------------------

def test_tokens_html_marks_every_fate_and_escapes(trace):
    h = tokens_html(trace, selected=0)
    stream = h.split('<div class="sd-stream">', 1)[1]
    assert stream.count('class="sd-tok sd-acc"') == 5
    assert stream.count('class="sd-tok sd-rej"') == 1
    assert stream.count('class="sd-tok sd-skip"') == 1
    assert stream.count('class="sd-tok sd-res"') == 1
    assert stream.count('class="sd-tok sd-bonus"') == 2
    assert stream.count('class="sd-it') == 3
    assert stream.count('class="sd-it sd-sel"') == 1 and 'class="sd-it sd-sel" data-it="0"' in stream
    assert "<b>cat</b>" not in h and "&lt;b&gt;cat&lt;/b&gt;" in h
    assert "↵" in stream                                       # the bonus newline is visible
    # the hover details carry p, q, alpha and u
    assert 'title="draft 3/4 · rejected · token id 13\np = 0.1000   q = 0.5000   α = 0.2000   u = 0.7000"' in h
    # the rejected draft sits where it was proposed: before the resampled token
    assert stream.index("sd-rej") < stream.index("sd-res")


def test_tokens_html_escapes_attributes_and_handles_empty():
    d = _trace_dict()
    d["iterations"][0]["drafts"][0]["text"] = '"><script>alert(1)</script>'
    h = tokens_html(Trace.from_dict(d))
    assert "<script>" not in h and "&lt;script&gt;" in h
    assert "Press Run" in tokens_html(None)
    assert "&lt;i&gt;" in tokens_html(None, message="<i>hi</i>")


# --- summary ----------------------------------------------------------------------------------------------

def test_summary_reports_measured_numbers_with_device_and_dtype(trace):
    rows = {r[0]: r for r in summary_rows(trace)}
    assert rows["target forwards"][1:] == ("4", "9")
    assert rows["new tokens"][1].startswith("8 ")
    assert rows["measured speedup"][1].startswith(f"can't tell yet — run more tokens: ×{114.0 / 66.5:.2f} (95 % CI ")
    assert "bootstrap over iterations" in rows["measured speedup"][1]   # 8 tokens: too few to decide
    assert "95 % CI" in rows["acceptance rate"][1]
    assert rows["identical to baseline"][1].startswith("yes")
    h = summary_html(trace)
    assert "measured on cpu in float32" in h
    assert "T&lt;x&gt;" in h and "T<x>" not in h


def test_summary_flags_reduced_precision_and_missing_baseline(trace):
    trace.config["dtype"] = "bfloat16"
    trace.baseline = None
    h = summary_html(trace)
    assert "bfloat16" in h and "last bits" in h and "Tick" in h
    assert "after a run" in summary_html(None)


@pytest.mark.slow
def test_a_coupled_trace_says_which_rule_ran_and_shows_the_mismatch(bundled):
    """Under the coupled rule the figures name the rule, and at a mismatch show the draft's token, the target's
    sample and their p and q (no residual is drawn)."""
    from components.render.anatomy import anatomy_figure
    from components.render.figures import pq_figure, residual_figure
    from components.render.summary import summary_html
    from specdec_core import NGramDrafter, SpecConfig, baseline_generate, encode_prompt, speculative_generate
    model, tok = bundled
    ids = encode_prompt(tok, "Repeat exactly: red green blue, red green blue, red green blue.")
    cfg = SpecConfig(k=4, temperature=1.0, max_new_tokens=16, seed=1, sampler="coupled")
    trace = speculative_generate(model, NGramDrafter(), ids, cfg, tok)
    trace.baseline = baseline_generate(model, ids, cfg, tok)
    i = next(k for k, it in enumerate(trace.iterations) if it.resampled is not None and it.drafts)
    it = trace.iterations[i]
    anatomy = anatomy_figure(trace, i)
    assert "③ accept iff it is the target's sample" in anatomy.layout.yaxis.ticktext
    assert "coupled rule" in anatomy.layout.title.text
    cells = " ".join(t for d in anatomy.data for t in d.text)
    assert "the target's own" in cells and "norm(max(0" not in cells
    res = residual_figure(trace, i)
    assert "coupled rule" in res.layout.title.text
    notes = [a.text for a in res.layout.annotations]
    assert "the target's sample: written" in notes and res.data[0].name == "p (target)"
    if it.drafts[it.resampled.position].token_id != it.resampled.token_id:
        assert "the draft's token: rejected" in notes
    assert "coupled rule" in pq_figure(trace, i).layout.title.text
    assert "coupled sampler" in summary_html(trace)
