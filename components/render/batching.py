"""Figures of batched speculative decoding: pure builders, nothing measured here.

- ``batch_theory_figure``: the Theory tab's predicted speedup over (batch size B, K) from this machine's batch
  prices (``policy.batch_cost``) and an acceptance, the break-even line (speedup = 1), the best K per B (K = 0
  where drafting does not pay) and a batched run placed on it with its measured speedup;
- ``batch_work_figure`` and ``batch_speedup_figure``: the Learn chapter "A busy server" — what one target forward
  took at each batch size of a sweep, then the measured speedup by B with its 95 % interval and the ×1 line.

A sweep reaches these builders as ``SizeRow``s: plain numbers per batch size, the form a class's room keeps.
"""
from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.policy.batch_cost import BatchPrices, batch_speedup
from specdec_core.policy.costmodel import AcceptanceProfile
from specdec_core.stats.intervals import Interval, batch_speedup_interval
from specdec_core.teaching.batches import SizePoint

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure

HEIGHT = 400
PAYS, LOSES, UNSURE = "pays", "does not pay", "can't tell"
THEORY_TITLE = "Predicted speedup over batch size and K"


# --- a sweep over batch sizes ----------------------------------------------------------------------------

@dataclass(frozen=True)
class SizeRow:
    """One batch size of a sweep, as plain numbers: the pooled speedup over the batched baseline with its 95 %
    interval (``enough``: the sample is big enough for the interval to decide), the tokens each row kept per verify,
    the tokens one verify fed (all rows), and the mean speculative iteration and baseline step in ms."""
    size: int
    speedup: float
    low: float
    high: float
    enough: bool
    per_row: float
    fed: float
    iteration_ms: float
    step_ms: float

    @classmethod
    def of(cls, point: SizePoint) -> "SizeRow":
        iv = point.interval
        low, high, enough = (iv.low, iv.high, iv.enough) if iv is not None else (0.0, float("inf"), False)
        return cls(point.size, point.speedup, low, high, enough, point.tokens_per_row, point.fed_per_verify,
                   point.iteration_ms, point.baseline_step_ms)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def measured_interval(self) -> bool:
        return math.isfinite(self.high)

    def interval_text(self) -> str:
        return f"{self.low:.2f}–{self.high:.2f}" if self.measured_interval else "no interval"

    @property
    def verdict(self) -> str:
        """What the interval says: pays (all of it above ×1), does not pay (all below), else can't tell (also when
        the sample is too small to decide)."""
        if self.enough and self.low > 1.0:
            return PAYS
        if self.enough and self.high < 1.0:
            return LOSES
        return UNSURE


MARKS = {PAYS: ("circle", pal.ACCEPTED), LOSES: ("x", pal.REJECTED), UNSURE: ("diamond", "#666666")}


def batch_work_figure(rows: Sequence[SizeRow], k: int, title_note: str = "") -> go.Figure:
    """Tokens one target forward took at each batch size: the baseline's step (one per row) beside the speculative
    verify (each row's last token and its drafts, up to K + 1), as the sweep measured them. No timing: this is the
    work, not the answer."""
    title = "Tokens one target forward takes, by batch size"
    if not rows:
        return empty_figure(title, "Press Run: batches of every size are decoded and drawn here.")
    xs = [f"B = {r.size}" for r in rows]
    fig = go.Figure()
    fig.add_bar(name="baseline step (1 token per row)", x=xs, y=[r.size for r in rows], marker_color=pal.BASELINE,
                hovertemplate="%{x}: the baseline's step feeds %{y} tokens<extra></extra>")
    fig.add_bar(name=f"speculative verify (up to K + 1 = {k + 1} per row)", x=xs, y=[r.fed for r in rows],
                marker_color=pal.TARGET, marker_pattern_shape="/",
                hovertext=[f"B = {r.size}: one verify fed {r.fed:.1f} tokens on average (at most {r.size} × {k + 1}); "
                           f"each row kept {r.per_row:.2f} per verify" for r in rows], hoverinfo="text")
    apply_layout(fig, title, HEIGHT, html.escape(title_note, quote=False), barmode="group", bargap=0.25)
    fig.update_yaxes(title_text="tokens in one forward", rangemode="tozero")
    return fig


def batch_speedup_figure(rows: Sequence[SizeRow], k: int, band: tuple[int, int] | None = None,
                         title_note: str = "") -> go.Figure:
    """The measured speedup over the batched baseline at each batch size, with its 95 % interval, the ×1 line, and
    (``band``) the batch sizes where speculation stops paying according to the intervals. Markers by what the
    interval says (shape and colour): pays, does not pay, can't tell."""
    title = "Measured speedup by batch size"
    if not rows:
        return empty_figure(title, "Run the chapter, guess, then Reveal: the measured speedups are drawn here.")
    fig = go.Figure()
    if band is not None:
        fig.add_vrect(x0=band[0] - 0.45, x1=band[1] + 0.45, fillcolor=pal.REJECTED, opacity=0.12, line_width=0,
                      layer="below")
        fig.add_scatter(x=[None], y=[None], mode="markers", name="where it stops paying (as far as the run can tell)",
                        marker={"symbol": "square", "size": 14, "color": pal.REJECTED, "opacity": 0.25})
    fig.add_hline(y=1.0, line={"color": "#555", "dash": "dash", "width": 1.5})
    fig.add_scatter(x=[None], y=[None], mode="lines", name="×1: the batched baseline",
                    line={"color": "#555", "dash": "dash", "width": 1.5})
    for verdict, (symbol, colour) in MARKS.items():
        picked = [r for r in rows if r.verdict == verdict]
        if not picked:
            continue
        fig.add_scatter(
            name=verdict, x=[r.size for r in picked], y=[r.speedup for r in picked], mode="markers",
            marker={"symbol": symbol, "size": 14, "color": colour, "line": {"color": "#000", "width": 1}},
            error_y={"type": "data", "symmetric": False, "color": colour, "thickness": 2,
                     "array": [r.high - r.speedup if r.measured_interval else 0.0 for r in picked],
                     "arrayminus": [r.speedup - r.low if r.measured_interval else 0.0 for r in picked]},
            hovertext=[f"B = {r.size}: ×{r.speedup:.2f} (95 % interval {r.interval_text()}); one "
                       f"iteration {r.iteration_ms:.0f} ms, one baseline step {r.step_ms:.0f} ms; {r.per_row:.2f} "
                       "tokens per row per verify" for r in picked], hoverinfo="text")
    fig.add_scatter(x=[r.size for r in rows], y=[r.speedup for r in rows], mode="lines", showlegend=False,
                    line={"color": "#999", "width": 1}, hoverinfo="skip")
    apply_layout(fig, title, HEIGHT, html.escape(title_note or f"K = {k}, 95 % intervals", quote=False))
    fig.update_xaxes(title_text="batch size B (rows decoded together)", type="log",
                     tickvals=[r.size for r in rows], ticktext=[str(r.size) for r in rows])
    fig.update_yaxes(title_text="speedup over the baseline (×)", rangemode="tozero")
    return fig


# --- the Theory tab: (B, K) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchRunPoint:
    """A batched run on the (B, K) chart: its batch size, its K (the mean over its iterations: a cost-aware K
    moves), its measured speedup over the batched baseline with the interval (None without a baseline)."""
    size: int
    k: float
    speedup: float | None
    interval: Interval | None = None


def batch_run_point(trace: Trace | None) -> BatchRunPoint | None:
    """A batched run as a point (None for a run of one sequence, or a batch without iterations)."""
    if trace is None or trace.batch is None or not trace.batch.forwards:
        return None
    st = trace.batch.stats
    return BatchRunPoint(trace.batch.size, statistics.fmean(f.k for f in trace.batch.forwards),
                         st.speedup if st.speedup > 0 else None, batch_speedup_interval(trace))


def speedup_grid(prices: BatchPrices, profile: AcceptanceProfile, sizes: Sequence[int], ks: Sequence[int]
                 ) -> list[list[float]]:
    """Predicted speedup at every (K, B): rows by K, columns by B. K = 0 is plain decoding: ×1 by definition."""
    return [[1.0 if k == 0 else batch_speedup(prices, profile, b, k) for b in sizes] for k in ks]


def best_k_per_size(grid: Sequence[Sequence[float]], ks: Sequence[int]) -> list[int]:
    """For each column (batch size) of ``grid``, the K with the highest predicted speedup; 0 where no K ≥ 1 beats
    ×1 (drafting does not pay: a server turns speculation off there)."""
    out = []
    for j in range(len(grid[0]) if grid else 0):
        k, s = max(((k, grid[i][j]) for i, k in enumerate(ks) if k >= 1), key=lambda t: t[1], default=(0, 0.0))
        out.append(k if s > 1.0 else 0)
    return out


def batch_theory_figure(prices: BatchPrices | None, profile: AcceptanceProfile, sizes: Sequence[int],
                        point: BatchRunPoint | None = None, acceptance: str = "", waiting: str = "") -> go.Figure:
    """The predicted speedup of speculation at batch size B (x) and K (y, 0 … the prices' cap) over the batched
    baseline, priced by ``prices`` with ``profile``: the break-even line where it crosses ×1, the best K per B
    (K = 0 where drafting does not pay), and ``point`` (a batched run) with its measured speedup. ``acceptance``
    names the acceptance in the subtitle; without prices, ``waiting`` says why (e.g. still measuring)."""
    if prices is None:
        return empty_figure(THEORY_TITLE, waiting or "No batch prices for this machine yet.")
    ks = list(range(0, prices.widths[-1]))
    grid = speedup_grid(prices, profile, sizes, ks)
    top = max(2.0, max(max(row) for row in grid))
    one = 1.0 / top                      # where ×1 sits on the 0 … top colour axis: white
    fig = go.Figure(go.Heatmap(
        x=list(sizes), y=ks, z=grid, zmin=0.0, zmax=top, name="predicted speedup",
        colorscale=[[0.0, "#b2182b"], [one * 0.5, "#ef8a62"], [one, "#f7f7f7"], [one + (1 - one) * 0.35, "#92c5de"],
                    [1.0, "#2166ac"]],
        colorbar={"title": {"text": "×"}, "thickness": 12, "len": 0.8},
        hovertemplate="B = %{x}, K = %{y}: predicted ×%{z:.2f}<extra></extra>"))
    drafting = [row for k, row in zip(ks, grid) if k >= 1]      # K = 0 sits at ×1 exactly: no line there
    fig.add_trace(go.Contour(
        x=list(sizes), y=ks[1:], z=drafting, name="break-even: speedup = 1", showscale=False, showlegend=True,
        contours={"start": 1.0, "end": 1.0, "size": 1.0, "coloring": "none"}, hoverinfo="skip",
        line={"color": "#111", "width": 3, "dash": "dash"}))
    best = best_k_per_size(grid, ks)
    fig.add_scatter(name="best K at each B (0: drafting does not pay)", x=list(sizes), y=best, mode="lines+markers",
                    line={"color": "#111", "width": 1.5, "shape": "hvh"},
                    marker={"symbol": "star", "size": 12, "color": "#FFD700", "line": {"color": "#000", "width": 1}},
                    hovertext=[f"B = {b}: best K = {k}" + (f", ×{grid[ks.index(k)][j]:.2f}" if k else
                                                           ": no K beats ×1, speculation off")
                               for j, (b, k) in enumerate(zip(sizes, best))], hoverinfo="text")
    if point is not None:
        _place_run(fig, prices, profile, point, ks[-1])
    measured = ", ".join(str(s) for s in prices.sizes)
    sub = (f"priced with this machine's batch costs (measured at B = {measured}, interpolated between)"
           + (f"; acceptance: {acceptance}" if acceptance else ""))
    apply_layout(fig, THEORY_TITLE, HEIGHT + 40, html.escape(sub, quote=False))
    fig.update_xaxes(title_text="batch size B (rows decoded together)", range=[sizes[0] - 0.5, sizes[-1] + 0.5],
                     tickvals=[b for b in sizes if b in (1, 2, 4, 8, 12, 16) or b == sizes[-1]])
    fig.update_yaxes(title_text="K (drafts per row per iteration)", range=[-0.5, ks[-1] + 0.5], dtick=1 if
                     len(ks) <= 11 else 2)
    return fig


def run_prediction(prices: BatchPrices, profile: AcceptanceProfile, point: BatchRunPoint) -> tuple[int, float]:
    """(the whole K the run is priced at, its predicted speedup there): its mean K rounded, at least 1; ×1 for a
    run that never drafted."""
    k = max(1, round(point.k))
    return k, batch_speedup(prices, profile, point.size, k) if point.k > 0 else 1.0


def _place_run(fig: go.Figure, prices: BatchPrices, profile: AcceptanceProfile, point: BatchRunPoint,
               k_top: int) -> None:
    k = min(point.k, k_top)
    b = point.size
    k_priced, predicted = run_prediction(prices, profile, point)
    if point.speedup is None:
        text, said = "your run", "no baseline in that run"
    else:
        text, said = f"×{point.speedup:.2f}", f"measured ×{point.speedup:.2f}"
        if point.interval is not None:
            said += f" (95 % interval {point.interval.low:.2f}–{point.interval.high:.2f})"
    beyond = f" (K {point.k:g} is beyond the chart)" if point.k > k_top else ""
    fig.add_scatter(name="your latest batched run", x=[b], y=[k], mode="markers+text", text=[text],
                    textposition="top center", textfont={"size": 14, "color": "#000"},
                    marker={"symbol": "circle", "size": 16, "color": "#FFFFFF", "line": {"color": "#000", "width": 3}},
                    hovertext=[f"your latest batched run: B = {b}, K = {point.k:.2g}{beyond}; {said}; predicted "
                               f"×{predicted:.2f} at K = {k_priced}"], hoverinfo="text")


__all__ = ["SizeRow", "PAYS", "LOSES", "UNSURE", "batch_work_figure", "batch_speedup_figure", "BatchRunPoint",
           "batch_run_point", "run_prediction", "speedup_grid", "best_k_per_size", "batch_theory_figure", "THEORY_TITLE"]
