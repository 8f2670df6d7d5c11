"""One iteration up close: each draft's p and q with its alpha and uniform, and what replaced the first
rejected draft (the residual norm(max(0, p − q)); the coupled rule's mismatch; greedy's argmax p). Pure functions
Trace -> go.Figure."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.trace import IterationRecord, sampler_of

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure, fmt, is_greedy, no_drafts_message, plot_text, resolve_index

REPLACED_LABEL = "target's choice (argmax p)"    # greedy: what replaces a rejected draft


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
