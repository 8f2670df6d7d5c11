"""Where the time went: the timeline of the run's forwards (draft, verify, baseline lanes) and the race of the
speculative run against its baseline. Pure functions Trace -> go.Figure."""
from __future__ import annotations

from itertools import accumulate

import plotly.graph_objects as go

from specdec_core import Trace

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure
from components.render.measures import baseline_progress, measured_speedup, outcome, speculative_progress

LANE_DRAFT = "speculative · draft"
LANE_TARGET = "speculative · target"
LANE_BASELINE = "baseline · target"


# --- 1. timeline ------------------------------------------------------------------------------------

def timeline_figure(trace: Trace, verdicts: bool = True) -> go.Figure:
    """Every draft forward and every verify forward as a bar on the run's real time axis, and the
    baseline's one-token target forwards in a lane beneath (each run on its own clock, from 0), when the run has
    one. ``verdicts=False`` leaves out of the hover how many drafts each verify accepted (a lesson asks first)."""
    title = ("Timeline: draft and verify forwards vs. the baseline" if trace.baseline is not None
             else "Timeline: draft and verify forwards")
    if not trace.iterations:
        return empty_figure(title, "Run a prompt to see each forward pass on a time axis.")
    draft_x, draft_base, draft_hover = [], [], []
    ver_x, ver_base, ver_hover = [], [], []
    oth_x, oth_base, oth_hover = [], [], []
    for it in trace.iterations:
        o = outcome(it)
        t = it.t_start_ms
        if it.catchup_ms > 0:
            draft_x.append(it.catchup_ms)
            draft_base.append(t)
            draft_hover.append(f"iteration {it.index + 1} · the draft catches up on tokens it had not seen: "
                               f"{it.catchup_ms:.1f} ms")
            t += it.catchup_ms
        for j, ms in enumerate(it.draft_ms):
            draft_x.append(ms)
            draft_base.append(t)
            draft_hover.append(f"iteration {it.index + 1} · draft forward {j + 1}/{len(it.draft_ms)}: {ms:.1f} ms")
            t += ms
        ver_x.append(it.verify_ms)
        ver_base.append(t)
        ver_hover.append(f"iteration {it.index + 1} · verify {len(it.drafts)} drafts: {it.verify_ms:.1f} ms"
                         + (f"<br>accepted {o.accepted}/{o.drafted}, emitted {len(it.emitted)}" if verdicts else ""))
        t += it.verify_ms
        oth_x.append(it.other_ms)
        oth_base.append(t)
        oth_hover.append(f"iteration {it.index + 1} · sampling and bookkeeping: {it.other_ms:.1f} ms")
    fig = go.Figure()
    if trace.stats.prefill_ms > 0:
        fig.add_trace(go.Bar(name="prefill", y=[LANE_TARGET], x=[trace.stats.prefill_ms], base=[0.0], orientation="h",
                             marker_color=pal.PREFILL, hovertext=[f"prompt prefill: {trace.stats.prefill_ms:.1f} ms"],
                             hoverinfo="text"))
    fig.add_trace(hbar("draft forward", LANE_DRAFT, draft_x, draft_base, draft_hover, pal.DRAFT))
    fig.add_trace(hbar("verify forward", LANE_TARGET, ver_x, ver_base, ver_hover, pal.TARGET))
    fig.add_trace(hbar("other", LANE_TARGET, oth_x, oth_base, oth_hover, pal.OTHER))
    lanes = [LANE_DRAFT, LANE_TARGET]
    b = trace.baseline
    if b is not None and b.token_ms:
        starts = [0.0] + list(accumulate(b.token_ms))[:-1]
        hover = [f"baseline token {i + 1}: {ms:.1f} ms" + (" (includes the prefill)" if i == 0 else "")
                 for i, ms in enumerate(b.token_ms)]
        fig.add_trace(hbar("baseline forward", LANE_BASELINE, list(b.token_ms), starts, hover, pal.BASELINE))
        lanes.append(LANE_BASELINE)
    apply_layout(fig, title, barmode="overlay", bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=lanes, autorange="reversed", showgrid=False)
    fig.update_xaxes(title_text="ms since the run started (each run on its own clock)")
    return fig


def hbar(name: str, lane: str, widths: list[float], bases: list[float], hover: list[str], color: str) -> go.Bar:
    """One lane of a timeline: bars of ``widths`` starting at ``bases``, each with its hover text."""
    return go.Bar(name=name, y=[lane] * len(widths), x=widths, base=bases, orientation="h", marker_color=color,
                  marker_line={"color": "white", "width": 0.5}, hovertext=hover, hoverinfo="text")


# --- 2. race ----------------------------------------------------------------------------------------

def race_figure(trace: Trace) -> go.Figure:
    """Tokens generated against wall-clock time: speculative vs. the same run's baseline, speedup annotated."""
    title = "Race: tokens vs. wall-clock time"
    if not trace.iterations:
        return empty_figure(title, "Run a prompt to race speculative decoding against the baseline.")
    fig = go.Figure()
    xs, ys = speculative_progress(trace)
    fig.add_trace(go.Scatter(name=f"speculative ({trace.stats.tokens_per_s:.1f} tok/s)", x=xs, y=ys,
                             mode="lines+markers", line={"shape": "hv", "color": pal.ACCEPTED, "width": 3},
                             marker={"size": 5}, hovertemplate="%{x:.0f} ms: %{y} tokens<extra>speculative</extra>"))
    bx, by = baseline_progress(trace)
    if bx:
        fig.add_trace(go.Scatter(name=f"baseline ({trace.baseline.tokens_per_s:.1f} tok/s)", x=bx, y=by,
                                 mode="lines", line={"shape": "hv", "color": pal.BASELINE, "width": 3, "dash": "dash"},
                                 hovertemplate="%{x:.0f} ms: %{y} tokens<extra>baseline</extra>"))
    s = measured_speedup(trace)
    if s is not None:
        note = f"measured speedup ×{s:.2f}"
    elif trace.baseline is None:
        note = "no baseline in this run"
    else:
        note = "baseline running…"
    fig.add_annotation(text=note, x=0.02, y=0.98, xref="paper", yref="paper", xanchor="left", yanchor="top",
                       showarrow=False, font={"size": 18, "color": "#111"}, bgcolor="rgba(255,255,255,0.85)")
    apply_layout(fig, title)
    fig.update_xaxes(title_text="ms since the run started", rangemode="tozero")
    fig.update_yaxes(title_text="tokens generated", rangemode="tozero")
    return fig
