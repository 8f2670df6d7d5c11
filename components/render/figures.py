"""The seven Live/Replay figures: pure functions Trace -> go.Figure.

Each builder reads what the engine recorded and draws it; nothing is recomputed here except
display arithmetic (sums, counts) and the closed-form curves from ``specdec_core.theory``.
A trace with no iterations (or no selected iteration) gives a figure with an explanatory message.
All model text shown in a figure goes through ``plot_text`` (Plotly renders a subset of HTML).
"""
from __future__ import annotations

import html
from itertools import accumulate

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import Trace
from specdec_core.intervals import describe, speedup_interval, wilson
from specdec_core.policy.closed_form import estimate_alpha, estimate_c, expected_tokens, speedup
from specdec_core.policy.costmodel import predict_speedup, predicted_speedup_curve
from specdec_core.trace import IterationRecord
from specdec_core.trace_sampler import sampler_of

from components.render import palette as pal
from components.render.base import (
    apply_layout,
    empty_figure,
    fmt,
    is_greedy,
    no_drafts_message,
    plot_text,
    resolve_index,
)
from components.render.measures import (
    accepted_length_counts,
    baseline_progress,
    measured_speedup,
    outcome,
    position_counts,
    running_acceptance,
    speculative_progress,
)

LANE_DRAFT = "speculative · draft"
LANE_TARGET = "speculative · target"
LANE_BASELINE = "baseline · target"
REPLACED_LABEL = "target's choice (argmax p)"    # greedy: what replaces a rejected draft



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
    fig.add_trace(_hbar("draft forward", LANE_DRAFT, draft_x, draft_base, draft_hover, pal.DRAFT))
    fig.add_trace(_hbar("verify forward", LANE_TARGET, ver_x, ver_base, ver_hover, pal.TARGET))
    fig.add_trace(_hbar("other", LANE_TARGET, oth_x, oth_base, oth_hover, pal.OTHER))
    lanes = [LANE_DRAFT, LANE_TARGET]
    b = trace.baseline
    if b is not None and b.token_ms:
        starts = [0.0] + list(accumulate(b.token_ms))[:-1]
        hover = [f"baseline token {i + 1}: {ms:.1f} ms" + (" (includes the prefill)" if i == 0 else "")
                 for i, ms in enumerate(b.token_ms)]
        fig.add_trace(_hbar("baseline forward", LANE_BASELINE, list(b.token_ms), starts, hover, pal.BASELINE))
        lanes.append(LANE_BASELINE)
    apply_layout(fig, title, barmode="overlay", bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=lanes, autorange="reversed", showgrid=False)
    fig.update_xaxes(title_text="ms since the run started (each run on its own clock)")
    return fig


def _hbar(name: str, lane: str, widths: list[float], bases: list[float], hover: list[str], color: str) -> go.Bar:
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


# --- 4. p vs q of the selected iteration ------------------------------------------------------------

def pq_figure(trace: Trace, index: int | None = None) -> go.Figure:
    """For one iteration: p (target) and q (draft) of each drafted token side by side, with alpha =
    min(1, p/q) and the uniform draw u marked, and each draft's verdict."""
    i = resolve_index(trace, index)
    if i is None:
        return empty_figure("p vs q per draft", "Run a prompt, then pick an iteration.")
    it = trace.iterations[i]
    title = f"Iteration {i + 1}: p (target) vs q (draft) for each drafted token"
    if not it.drafts:
        return empty_figure(title, no_drafts_message(trace, it))
    # greedy: the warped p and q are one-hot, so the bars show the unwarped softmax instead (when recorded)
    raw = trace.config.get("temperature", 0) == 0 and any(d.p_raw is not None for d in it.drafts)
    p_vals = [d.p_raw if raw and d.p_raw is not None else d.p for d in it.drafts]
    q_vals = [d.q_raw if raw and d.q_raw is not None else d.q for d in it.drafts]
    suffix = " softmax" if raw else ""
    labels = [f"{j + 1}: {plot_text(d.text or str(d.token_id))}" for j, d in enumerate(it.drafts)]
    hover = [_draft_hover(j, d) for j, d in enumerate(it.drafts)]
    fig = go.Figure()
    fig.add_trace(go.Bar(name=f"p (target){suffix}", x=labels, y=p_vals, marker_color=pal.TARGET,
                         hovertext=hover, hoverinfo="text"))
    fig.add_trace(go.Bar(name=f"q (draft){suffix}", x=labels, y=q_vals, marker_color=pal.DRAFT,
                         hovertext=hover, hoverinfo="text"))
    greedy = trace.config.get("temperature", 0) == 0
    coupled = sampler_of(trace.config) == "coupled" and not greedy
    fig.add_trace(go.Scatter(name="P(kept): the draft is the target's sample" if coupled else "α = min(1, p/q)",
                             x=labels, y=[d.accept_prob if d.tested else None for d in it.drafts],
                             mode="markers", marker={"symbol": "diamond", "size": 14, "color": "#111",
                                                     "line": {"color": "white", "width": 1}},
                             hovertext=hover, hoverinfo="text"))
    u_vals = [d.u for d in it.drafts]
    if any(u is not None for u in u_vals):
        fig.add_trace(go.Scatter(name="u ~ U[0, 1)", x=labels, y=u_vals, mode="markers",
                                 marker={"symbol": "line-ew", "size": 30, "line": {"color": pal.REJECTED, "width": 4}},
                                 hovertext=hover, hoverinfo="text"))
    for label, d in zip(labels, it.drafts, strict=True):
        verdict, color = (("✓ accepted", pal.ACCEPTED) if d.accepted else
                          ("✗ rejected", pal.REJECTED) if d.tested else ("– not tested", "#595959"))
        fig.add_annotation(x=label, y=1.08, text=verdict, showarrow=False, font={"size": 13, "color": color})
    note = ("greedy: accepted iff the draft is the target's argmax (α is 0 or 1)"
            + ("; bars: the unwarped softmax" if raw else "") if greedy else
            "coupled rule: accepted iff the draft is the target's sample for its position (the same noise for both)"
            if coupled else "accepted iff u < α")
    apply_layout(fig, title, subtitle=note, barmode="group", bargap=0.25)
    fig.update_yaxes(range=[0, 1.15], title_text="probability")
    return fig


def _draft_hover(j: int, d) -> str:
    verdict = "accepted" if d.accepted else ("rejected" if d.tested else "not tested (after the first rejection)")
    lines = [f"draft {j + 1}: {plot_text(d.text or str(d.token_id), 40)} (id {d.token_id})",
             f"p = {fmt(d.p, 4)}   q = {fmt(d.q, 4)}", f"α = {fmt(d.alpha, 4)}   u = {fmt(d.u, 4)}", verdict]
    if d.p_raw is not None or d.q_raw is not None:
        lines.append(f"unwarped: p = {fmt(d.p_raw, 4)}   q = {fmt(d.q_raw, 4)}")
    return "<br>".join(lines)


# --- 5. the residual at the selected iteration's rejection ------------------------------------------

def _coupled_mismatch_figure(it: IterationRecord, i: int, top: int) -> go.Figure:
    """The coupled rule's mismatch: p and q over their top tokens, the draft's token (rejected: not the target's
    keyed sample) and the target's sample, which is written (no residual is drawn)."""
    rs = it.resampled
    title = f"Iteration {i + 1}: coupled rule, at the mismatch the target's own sample is written"
    if not rs.p_top and not rs.q_top:
        return empty_figure(title, "This trace did not record the distributions (full_trace was off).")
    p_map = {row[0]: row[2] for row in rs.p_top}
    q_map = {row[0]: row[2] for row in rs.q_top}
    texts = {row[0]: row[1] for rows in (rs.q_top, rs.p_top) for row in rows}
    texts[rs.token_id] = rs.text
    p_map.setdefault(rs.token_id, rs.p)
    if rs.q is not None:
        q_map.setdefault(rs.token_id, rs.q)
    draft = it.drafts[rs.position] if rs.position < len(it.drafts) else None
    if draft is not None:
        texts.setdefault(draft.token_id, draft.text)
        p_map.setdefault(draft.token_id, draft.p)
        q_map.setdefault(draft.token_id, draft.q)
    order = [rs.token_id] + ([draft.token_id] if draft is not None and draft.token_id != rs.token_id else [])
    for rows in (rs.p_top, rs.q_top):
        order += [row[0] for row in rows if row[0] not in order]
    order = order[:top]
    labels = _unique([plot_text(texts.get(t, "") or str(t)) for t in order], order)
    fig = go.Figure()
    for name, m, color in (("p (target)", p_map, pal.TARGET), ("q (draft)", q_map, pal.DRAFT)):
        fig.add_trace(go.Bar(name=name, x=labels, y=[m.get(t) for t in order], marker_color=color,
                             hovertext=[f"{name}: {plot_text(texts.get(t, ''), 40)} (id {t}) = "
                                        + (f"{m[t]:.4f}" if t in m else "not in the top 10") for t in order],
                             hoverinfo="text"))
    fig.add_annotation(x=labels[0], y=max(p_map.get(rs.token_id, 0), q_map.get(rs.token_id, 0) or 0), yshift=10,
                       text="the target's sample: written", showarrow=True, arrowhead=2, ay=-30,
                       font={"size": 13, "color": "#000"})
    if draft is not None and draft.token_id != rs.token_id:
        fig.add_annotation(x=labels[1], y=max(p_map.get(draft.token_id, 0), q_map.get(draft.token_id, 0)),
                           yshift=10, text="the draft's token: rejected", showarrow=True, arrowhead=2, ay=-30,
                           font={"size": 13, "color": pal.REJECTED})
    apply_layout(fig, title, subtitle=html.escape(
        "Both drew with the same noise for this position: each token's largest probability ÷ noise wins", quote=False),
        barmode="group")
    fig.update_yaxes(title_text="probability", rangemode="tozero")
    return fig


def residual_figure(trace: Trace, index: int | None = None, top: int = 12) -> go.Figure:
    """At the selected iteration's rejection: the top tokens of p, q and norm(max(0, p - q)), with the
    token actually sampled from the residual highlighted."""
    i = resolve_index(trace, index)
    if i is None:
        return empty_figure("Residual at the rejection", "Run a prompt, then pick an iteration.")
    it = trace.iterations[i]
    title = (f"Iteration {i + 1}: at a rejection, greedy takes the target's own choice" if is_greedy(trace) else
             f"Iteration {i + 1}: residual norm(max(0, p − q)) at the rejection")
    rs = it.resampled
    if rs is None:
        return empty_figure(title, _no_rejection_message(it))
    if sampler_of(trace.config) == "coupled" and not is_greedy(trace):
        return _coupled_mismatch_figure(it, i, top)
    if not rs.residual_top:
        return empty_figure(title, "This trace did not record the distributions (full_trace was off).")
    if is_greedy(trace):
        return _greedy_replacement_figure(it, i, top)
    p_map = {row[0]: row[2] for row in rs.p_top}
    q_map = {row[0]: row[2] for row in rs.q_top}
    r_map = {row[0]: row[2] for row in rs.residual_top}
    texts = {row[0]: row[1] for rows in (rs.q_top, rs.p_top, rs.residual_top) for row in rows}
    texts[rs.token_id] = rs.text
    order: list[int] = []
    for rows in (rs.residual_top, rs.p_top, rs.q_top):
        for row in rows:
            if row[0] not in order:
                order.append(row[0])
    if rs.token_id not in order:
        order.insert(0, rs.token_id)
    order = order[:top] if rs.token_id in order[:top] else order[: top - 1] + [rs.token_id]
    rejected = it.drafts[rs.position] if rs.position < len(it.drafts) else None
    labels = _unique([plot_text(texts.get(t, "") or str(t)) for t in order], order)
    fig = go.Figure()
    for name, m, color in (("p (target)", p_map, pal.TARGET), ("q (draft)", q_map, pal.DRAFT),
                           ("norm(max(0, p − q))", r_map, pal.RESIDUAL)):
        is_res = m is r_map
        fig.add_trace(go.Bar(
            name=name, x=labels, y=[m.get(t) for t in order], marker={
                "color": color,
                "line": {"color": ["#000" if (is_res and t == rs.token_id) else color for t in order],
                         "width": [4 if (is_res and t == rs.token_id) else 0 for t in order]}},
            hovertext=[f"{name}: {plot_text(texts.get(t, ''), 40)} (id {t}) = "
                       + (f"{m[t]:.4f}" if t in m else "not in the top 10") for t in order],
            hoverinfo="text"))
    k = order.index(rs.token_id)
    fig.add_annotation(x=labels[k], y=max(r_map.get(rs.token_id, 0), p_map.get(rs.token_id, 0)), yshift=10,
                       text="sampled", showarrow=True, arrowhead=2, ay=-30, font={"size": 14, "color": "#000"})
    if rejected is not None and rejected.token_id in order:
        kr = order.index(rejected.token_id)
        fig.add_annotation(x=labels[kr], y=max(q_map.get(rejected.token_id, 0), p_map.get(rejected.token_id, 0)),
                           yshift=10, text="rejected draft", showarrow=True, arrowhead=2, ay=-30,
                           font={"size": 13, "color": pal.REJECTED})
    apply_layout(fig, title, subtitle=f"draft {rs.position + 1} rejected → resampled {plot_text(rs.text, 30)} "
                                 f"(probability {fmt(rs.residual_prob)} under the residual)",
            barmode="group", bargap=0.2)
    fig.update_yaxes(title_text="probability", rangemode="tozero")
    return fig


def _greedy_replacement_figure(it: IterationRecord, i: int, top: int) -> go.Figure:
    """Greedy (T = 0): no residual is drawn. p is one-hot at the target's argmax, which replaces the rejected
    draft; q, the draft's distribution at that position, is one-hot at the draft's own argmax."""
    rs = it.resampled
    assert rs is not None
    rejected = it.drafts[rs.position] if rs.position < len(it.drafts) else None
    q_map = {row[0]: row[2] for row in rs.q_top}
    texts = {row[0]: row[1] for row in rs.q_top}
    texts[rs.token_id] = rs.text
    order = [rs.token_id]
    if rejected is not None:
        texts[rejected.token_id] = rejected.text
        order.append(rejected.token_id)
    order = (order + [row[0] for row in rs.q_top if row[0] not in order])[:top]   # the rejected draft ≠ argmax p
    labels = _unique([plot_text(texts.get(t, "") or str(t)) for t in order], order)
    p_vals = [1.0 if t == rs.token_id else 0.0 for t in order]
    fig = go.Figure()
    for name, ys, color in (("p (target), one-hot at its argmax", p_vals, pal.TARGET),
                            ("q (draft)", [q_map.get(t) for t in order], pal.DRAFT)):
        hover = [f"{name}: {plot_text(texts.get(t, ''), 40)} (id {t}) = " + ("–" if y is None else f"{y:.4f}")
                 for t, y in zip(order, ys, strict=True)]
        fig.add_trace(go.Bar(name=name, x=labels, y=ys, marker_color=color, opacity=0.85, hovertext=hover,
                             hoverinfo="text"))
    fig.add_annotation(x=labels[0], y=1.0, yshift=10, text="the target's choice", showarrow=True, arrowhead=2,
                       ay=-30, font={"size": 14, "color": "#000"})
    note = ""
    if rejected is not None:
        fig.add_annotation(x=labels[1], y=q_map.get(rejected.token_id, 0) or 0, yshift=10, text="rejected draft",
                           showarrow=True, arrowhead=2, ay=-30, font={"size": 13, "color": pal.REJECTED})
        if rejected.p_raw is not None:
            note = f" · the target's softmax gave the draft p = {rejected.p_raw:.3f}"
    title = f"Iteration {i + 1}: greedy, the rejected draft is replaced by the target's own choice"
    apply_layout(fig, title, subtitle=f"draft {rs.position + 1} ≠ argmax p → {plot_text(rs.text, 30)} is emitted, "
                                 f"no residual drawn (that rule is for temperature > 0){note}",
            barmode="overlay", bargap=0.35)      # one-hot p and q peak at different tokens: centred bars
    fig.update_yaxes(title_text="probability (greedy)", range=[0, 1.15])
    return fig


def _unique(labels: list[str], ids: list[int]) -> list[str]:
    seen: dict[str, int] = {}
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
    return [lab if seen[lab] == 1 else f"{lab} #{t}" for lab, t in zip(labels, ids, strict=True)]


def _no_rejection_message(it: IterationRecord) -> str:
    if not it.drafts:
        return "Nothing was drafted this iteration, so nothing could be rejected."
    if it.bonus is not None:
        return (f"Nothing was rejected: all {len(it.drafts)} drafts were accepted and the target added a bonus token "
                f"({it.bonus.text!r}).")
    return f"Nothing was rejected: all {len(it.drafts)} drafts were accepted."


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
