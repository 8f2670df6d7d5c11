"""Figures of the teaching tabs: pure functions from the lab's and sweeps' results to ``go.Figure``.

Nothing is measured or sampled here; the closed forms of ``specdec_core.theory`` are evaluated for
the theory curves (plain arithmetic). Token text goes through ``base.plot_text`` (escaped, with
visible spaces), and empty inputs give a figure that says what to do (``base.empty_figure``).
"""
from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import Trace
from specdec_core.stats.intervals import t975, wilson
from specdec_core.policy.closed_form import approximate_speedup, break_even_alpha, optimal_k, speedup
from specdec_core.teaching.lab import LabResult
from specdec_core.teaching.sweeps import AgreementPoint, KSweep, Selection
from specdec_core.teaching.toy import StepView

from components.render import palette as pal
from components.render.base import empty_figure, house_layout, plot_text

HEIGHT = 380
VERDICT_COLOR = {"biased": pal.REJECTED, "exact": pal.ACCEPTED, "inconclusive": "#8a6d00"}


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured run placed on the theory figures."""
    k: int
    alpha: float
    c: float
    speedup: float | None        # measured tokens/s over the same run's baseline; None without a baseline
    label: str = "your latest run"
    predicted: tuple[float, ...] = ()   # calibrated predicted speedup at K = 1, 2, ... (theory.predicted_speedup_curve)
    predicted_label: str = "calibrated prediction for your run"


LEGEND_ROOM = {"below": 48, "right": 0}   # height added for a legend below the plot (its rows come out of it)


def _style(fig: go.Figure, title: str, height: int = HEIGHT, legend: str = "below", **kw) -> go.Figure:
    """The house layout (``base.house_layout``) with the legend below the plot (anchored to the figure's bottom,
    never on an axis title) or to its right (many entries)."""
    return house_layout(fig, title, height + LEGEND_ROOM[legend], legend=legend, **kw)


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


# --- exactness lab ---------------------------------------------------------------------------------

def outcome_label(texts: Sequence[str]) -> str:
    """Token texts of one outcome as one x-axis label ('a · b'); the pooled bin when empty."""
    return " · ".join(plot_text(t, 16) for t in texts) if texts else "everything else"


def exactness_figure(result: LabResult | None) -> go.Figure:
    """Exact target probability of each outcome (bars, with the band where an exact sampler's
    frequency falls 95% of the time at this N) next to the empirical frequency of N runs."""
    title = "Empirical frequencies vs. exact target probabilities"
    if result is None:
        return empty_figure(title, "Press Run: the sampler runs N times and its frequencies are drawn here "
                                   "against the exact target distribution.", HEIGHT + 40)
    cmp_ = result.comparison
    n = cmp_.n
    labels = _unique_labels([outcome_label(b.texts) for b in cmp_.bins])
    exact = [b.exact for b in cmp_.bins]
    freq = [b.freq(n) for b in cmp_.bins]
    band = [1.96 * math.sqrt(max(p * (1 - p), 0.0) / n) for p in exact]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        name="exact p (computed)", x=labels, y=exact, marker_color=pal.TARGET,
        error_y={"type": "data", "array": band, "visible": True, "color": "#333", "thickness": 1.2, "width": 4},
        hovertext=[f"{lab}<br>exact probability {p:.4f}<br>an exact sampler lands within ±{b:.4f} (95%)"
                   for lab, p, b in zip(labels, exact, band)], hoverinfo="text"))
    fig.add_trace(go.Bar(
        name=f"empirical ({n:,} runs)", x=labels, y=freq, marker_color=pal.DRAFT,
        hovertext=[f"{lab}<br>{b.observed:,} of {n:,} runs = {f:.4f}<br>exact {b.exact:.4f}"
                   for lab, b, f in zip(labels, cmp_.bins, freq)], hoverinfo="text"))
    color = VERDICT_COLOR.get(cmp_.verdict, "#333")
    head = {"biased": "BIASED", "exact": "no bias detected", "inconclusive": "inconclusive"}[cmp_.verdict]
    pv = "–" if cmp_.p_value is None else f"{cmp_.p_value:.2g}"
    bugs = ", ".join(result.bugs) if result.bugs else "none (correct engine)"
    subtitle = (f"TV = {cmp_.tv:.3f} (noise ≈ {cmp_.tv_noise:.3f}) · chi-square p = {pv} · "
                f"injected bugs: {_esc(bugs)}")
    _style(fig, f"{title}: <span style='color:{color}'><b>{head}</b></span><br><sup>{subtitle}</sup>",
           HEIGHT + 40, barmode="group", bargap=0.2)
    what = "next token" if result.settings.n_tokens == 1 else "next two tokens (first · second)"
    fig.update_xaxes(title_text=f"outcome: the {what}", tickangle=-35 if len(labels) > 8 else 0)
    fig.update_yaxes(title_text="probability / frequency", rangemode="tozero")
    return fig


def _unique_labels(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return out


# --- simulator -------------------------------------------------------------------------------------

def toy_step_figure(view: StepView | None) -> go.Figure:
    """All ten probabilities at one draft position: p (target) and q (draft), the overlap
    sum min(p, q) (= the acceptance probability), the drafted word and what was emitted."""
    title = "All ten words: p (target) vs q (draft)"
    if view is None:
        return empty_figure(title, "Run the simulator, then pick an iteration and a draft position.")
    words = [plot_text(w) for w in view.words]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="p (target)", x=words, y=view.p, marker_color=pal.TARGET,
                         hovertemplate="%{x}: p = %{y:.4f}<extra></extra>"))
    fig.add_trace(go.Bar(name="q (draft)", x=words, y=view.q, marker_color=pal.DRAFT,
                         hovertemplate="%{x}: q = %{y:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(name="min(p, q)", x=words, y=[min(a, b) for a, b in zip(view.p, view.q)],
                             mode="markers", marker={"symbol": "line-ew", "size": 26,
                                                     "line": {"color": "#111", "width": 3}},
                             hovertemplate="%{x}: min(p, q) = %{y:.4f}<extra></extra>"))
    if view.residual is not None:
        fig.add_trace(go.Bar(name="norm(max(0, p − q))", x=words, y=view.residual, marker_color=pal.RESIDUAL,
                             hovertemplate="%{x}: residual = %{y:.4f}<extra></extra>"))
    top = max(max(view.p), max(view.q), max(view.residual or [0.0]))
    if view.drafted is not None:
        fig.add_annotation(x=words[view.drafted], y=max(view.p[view.drafted], view.q[view.drafted]), yshift=8,
                           text=f"drafted → {view.verdict}", showarrow=True, arrowhead=2, ay=-34,
                           font={"size": 13, "color": pal.ACCEPTED if view.verdict == "accepted" else pal.REJECTED})
    if view.emitted is not None and view.emitted != view.drafted:
        fig.add_annotation(x=words[view.emitted], y=max(view.p[view.emitted], view.q[view.emitted]), yshift=8,
                           text=view.emitted_how, showarrow=True, arrowhead=2, ay=-56,
                           font={"size": 13, "color": pal.RESAMPLED if view.residual is not None else pal.BONUS})
    where = f"after “{_esc(view.context)}” (iteration {view.iteration + 1}, position {view.position + 1})"
    alpha = f"sum min(p, q) = {view.overlap:.3f} = P(accept a draft here)"
    extra = "" if view.alpha is None else f" · this draft: α = min(1, p/q) = {view.alpha:.3f}" + (
        "" if view.u is None else f", u = {view.u:.3f}")
    _style(fig, f"{title} {where}<br><sup>{alpha}{extra}</sup>", barmode="group", bargap=0.2)
    fig.update_yaxes(title_text="probability", range=[0, min(1.0, top * 1.3 + 0.05)])
    return fig


def agreement_figure(points: Sequence[AgreementPoint]) -> go.Figure:
    """Measured acceptance (accepted / tested, with a 95% binomial interval) against the agreement
    slider, and the exact alpha = sum min(p, q) averaged over the same drafts' contexts."""
    title = "Acceptance vs. agreement (toy models, measured through the engine)"
    if not points:
        return empty_figure(title, "Press “Sweep” to measure acceptance at several agreement levels.")
    xs = [pt.agreement for pt in points]
    err = [1.96 * math.sqrt(pt.measured_alpha * (1 - pt.measured_alpha) / pt.tested) if pt.tested else 0.0
           for pt in points]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(name="exact α = mean Σ min(p, q)", x=xs, y=[pt.exact_alpha for pt in points],
                             mode="lines", line={"color": pal.THEORY, "width": 2}), secondary_y=False)
    fig.add_trace(go.Scatter(
        name="measured accepted / tested", x=xs, y=[pt.measured_alpha for pt in points], mode="markers",
        marker={"size": 11, "color": pal.ACCEPTED, "line": {"color": "#000", "width": 1}},
        error_y={"type": "data", "array": err, "visible": True, "color": pal.ACCEPTED},
        hovertext=[f"agreement {pt.agreement:.2f}: {pt.accepted} of {pt.tested} tested drafts accepted "
                   f"({pt.measured_alpha:.3f}); exact α {pt.exact_alpha:.3f}" for pt in points],
        hoverinfo="text"), secondary_y=False)
    fig.add_trace(go.Scatter(name="tokens per iteration", x=xs, y=[pt.tokens_per_iteration for pt in points],
                             mode="lines+markers", line={"color": pal.TARGET, "dash": "dot"},
                             hovertemplate="agreement %{x:.2f}: %{y:.2f} tokens/iteration<extra></extra>"),
                  secondary_y=True)
    _style(fig, title, legend="below")
    fig.update_xaxes(title_text="agreement (0 = unrelated draft, 1 = q equals p)", range=[-0.03, 1.03])
    fig.update_yaxes(title_text="acceptance per tested draft", range=[0, 1.05], secondary_y=False)
    fig.update_yaxes(title_text="tokens per iteration", rangemode="tozero", showgrid=False, secondary_y=True)
    return fig


def acceptance_by_temperature_figure(rows: Sequence[tuple[float, Sequence[float]]]) -> go.Figure:
    """Acceptance at several temperatures as the mean α = min(1, p/q) of the tested drafts (each draft's chance
    of being accepted), with its 95 % t interval; ``rows``: (temperature, the tested drafts' α)."""
    title = "Acceptance vs. temperature (the same pair and prompts)"
    if not rows:
        return empty_figure(title, "Run the pair at a few temperatures to compare their acceptance.")
    xs = [f"T = {t:g}" for t, _ in rows]
    means = [sum(a) / len(a) if a else 0.0 for _, a in rows]
    err = [t975(len(a) - 1) * statistics.stdev(a) / math.sqrt(len(a)) if len(a) > 1 else 0.0 for _, a in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="mean α of the tested drafts (95 % interval)", x=xs, y=means, marker_color=pal.ACCEPTED,
                         error_y={"type": "data", "array": err, "visible": True, "color": "#333"},
                         hovertext=[f"{x}: mean α {m:.3f} ± {e:.3f} over {len(a)} tested drafts"
                                    for x, m, e, (_, a) in zip(xs, means, err, rows)], hoverinfo="text"))
    _style(fig, title, legend="below")
    fig.update_yaxes(title_text="acceptance", range=[0, 1.05], tickformat=".0%")
    return fig


def acceptance_by_rule_figure(rows: Sequence[tuple[str, Trace, Trace]]) -> go.Figure:
    """Each draft's acceptance (accepted ÷ tested drafts, with its Wilson 95 % interval) under the standard and the
    coupled rule; ``rows``: (draft, its standard run, its coupled run)."""
    title = "Acceptance under each rule (same prompt and seed)"
    if not rows:
        return empty_figure(title, "Run a draft under both rules to compare their acceptance.")
    fig = go.Figure()
    for rule, col, color in (("standard rule", 1, pal.DRAFT), ("coupled rule", 2, pal.TARGET)):
        ys, lo, hi, hover = [], [], [], []
        for name, *runs in rows:
            drafts = [d for it in runs[col - 1].iterations for d in it.drafts if d.tested]
            a, n = sum(d.accepted for d in drafts), len(drafts)
            low, high = wilson(a, n)
            y = a / n if n else 0.0
            ys.append(y)
            lo.append(y - low if n else 0.0)
            hi.append(high - y if n else 0.0)
            hover.append(f"{name}, {rule}: {a} of {n} tested drafts accepted")
        fig.add_trace(go.Bar(name=rule, x=[plot_text(r[0]) for r in rows], y=ys, marker_color=color,
                             error_y={"type": "data", "array": hi, "arrayminus": lo, "visible": True, "color": "#333"},
                             hovertext=hover, hoverinfo="text"))
    _style(fig, title, legend="below")
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="accepted ÷ tested drafts", range=[0, 1.05], tickformat=".0%")
    return fig


# --- theory explorer -------------------------------------------------------------------------------

def speedup_heatmap(k: int, measured: MeasuredPoint | None = None, n_alpha: int = 51, n_c: int = 51,
                    c_max: float = 1.0) -> go.Figure:
    """Expected speedup E / (cK + 1) over (alpha, c) for one K, with the break-even curve (speedup 1)
    and a measured run placed on it."""
    alphas = [i / (n_alpha - 1) for i in range(n_alpha)]
    cs = [c_max * j / (n_c - 1) for j in range(n_c)]
    z = [[speedup(a, k, c) for a in alphas] for c in cs]
    top = float(k + 1)                   # the largest possible speedup (alpha = 1, c = 0)
    one = 1.0 / top                      # where speedup = 1 sits on the 0..K+1 colour axis
    scale = [[0.0, "#b2182b"], [one * 0.5, "#ef8a62"], [one, "#f7f7f7"], [one + (1 - one) * 0.35, "#92c5de"],
             [1.0, "#2166ac"]]
    fig = go.Figure(go.Heatmap(
        x=alphas, y=cs, z=z, zmin=0.0, zmax=top, colorscale=scale,
        colorbar={"title": {"text": "speedup"}, "tickvals": [0, 1] + list(range(2, k + 2, max(1, (k + 1) // 4)))},
        hovertemplate="α = %{x:.2f}, c = %{y:.2f}: ×%{z:.2f}<extra></extra>"))
    be = [break_even_alpha(k, c) for c in cs]
    keep = [(a, c) for a, c in zip(be, cs) if a < 1.0]
    fig.add_trace(go.Scatter(name="break-even (speedup = 1)", x=[a for a, _ in keep], y=[c for _, c in keep],
                             mode="lines", line={"color": "#111", "width": 2, "dash": "dash"},
                             hovertemplate="break-even: α = %{x:.3f} at c = %{y:.2f}<extra></extra>"))
    if measured is not None:
        s = "" if measured.speedup is None else f", measured ×{measured.speedup:.2f}"
        fig.add_trace(go.Scatter(
            name=f"{measured.label} (K = {measured.k})", x=[measured.alpha], y=[min(measured.c, c_max)],
            mode="markers+text", text=[measured.label], textposition="top center",
            marker={"symbol": "star", "size": 18, "color": "#FFD700", "line": {"color": "#000", "width": 1.5}},
            hovertext=[f"α̂ = {measured.alpha:.3f}, ĉ = {measured.c:.3f}: closed form "
                       f"×{speedup(measured.alpha, k, measured.c):.2f} at K = {k}{s}"], hoverinfo="text"))
    _style(fig, f"Expected speedup over (α, c) at K = {k}<br><sup>E / (cK + 1) with E = (1 − α^(K+1)) / (1 − α); "
                f"blue pays off, red is slower than the baseline</sup>", HEIGHT + 40, legend="below")
    fig.update_xaxes(title_text="α (acceptance probability per draft)", range=[0, 1])
    fig.update_yaxes(title_text="c (draft forward / target forward)", range=[0, c_max])
    return fig


def speedup_vs_k_figure(alphas: Sequence[float], c: float, k_max: int = 16,
                        measured: MeasuredPoint | None = None) -> go.Figure:
    """Expected speedup against K for several alpha at one c, each curve's optimum marked; the
    break-even line at 1; a measured run as a point with its own closed-form curve."""
    ks = list(range(1, k_max + 1))
    fig = go.Figure()
    colors = ["#0072B2", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#D55E00", "#000000"]
    for i, a in enumerate(alphas):
        col = colors[i % len(colors)]
        ys = [speedup(a, k, c) for k in ks]
        kb = optimal_k(a, c, k_max)
        fig.add_trace(go.Scatter(name=f"α = {a:g}", x=ks, y=ys, mode="lines", line={"color": col, "width": 2},
                                 legendgroup=f"a{i}", hovertemplate=f"α = {a:g}, K = %{{x}}: ×%{{y:.2f}}<extra></extra>"))
        fig.add_trace(go.Scatter(name=f"best K for α = {a:g}", x=[kb], y=[speedup(a, kb, c)], mode="markers",
                                 marker={"symbol": "star", "size": 14, "color": col, "line": {"color": "#000", "width": 1}},
                                 legendgroup=f"a{i}", showlegend=False,
                                 hovertemplate=f"α = {a:g}: best K = {kb}, ×%{{y:.2f}}<extra></extra>"))
    fig.add_hline(y=1.0, line={"color": "#555", "dash": "dash", "width": 1.5},
                  annotation_text="break-even (baseline speed)", annotation_position="bottom right")
    if measured is not None:
        fig.add_trace(go.Scatter(name=f"naive closed form at α̂ = {measured.alpha:.2f}, ĉ = {measured.c:.2f}", x=ks,
                                 y=[speedup(measured.alpha, k, measured.c) for k in ks], mode="lines",
                                 line={"color": "#111", "width": 2, "dash": "dot"}))
        if measured.predicted:
            kp = list(range(1, min(k_max, len(measured.predicted)) + 1))
            fig.add_trace(go.Scatter(name=measured.predicted_label, x=kp, y=list(measured.predicted[:len(kp)]),
                                     mode="lines+markers", line={"color": pal.REJECTED, "width": 2.5},
                                     marker={"size": 5},
                                     hovertemplate="K = %{x}: calibrated ×%{y:.2f}<extra></extra>"))
        if measured.speedup is not None:
            fig.add_trace(go.Scatter(name=f"{measured.label} (measured)", x=[measured.k], y=[measured.speedup],
                                     mode="markers", marker={"symbol": "circle", "size": 15, "color": "#FFD700",
                                                             "line": {"color": "#000", "width": 1.5}},
                                     hovertemplate="measured: K = %{x}, ×%{y:.2f}<extra></extra>"))
    _style(fig, f"Expected speedup vs K at c = {c:g}<br><sup>stars: the best K for each α</sup>", HEIGHT + 40,
           legend="right")
    fig.update_xaxes(title_text="K (drafts per iteration)", dtick=1 if k_max <= 16 else None)
    fig.update_yaxes(title_text="speedup over the baseline", rangemode="tozero")
    return fig


def formula_figure(k: int, c: float, measured: MeasuredPoint | None = None) -> go.Figure:
    """The exact expected speedup and the approximation (αK + α^K) / (cK + 1) against alpha, for one
    K and c, so the gap between them is visible."""
    alphas = [i / 100 for i in range(101)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(name="exact: (1 − α^(K+1)) / ((1 − α)(cK + 1))", x=alphas,
                             y=[speedup(a, k, c) for a in alphas], mode="lines", line={"color": pal.THEORY, "width": 3},
                             hovertemplate="α = %{x:.2f}: ×%{y:.3f}<extra>exact</extra>"))
    fig.add_trace(go.Scatter(name="approximation: (αK + α^K) / (cK + 1)", x=alphas,
                             y=[approximate_speedup(a, k, c) for a in alphas], mode="lines",
                             line={"color": pal.REJECTED, "width": 2, "dash": "dash"},
                             hovertemplate="α = %{x:.2f}: ×%{y:.3f}<extra>approximation</extra>"))
    if measured is not None and measured.speedup is not None and measured.k == k:
        fig.add_trace(go.Scatter(name=measured.label, x=[measured.alpha], y=[measured.speedup], mode="markers",
                                 marker={"symbol": "circle", "size": 14, "color": "#FFD700",
                                         "line": {"color": "#000", "width": 1.5}}))
    fig.add_hline(y=1.0, line={"color": "#999", "dash": "dot", "width": 1})
    _style(fig, f"Exact vs approximate speedup at K = {k}, c = {c:g}", HEIGHT, legend="below")
    fig.update_xaxes(title_text="α", range=[0, 1])
    fig.update_yaxes(title_text="speedup", rangemode="tozero")
    return fig


# --- draft comparison and K sweep ------------------------------------------------------------------

def compare_figure(sel: Selection | None) -> go.Figure:
    """One chart, three panels: tokens/s (baseline and each draft), acceptance rate, forwards per run."""
    title = "Drafts compared on the same prompt(s)"
    if sel is None:
        return empty_figure(title, "Press “Compare” to run every available draft against the baseline.", HEIGHT + 40)
    if not sel.ranking:
        return empty_figure(title, "No compatible draft to run (see the failed checks below).", HEIGHT + 40)
    names = [_esc(r.name if len(r.name) <= 34 else r.name[:33] + "…") for r in sel.ranking]
    base_name = "baseline (target only)"
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09,
                        subplot_titles=("tokens per second", "acceptance rate", "forwards per run"))
    tps = [sel.mean_baseline_tokens_per_s] + [r.mean_tokens_per_s for r in sel.ranking]
    colors = [pal.BASELINE] + [pal.ACCEPTED if r.mean_speedup >= 1 else pal.REJECTED for r in sel.ranking]
    fig.add_trace(go.Bar(name="tokens/s", x=[base_name] + names, y=tps, marker_color=colors, showlegend=False,
                         text=["×1.00"] + [f"×{r.mean_speedup:.2f}" for r in sel.ranking], textposition="outside",
                         hovertemplate="%{x}: %{y:.1f} tokens/s (%{text})<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(name="acceptance", x=names, y=[r.mean_acceptance for r in sel.ranking],
                         marker_color=pal.ACCEPTED, showlegend=False,
                         hovertemplate="%{x}: %{y:.1%} of drafts accepted<extra></extra>"), row=1, col=2)
    base_fw = sum(sel.baseline_forwards) / len(sel.baseline_forwards) if sel.baseline_forwards else 0.0
    fig.add_trace(go.Bar(name="target forwards", x=[base_name] + names,
                         y=[base_fw] + [r.mean_target_forwards for r in sel.ranking], marker_color=pal.TARGET,
                         hovertemplate="%{x}: %{y:.1f} target forwards<extra></extra>"), row=1, col=3)
    fig.add_trace(go.Bar(name="draft forwards", x=[base_name] + names,
                         y=[0.0] + [r.mean_draft_forwards for r in sel.ranking], marker_color=pal.DRAFT,
                         hovertemplate="%{x}: %{y:.1f} draft forwards<extra></extra>"), row=1, col=3)
    n = len(sel.prompts)
    _style(fig, f"{title}: best = {_esc(sel.best or '–')}<br><sup>mean over {n} prompt{'s' if n != 1 else ''}; "
                "×: measured speedup over the baseline on the same prompt</sup>", HEIGHT + 60, barmode="group")
    fig.update_layout(legend={"orientation": "v", "xref": "paper", "x": 0.995, "xanchor": "right", "yref": "paper",
                              "y": 0.98, "yanchor": "top",
                              "bgcolor": "rgba(255,255,255,0.85)"})   # inside the forwards panel
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=1, col=2)
    fig.update_xaxes(tickangle=-25)
    return fig


def ksweep_figure(sw: KSweep | None, flat: bool = False) -> go.Figure:
    """Measured tokens/s against K with the naive closed-form curve for the measured alpha and c, the
    calibrated prediction of the cost model (``flat``: priced with a GPU-like flat verify) and the
    baseline (and, when the sweep ran them, token trees of N = K nodes); below, acceptance rate and mean alpha
    per K. The best measured K is starred."""
    title = "K sweep"
    if sw is None or not sw.runs:
        return empty_figure(title, "Press “Sweep K” to run K = 1 … K_max on the prompt.", HEIGHT + 120)
    ks = [r.k for r in sw.runs]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.62, 0.38],
                        subplot_titles=("tokens per second", "acceptance"))
    fig.add_trace(go.Scatter(name="measured", x=ks, y=[r.tokens_per_s for r in sw.runs], mode="lines+markers",
                             line={"color": pal.ACCEPTED, "width": 3}, marker={"size": 9},
                             hovertext=[f"K = {r.k}: {r.tokens_per_s:.1f} tok/s, {r.tokens_per_iteration:.2f} "
                                        f"tokens/iteration" + ("" if r.same_as_baseline is None else
                                                               f", same tokens as baseline: {r.same_as_baseline}")
                                        for r in sw.runs], hoverinfo="text"), row=1, col=1)
    if any(t is not None for t in sw.theory_tokens_per_s):
        fig.add_trace(go.Scatter(
            name=f"naive closed form (α̂ = {sw.alpha:.2f}, ĉ = {sw.c:.3f})", x=ks, y=sw.theory_tokens_per_s,
            mode="lines", line={"color": pal.THEORY, "width": 2, "dash": "dot"},
            hovertemplate="K = %{x}: naive closed form %{y:.1f} tok/s<extra></extra>"), row=1, col=1)
    for is_flat in (False, True):   # both drawn; ``flat`` picks the one shown (the other: click its legend entry)
        predicted = sw.predicted_flat_tokens_per_s if is_flat else sw.predicted_tokens_per_s
        if not predicted or all(t is None for t in predicted):
            continue
        name = "calibrated, flat verify (GPU-like)" if is_flat else "calibrated prediction (measured verify curve)"
        fig.add_trace(go.Scatter(
            name=name, x=ks, y=predicted, mode="lines+markers", visible=True if is_flat == flat else "legendonly",
            line={"color": pal.BASELINE if is_flat else pal.REJECTED, "width": 2.5}, marker={"size": 6, "symbol": "x"},
            hovertemplate="K = %{x}: " + name + " %{y:.1f} tok/s<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(name=f"baseline ({sw.baseline_tokens_per_s:.1f} tok/s)", x=[ks[0], ks[-1]],
                             y=[sw.baseline_tokens_per_s] * 2, mode="lines",
                             line={"color": pal.BASELINE, "width": 2, "dash": "dash"}, hoverinfo="skip"), row=1, col=1)
    if sw.hindsight_tokens_per_s is not None:
        fig.add_trace(go.Scatter(
            name=f"best K schedule in hindsight ({sw.hindsight_tokens_per_s:.1f} tok/s, calibrated)",
            x=[ks[0], ks[-1]], y=[sw.hindsight_tokens_per_s] * 2, mode="lines",
            line={"color": pal.BONUS, "width": 2, "dash": "longdash"},
            hovertext=f"the best K per iteration, knowing the output (Ks: {_ks_summary(sw.hindsight_ks)}), priced "
                      "by the calibrated costs: no K policy can beat it under those costs",
            hoverinfo="text"), row=1, col=1)
    if sw.tree_runs:      # chain vs tree at the same node budget: a tree of N = K nodes
        fig.add_trace(go.Scatter(
            name="token tree of N = K nodes: measured", x=[r.k for r in sw.tree_runs],
            y=[r.tokens_per_s for r in sw.tree_runs], mode="lines+markers",
            line={"color": pal.DRAFT, "width": 3, "dash": "dashdot"}, marker={"size": 9, "symbol": "diamond"},
            hovertext=[f"tree of N = {t.k} nodes: {t.tokens_per_s:.1f} tok/s, {t.tokens_per_iteration:.2f} tokens/"
                       f"iteration (chain of K = {c.k}: {c.tokens_per_iteration:.2f})"
                       for t, c in zip(sw.tree_runs, sw.runs)], hoverinfo="text"), row=1, col=1)
    best = next(r for r in sw.runs if r.k == sw.best_k)
    fig.add_trace(go.Scatter(name=f"best K = {sw.best_k}", x=[best.k], y=[best.tokens_per_s], mode="markers",
                             marker={"symbol": "star", "size": 20, "color": "#FFD700",
                                     "line": {"color": "#000", "width": 1.5}},
                             hovertemplate="best measured K = %{x}: %{y:.1f} tok/s<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(name="acceptance rate (accepted / drafted)", x=ks, y=[r.acceptance_rate for r in sw.runs],
                         marker_color=pal.ACCEPTED, opacity=0.75,
                         hovertemplate="K = %{x}: %{y:.1%} accepted<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Scatter(name="mean α of tested drafts", x=ks, y=[r.alpha for r in sw.runs], mode="markers",
                             marker={"symbol": "diamond", "size": 10, "color": "#111"},
                             hovertemplate="K = %{x}: mean α %{y:.3f}<extra></extra>"), row=2, col=1)
    tk = sw.theory_k()
    sub = (f"drafter: {_esc(sw.drafter)} · best measured K = {sw.best_k}"
           + ("" if tk is None else f" · closed form's best K = {tk}"))
    if sw.predicted_tokens_per_s and sw.runs:
        errs = [abs(p / r.tokens_per_s - 1) for p, r in zip(sw.predicted_tokens_per_s, sw.runs)
                if p is not None and r.tokens_per_s > 0]
        if errs:
            sub += f" · calibrated prediction within {100 * max(errs):.0f} % of measured at every K"
    _style(fig, f"{title}: measured vs theory<br><sup>{sub}</sup>", HEIGHT + 140, legend="right")
    fig.update_xaxes(title_text="K (drafts per iteration)", dtick=1, row=2, col=1)
    fig.update_yaxes(title_text="tokens / s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=2, col=1)
    return fig


def _ks_summary(ks: list[int], limit: int = 24) -> str:
    """A schedule's Ks, the first ``limit`` and how many more."""
    head = " ".join(map(str, ks[:limit]))
    return head + (f" … (+{len(ks) - limit})" if len(ks) > limit else "")
