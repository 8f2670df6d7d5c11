"""“Where the time went”: a run's wall time split into prefill (with the draft model's catch-up forwards:
its deferred prompt prefill and what it ran over after K = 0 iterations), draft, verify and overhead, for the
speculative run and its same-run baseline, next to what the calibrated cost model predicts (and what a
flat, GPU-like verify would give; for greedy prompt lookup, what the best K schedule in hindsight would
take). A pure builder Trace -> go.Figure; the arithmetic is ``specdec_core.theory`` (``time_split``,
``baseline_split``, ``predicted_split``, ``costs_from_traces``) and ``specdec_core.policy.hindsight``.

Also the two pictures of what one forward costs: the baseline's one forward per token
(``baseline_forwards_figure``) and this device's measured cost of one forward over n = 1, 2, … tokens next to
n separate one-token forwards and a flat, GPU-like verify (``forward_cost_figure``).
"""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.policy.costmodel import TimeSplit, baseline_split, costs_from_traces, predicted_split, time_split
from specdec_core.policy.hindsight import hindsight_split

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure

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
        fig.add_annotation(x=sp.total, y=n, text=f" {sp.total / 1000:.2f} s · {sp.tokens_per_s:.1f} tok/s",
                           hovertext=f"{sp.total / 1000:.2f} s for {sp.tokens:.0f} tokens: {sp.tokens_per_s:.1f} tok/s",
                           showarrow=False, xanchor="left", font={"size": 12})
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
    apply_layout(fig, title, height=210 + 40 * len(rows),
            subtitle=(note + " · prefill = filling the caches (the draft's catch-ups included) · verify = target "
                      "forwards after the prefill (baseline: one per token)").lstrip(" ·"),
            barmode="stack")
    longest = max(sp.total for sp in rows.values())
    fig.update_xaxes(title_text="milliseconds", range=[0, longest * 1.5])
    return fig


def baseline_forwards_figure(token_ms: Sequence[float]) -> go.Figure:
    """The target-only baseline: one bar per generated token, its forward's milliseconds (the first one
    carries the prompt's prefill)."""
    title = "The baseline: one target forward per token"
    if not token_ms:
        return empty_figure(title, "Run to time the target generating alone, one forward per token.")
    n = list(range(1, len(token_ms) + 1))
    colors = [pal.PREFILL] + [pal.BASELINE] * (len(token_ms) - 1)
    fig = go.Figure(go.Bar(x=n, y=list(token_ms), marker_color=colors, showlegend=False,
                           hovertemplate="token %{x}: %{y:.1f} ms<extra></extra>"))
    later = list(token_ms[1:]) or list(token_ms)
    apply_layout(fig, title, subtitle=f"{len(token_ms)} tokens = {len(token_ms)} forwards · after the first (which "
                                 f"reads the prompt too): {sum(later) / len(later):.1f} ms each on average")
    fig.update_xaxes(title_text="generated token", dtick=1)
    fig.update_yaxes(title_text="ms for its forward", rangemode="tozero")
    return fig


def forward_cost_figure(verify_ms: Sequence[float]) -> go.Figure:
    """One forward over n new tokens (n = 1..len(verify_ms), measured), against n separate one-token forwards
    (what the baseline pays for n tokens) and a flat verify (a memory-bound GPU: n tokens cost one)."""
    title = "What one forward over n tokens costs on this device"
    if not verify_ms:
        return empty_figure(title, "Run to measure a forward over 1, 2, … tokens.")
    n = list(range(1, len(verify_ms) + 1))
    t1 = verify_ms[0]
    fig = go.Figure()
    fig.add_trace(go.Scatter(name="n one-token forwards (the baseline)", x=n, y=[k * t1 for k in n], mode="lines",
                             line={"color": pal.BASELINE, "dash": "dash", "width": 2},
                             hovertemplate="n=%{x}: %{y:.0f} ms<extra>n × t(1)</extra>"))
    fig.add_trace(go.Scatter(name="flat verify (GPU-like)", x=n, y=[t1] * len(n), mode="lines",
                             line={"color": pal.THEORY, "dash": "dot", "width": 2},
                             hovertemplate="n=%{x}: %{y:.0f} ms<extra>flat</extra>"))
    fig.add_trace(go.Scatter(name="ONE forward over n tokens (measured here)", x=n, y=list(verify_ms),
                             mode="lines+markers", line={"color": pal.TARGET, "width": 3}, marker={"size": 7},
                             hovertemplate="n=%{x}: %{y:.1f} ms<extra>measured</extra>"))
    apply_layout(fig, title, subtitle=f"t(1) = {t1:.1f} ms · t({len(n)}) = {verify_ms[-1]:.1f} ms = "
                                 f"{verify_ms[-1] / t1:.2f} × t(1)" if t1 > 0 else "")
    fig.update_xaxes(title_text="new tokens in the forward (n)", dtick=1)
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    return fig
