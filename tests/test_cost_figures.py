"""The cost-model figures compared by their data: where the time went, the calibrated curves in the
K sweep and the Theory tab."""
import json

import plotly.graph_objects as go
import pytest

from components.render import cost as CF
from components.render import lab as LF
from specdec_core.teaching.sweeps import KRun, KSweep
from specdec_core.trace import BaselineResult, DraftRecord, IterationRecord, Stats, Trace


def _d(alpha, accepted, tested=True):
    return DraftRecord(0, "", 1.0, alpha, alpha, None, accepted, tested)


def hand_trace():
    its = [IterationRecord(0, 5, 2, [_d(1.0, True), _d(1.0, True)], None, None, [0, 0, 1], [1.0], 30.0, 4.0),
           IterationRecord(1, 8, 2, [_d(1.0, True), _d(0.0, False)], None, None, [0, 1], [1.0], 30.0, 4.0)]
    st = Stats(new_tokens=5, iterations=2, drafted=4, accepted=3, wall_ms=170.0, prefill_ms=100.0,
               tokens_per_s=5 / 0.17)
    base = BaselineResult([1] * 5, "", [110.0, 15.0, 15.0, 15.0, 15.0], 170.0, 5 / 0.17)
    return Trace(config={"k": 2, "temperature": 0.0, "max_new_tokens": 5}, prompt="", prompt_ids=[1] * 5, iterations=its, new_token_ids=[0, 0, 1, 0, 1],
                 stats=st, baseline=base, calibration={"verify_ms": [10.0, 20.0, 30.0]})


def test_where_the_time_went_adds_the_hindsight_row_for_greedy_prompt_lookup():
    import torch
    from conftest import make_tiny_lm
    from specdec_core import NGramDrafter, SpecConfig, speculative_generate
    from specdec_core.decoding.baseline import baseline_generate
    torch.manual_seed(0)
    target = make_tiny_lm(vocab_size=32, seed=11, scale=6.0, layers=2)
    prompt, cfg = [3, 7, 1, 9, 3, 7, 1, 4, 3, 7, 1, 9], SpecConfig(k=3, max_new_tokens=16, k_policy="heuristic")
    tr = speculative_generate(target, NGramDrafter(), prompt, cfg)
    tr.baseline = baseline_generate(target, prompt, cfg)
    fig = CF.time_split_figure(tr)
    rows = list(_bar(fig, "verify").y)
    assert CF.ROW_HINDSIGHT in rows and "best K schedule ×" in fig.layout.title.text
    assert CF.ROW_HINDSIGHT not in list(_bar(CF.time_split_figure(hand_trace()), "verify").y)


def _bar(fig, part):
    return next(t for t in fig.data if t.name == part)


def test_where_the_time_went_splits_both_runs():
    fig = CF.time_split_figure(hand_trace())
    rows = list(_bar(fig, "prefill").y)
    assert rows == [CF.ROW_BASELINE, CF.ROW_MODEL, CF.ROW_MEASURED]
    measured = {p: _bar(fig, p).x[rows.index(CF.ROW_MEASURED)] for p, _ in CF.PARTS}
    assert measured == {"prefill": 100.0, "draft": 2.0, "verify": 60.0, "overhead": 8.0}
    base = {p: _bar(fig, p).x[rows.index(CF.ROW_BASELINE)] for p, _ in CF.PARTS}
    assert base == {"prefill": 95.0, "draft": 0.0, "verify": 50.0, "overhead": 25.0}
    model = {p: _bar(fig, p).x[rows.index(CF.ROW_MODEL)] for p, _ in CF.PARTS}
    assert model == pytest.approx(measured)             # the run matches its own model exactly
    flat = CF.time_split_figure(hand_trace(), flat=True)
    rows = list(_bar(flat, "verify").y)
    assert CF.ROW_FLAT in rows and _bar(flat, "verify").x[rows.index(CF.ROW_FLAT)] == pytest.approx(20.0)
    assert "flat verify ×" in flat.layout.title.text
    json.loads(flat.to_json())
    empty = CF.time_split_figure(Trace(config={"k": 2}, prompt="", prompt_ids=[1]))
    assert len(empty.data) == 0


def _sweep():
    runs = [KRun(k, tps, 0.5, 0.5, 1.5, k, 10, 1000.0, 7, 0, [0.1], True) for k, tps in ((1, 20.0), (2, 25.0))]
    return KSweep("ngram", runs, 18.0, 50.0, 0.5, 0.01, 2, [30.0, 35.0], [21.0, 24.0], [28.0, 33.0], [40.0, 50.0, 60.0])


def test_ksweep_draws_calibrated_and_naive_curves():
    fig = LF.ksweep_figure(_sweep())
    names = [t.name for t in fig.data]
    cal = next(t for t in fig.data if t.name == "calibrated prediction (measured verify curve)")
    assert list(cal.y) == [21.0, 24.0]
    assert any(n.startswith("naive closed form") for n in names)
    assert "within 5 % of measured at every K" in fig.layout.title.text
    assert next(t for t in fig.data if t.name == "calibrated, flat verify (GPU-like)").visible == "legendonly"
    flat = LF.ksweep_figure(_sweep(), flat=True)
    shown = next(t for t in flat.data if t.name == "calibrated, flat verify (GPU-like)")
    assert list(shown.y) == [28.0, 33.0] and shown.visible is True
    assert not any("hindsight" in (t.name or "") for t in fig.data)
    sw = _sweep()
    sw.hindsight_tokens_per_s, sw.hindsight_ks = 31.5, [0, 3, 3, 1]
    line = next(t for t in LF.ksweep_figure(sw).data if (t.name or "").startswith("best K schedule in hindsight"))
    assert list(line.y) == [31.5, 31.5] and "0 3 3 1" in line.hovertext
    from components.pages.teaching.ksweep import ksweep_md
    assert "31.5 tokens/s" in ksweep_md(sw) and "Knowing the output" not in ksweep_md(_sweep())


def test_theory_tab_draws_the_runs_calibrated_curve():
    pt = LF.MeasuredPoint(k=2, alpha=0.5, c=0.1, speedup=1.1, predicted=(0.9, 1.05, 1.2))
    fig = LF.speedup_vs_k_figure([0.5], 0.1, k_max=3, measured=pt)
    cal = next(t for t in fig.data if t.name == "calibrated prediction for your run")
    assert list(cal.x) == [1, 2, 3] and list(cal.y) == [0.9, 1.05, 1.2]
    assert isinstance(fig, go.Figure)


def test_cost_ui_handlers():
    from components.pages.teaching import cost as CU
    d = hand_trace().to_dict()
    pt = CU.cost_point(d, 6)
    assert pt is not None and len(pt.predicted) == 6 and pt.k == 2
    flat_pt = CU.cost_point(d, 6, CU.VERIFY_FLAT)
    assert flat_pt.predicted_label == "calibrated prediction, flat verify"
    assert flat_pt.predicted[1] > pt.predicted[1]       # verify at t1 = 10 ms instead of 30 ms
    fig, md = CU.update_cost_view(d, CU.VERIFY_FLAT)
    assert CF.ROW_FLAT in list(_bar(fig, "verify").y)
    assert "Why a CPU gains less" in md and "1: 10, 2: 20, 3: 30" in md and "95 % CI" in md
    assert "Measured speedup: can't tell yet — run more tokens: ×1.00 (95 % CI" in md   # a hand trace: few iterations
    assert CU.cost_point(None, 6) is None and CU.cost_point({"bad": 1}, 6) is None
    assert len(CU.time_figure(None).data) == 0 and "Run a prompt" in CU.cpu_note_md(None)
