"""“Where the time went”: a run's wall time split into prefill (with the draft model's catch-up forwards:
its deferred prompt prefill and what it ran over after K = 0 iterations), draft, verify and overhead, for the
speculative run and its same-run baseline, next to what the calibrated cost model predicts (and what a
flat, GPU-like verify would give; for greedy prompt lookup, what the best K schedule in hindsight would
take). A pure builder Trace -> go.Figure; the arithmetic is ``specdec_core.theory`` (``time_split``,
``baseline_split``, ``predicted_split``, ``costs_from_traces``) and ``specdec_core.policy.hindsight``.
"""
from __future__ import annotations

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.policy.hindsight import hindsight_split
from specdec_core.policy.costmodel import TimeSplit, baseline_split, costs_from_traces, predicted_split, time_split

from . import palette as pal
from .figures import _layout, empty_figure

PARTS = (("prefill", pal.PREFILL), ("draft", pal.DRAFT), ("verify", pal.TARGET), ("overhead", pal.OTHER))
ROW_MEASURED = "speculative (measured)"
ROW_MODEL = "speculative (calibrated model)"
ROW_FLAT = "speculative if verify were flat (GPU-like)"
ROW_HINDSIGHT = "best K schedule in hindsight (model)"
ROW_BASELINE = "baseline (measured)"


def time_rows(trace: Trace, flat: bool = False) -> dict[str, TimeSplit]:
    """The bars of the figure, in drawing order (top to bottom): measured and modeled speculative time, for a
    greedy prompt-lookup run the best K schedule in hindsight priced the same way (``hindsight``), the
    flat-verify counterfactual when ``flat``, and the baseline when the run has one."""
    calibration = (trace.calibration or {}).get("verify_ms")
    costs = costs_from_traces([trace], calibration)
    rows = {ROW_MEASURED: time_split(trace), ROW_MODEL: predicted_split(trace, costs)}
    best = hindsight_split(trace, costs)
    if best is not None:
        rows[ROW_HINDSIGHT] = best
    if flat:
        rows[ROW_FLAT] = predicted_split(trace, costs.flat())
    base = baseline_split(trace, costs.t1)
    if base is not None:
        rows[ROW_BASELINE] = base
    return rows


def time_split_figure(trace: Trace, flat: bool = False) -> go.Figure:
    """Stacked horizontal bars, one per row of ``time_rows``; each bar's tokens/s written at its end."""
    title = "Where the time went"
    if not trace.iterations:
        return empty_figure(title, "Run a prompt (with the baseline) to see where the time went.")
    rows = time_rows(trace, flat)
    names = list(rows)[::-1]                       # plotly draws the first category at the bottom
    fig = go.Figure()
    for part, color in PARTS:
        ms = [getattr(rows[n], part) for n in names]
        fig.add_trace(go.Bar(name=part, y=names, x=ms, orientation="h", marker_color=color,
                             hovertemplate=f"{part}: %{{x:.0f}} ms<extra>%{{y}}</extra>"))
    for n in names:
        sp = rows[n]
        fig.add_annotation(x=sp.total, y=n, text=f" {sp.total / 1000:.2f} s · {sp.tokens:.0f} tokens · "
                           f"{sp.tokens_per_s:.1f} tok/s", showarrow=False, xanchor="left", font={"size": 12})
    m, b = rows[ROW_MEASURED], rows.get(ROW_BASELINE)
    note = "" if b is None or m.total <= 0 else (
        f"measured speedup ×{m.tokens_per_s / b.tokens_per_s:.2f}" if b.tokens_per_s > 0 else "")
    model = rows[ROW_MODEL]
    if b is not None and b.tokens_per_s > 0:
        note += f" · model ×{model.tokens_per_s / b.tokens_per_s:.2f}"
        if flat:
            note += f" · flat verify ×{rows[ROW_FLAT].tokens_per_s / b.tokens_per_s:.2f}"
        if ROW_HINDSIGHT in rows:
            note += f" · best K schedule ×{rows[ROW_HINDSIGHT].tokens_per_s / b.tokens_per_s:.2f}"
    _layout(fig, title, height=210 + 40 * len(rows),
            subtitle=(note + " · prefill = filling the caches (the draft's catch-ups included) · verify = target "
                      "forwards after the prefill (baseline: one per token)").lstrip(" ·"),
            barmode="stack")
    fig.update_layout(margin={"l": 260, "r": 40, "t": 70, "b": 90})
    longest = max(sp.total for sp in rows.values())
    fig.update_xaxes(title_text="milliseconds", range=[0, longest * 1.45])
    return fig
