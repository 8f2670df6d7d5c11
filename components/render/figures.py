"""The seven Live/Replay figures: pure functions Trace -> go.Figure. This module draws the outcomes, the
draft positions and the theory, and gathers the rest: the timeline and race from ``time``, p vs q and the
residual from ``iteration`` (``all_figures`` builds all seven, in ``FIGURE_IDS``' order).

Each builder reads what the engine recorded and draws it; nothing is recomputed here except
display arithmetic (sums, counts) and the closed-form curves from ``specdec_core.theory``.
A trace with no iterations (or no selected iteration) gives a figure with an explanatory message.
All model text shown in a figure goes through ``plot_text`` (Plotly renders a subset of HTML).
"""
from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import Trace
from specdec_core.stats.intervals import describe, speedup_interval, wilson
from specdec_core.policy.closed_form import estimate_alpha, estimate_c, expected_tokens, speedup
from specdec_core.policy.costmodel import predict_speedup, predicted_speedup_curve

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure, is_greedy
from components.render.measures import accepted_length_counts, measured_speedup, outcome, position_counts, running_acceptance
from components.render.iteration import REPLACED_LABEL, pq_figure, residual_figure
from components.render.time import LANE_BASELINE, LANE_DRAFT, LANE_TARGET, race_figure, timeline_figure

__all__ = ["LANE_BASELINE", "LANE_DRAFT", "LANE_TARGET", "race_figure", "timeline_figure", "pq_figure",
           "residual_figure", "outcomes_figure", "positions_figure", "theory_figure", "FIGURE_IDS", "all_figures"]


# --- 3. outcomes ------------------------------------------------------------------------------------

def outcomes_figure(trace: Trace) -> go.Figure:
    """Per iteration, stacked: accepted / rejected / resampled / bonus tokens; the running acceptance rate."""
    title = "Outcomes per iteration"
    if not trace.iterations:
        return empty_figure(title, "Run a prompt to see what happened to each iteration's drafts.")
    its = trace.iterations
    os_ = [outcome(it) for it in its]
    x = [it.index + 1 for it in its]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    stacks = (("accepted", [o.accepted for o in os_], pal.ACCEPTED, ""),
              ("rejected", [o.rejected + o.discarded for o in os_], pal.REJECTED, "/"),
              (REPLACED_LABEL if is_greedy(trace) else "resampled", [o.resampled for o in os_], pal.RESAMPLED, "."),
              ("bonus", [o.bonus for o in os_], pal.BONUS, "x"))
    for name, ys, color, pattern in stacks:
        hover = [_outcome_hover(it.index, o, is_greedy(trace)) for it, o in zip(its, os_, strict=True)]
        fig.add_trace(go.Bar(name=name, x=x, y=ys, marker={"color": color, "pattern": {"shape": pattern}},
                             hovertext=hover, hoverinfo="text"), secondary_y=False)
    fig.add_trace(go.Scatter(name="running acceptance rate", x=x, y=running_acceptance(trace), mode="lines+markers",
                             line={"color": "#111", "width": 2}, marker={"size": 5}, connectgaps=True,
                             hovertemplate="after iteration %{x}: %{y:.0%} accepted<extra></extra>"),
                  secondary_y=True)
    apply_layout(fig, title, barmode="stack", bargap=0.15)
    fig.update_xaxes(title_text="iteration")
    fig.update_yaxes(title_text="tokens", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="acceptance rate", secondary_y=True, range=[0, 1.05], tickformat=".0%",
                     showgrid=False)
    return fig


def _outcome_hover(index: int, o, greedy: bool = False) -> str:
    tested = o.accepted + o.rejected
    parts = [f"iteration {index + 1}", f"accepted {o.accepted} of {tested} tested ({o.drafted} drafted)"]
    if o.rejected:
        parts.append(f"{o.rejected} rejected" + (f", {o.discarded} discarded untested" if o.discarded else ""))
    if o.resampled:
        parts.append("1 replaced by the target's choice (argmax p)" if greedy else "1 resampled from the residual")
    if o.bonus:
        parts.append("1 bonus token")
    return "<br>".join(parts)


# --- 6. by draft position ---------------------------------------------------------------------------


def positions_figure(trace: Trace) -> go.Figure:
    """Left: acceptance rate at each draft position (accepted / tested) with its Wilson 95 % interval as an
    error bar and the mean α there. Right: how many drafts each iteration accepted (histogram of accepted lengths)."""
    title = "Acceptance by draft position · accepted-length histogram"
    rows = position_counts(trace)
    if not rows:
        return empty_figure(title, "No drafts yet: run a prompt (with a drafter that proposes tokens).")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("acceptance rate by draft position", "drafts accepted per iteration"))
    pos = [j + 1 for j in range(len(rows))]
    rate = [acc / tested if tested else None for _, tested, acc, _ in rows]
    cis = [wilson(acc, tested) for _, tested, acc, _ in rows]
    fig.add_trace(go.Bar(name="accepted / tested (95 % CI)", x=pos, y=rate, marker_color=pal.ACCEPTED,
                         error_y={"type": "data", "symmetric": False, "color": "#333",
                                  "array": [hi - r if r is not None else 0 for r, (_, hi) in zip(rate, cis)],
                                  "arrayminus": [r - lo if r is not None else 0 for r, (lo, _) in zip(rate, cis)]},
                         hovertext=[f"position {j + 1}: {acc} accepted of {tested} tested ({proposed} proposed); "
                                    f"95 % CI {100 * lo:.0f}–{100 * hi:.0f} % (Wilson)"
                                    for j, ((proposed, tested, acc, _), (lo, hi)) in enumerate(zip(rows, cis))],
                         hoverinfo="text"), row=1, col=1)
    fig.add_trace(go.Scatter(name="mean α (tested)", x=pos, y=[a if t else None for _, t, _, a in rows],
                             mode="markers", marker={"symbol": "diamond", "size": 12, "color": "#111"},
                             hovertemplate="position %{x}: mean α %{y:.3f}<extra></extra>"), row=1, col=1)
    counts = accepted_length_counts(trace)
    fig.add_trace(go.Bar(name="iterations", x=list(range(len(counts))), y=counts, marker_color=pal.TARGET,
                         hovertemplate="%{y} iterations accepted %{x} drafts<extra></extra>"), row=1, col=2)
    apply_layout(fig, title)
    fig.update_xaxes(title_text="draft position (a tree's node: its depth)", dtick=1, row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=1, col=1)
    fig.update_xaxes(title_text="accepted drafts", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="iterations", rangemode="tozero", row=1, col=2)
    return fig


# --- 7. theory --------------------------------------------------------------------------------------

def theory_figure(trace: Trace, k_max: int = 16, flat: bool = False) -> go.Figure:
    """Measured tokens/iteration and speedup against the naive closed form E = (1 - α^(K+1)) / (1 - α),
    speedup = E / (cK + 1), and the calibrated prediction (``theory.predicted_speedup_curve``: this
    run's per-position acceptance, verify curve, draft cost, overhead and prefill). ``flat`` prices the
    calibrated curve with a GPU-like verify (every verify costs a one-token forward)."""
    title = "Measured vs. theory (α, c and costs from this run)"
    trees = any(it.tree is not None for it in trace.iterations)
    alpha, c = estimate_alpha(trace), estimate_c(trace)     # α̂: chain iterations only
    if c is None or (alpha is None and not trees):
        return empty_figure(title, "Needs at least one iteration with drafts: run a prompt.")
    k_cfg = int(trace.config.get("k", 1))
    ks = list(range(1, max(k_max, k_cfg) + 1))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("tokens per iteration", "speedup over the baseline"))
    if alpha is not None:
        fig.add_trace(go.Scatter(name="naive closed form", x=ks, y=[expected_tokens(alpha, k) for k in ks],
                                 mode="lines", line={"color": pal.THEORY, "width": 2},
                                 hovertemplate="K=%{x}: E=%{y:.2f} tokens<extra>closed form</extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(name="measured", x=[k_cfg], y=[trace.stats.mean_tokens_per_iteration],
                             mode="markers", marker={"size": 16, "color": pal.ACCEPTED, "symbol": "circle",
                                                     "line": {"color": "#000", "width": 1.5}},
                             hovertemplate="K=%{x}: measured %{y:.2f} tokens/iteration<extra></extra>"),
                  row=1, col=1)
    if alpha is not None:
        fig.add_trace(go.Scatter(name="naive closed form E / (cK + 1)", x=ks, y=[speedup(alpha, k, c) for k in ks],
                                 mode="lines", line={"color": pal.THEORY, "width": 2, "dash": "dot"}, showlegend=False,
                                 hovertemplate="K=%{x}: ×%{y:.2f}<extra>naive closed form</extra>"), row=1, col=2)
    for is_flat in (False, True):   # both drawn; ``flat`` picks the one shown (the other: click its legend entry)
        calibrated = predicted_speedup_curve(trace, ks[-1], flat=is_flat)
        if calibrated is None:
            continue
        name = "calibrated, flat verify (GPU-like)" if is_flat else "calibrated (this device's verify curve)"
        fig.add_trace(go.Scatter(name=name, x=ks, y=calibrated, mode="lines+markers",
                                 line={"color": pal.BASELINE if is_flat else pal.REJECTED, "width": 2.5},
                                 marker={"size": 5}, visible=True if is_flat == flat else "legendonly",
                                 hovertemplate="K=%{x}: ×%{y:.2f}<extra>" + name + "</extra>"), row=1, col=2)
    fig.add_hline(y=1.0, line={"color": "#999", "dash": "dash", "width": 1}, row=1, col=2)
    s = measured_speedup(trace)
    iv = speedup_interval(trace)
    if s is not None:
        bar = {} if iv is None else {"error_y": {"type": "data", "symmetric": False, "array": [iv.high - s],
                                                 "arrayminus": [s - iv.low], "color": "#000"}}
        fig.add_trace(go.Scatter(name="measured speedup", x=[k_cfg], y=[s], mode="markers", showlegend=False,
                                 marker={"size": 16, "color": pal.ACCEPTED, "line": {"color": "#000", "width": 1.5}},
                                 hovertext=[f"K={k_cfg}: measured {describe(iv) if iv else f'×{s:.2f}'}"],
                                 hoverinfo="text", **bar), row=1, col=2)
    policy = trace.config.get("k_policy") or ("heuristic" if trace.config.get("adaptive_k") else "fixed")
    adaptive = "" if policy == "fixed" else f" ({html.escape(str(policy), quote=False)} K policy: K is the cap)"
    pred = predict_speedup(trace, flat=flat)
    pred_txt = "" if pred is None else f" · calibrated prediction of this run ×{pred:.2f}"
    if trees:
        tree = f"token trees of ≤ {trace.config.get('tree_nodes', '?')} nodes"
        a_txt = (f"α̂ = {alpha:.3f} (chain iterations only)" if alpha is not None
                 else "every iteration a tree: no chain α̂, no closed form")
        adaptive = f" ({tree}, depth ≤ K)"
    else:
        a_txt = f"α̂ = {alpha:.3f} (mean min(1, p/q) of tested drafts)"
    apply_layout(fig, title, subtitle=f"{a_txt} · ĉ = {c:.3f} (draft / verify forward time) · measured at "
                                 f"K = {k_cfg}{adaptive}{pred_txt}")
    fig.update_xaxes(title_text="K (drafts per iteration)")
    fig.update_yaxes(rangemode="tozero")
    return fig


FIGURE_IDS = ("plot-timeline", "plot-race", "plot-outcomes", "plot-pq", "plot-residual", "plot-positions",
              "plot-theory")


def all_figures(trace: Trace, index: int | None = None) -> tuple[go.Figure, ...]:
    """The seven figures in FIGURE_IDS order; ``index`` selects the iteration for plot-pq / plot-residual."""
    return (timeline_figure(trace), race_figure(trace), outcomes_figure(trace), pq_figure(trace, index),
            residual_figure(trace, index), positions_figure(trace), theory_figure(trace))
