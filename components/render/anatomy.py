"""Anatomy of one iteration: the slide a teacher would otherwise draw by hand, as a pure figure builder.

``anatomy_figure(trace, index, stage)`` lays the selected iteration out as a grid, one column per draft
position (plus one for the token the iteration ends with) and one row per step, in the order they happen:

    ① draft     the K drafted tokens, each with q, the draft's probability of it
    ② verify    ONE target forward over all of them gives p for each
    ③ decide    α = min(1, p/q) against the uniform draw u: accept iff u < α, left to right
    ④ emit      the accepted drafts, then the token drawn from norm(max(0, p − q)) at the first
                rejection (its top residual tokens listed; greedy: the target's own choice, argmax p), or
                the bonus token when all were accepted

A token-tree iteration is shown the same way along its accepted path (the iteration's ``drafts``), with the
number of nodes drafted and tested in the subtitle; ``tree`` draws the whole tree.

``stage`` (1-4) shows the steps up to that one, for building the slide up step by step. Everything shown
is what the engine recorded in the trace; nothing is recomputed except min/max display arithmetic.
"""
from __future__ import annotations

import html

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.trace import DraftRecord, IterationRecord

from components.render import palette as pal
from components.render.base import (apply_layout, empty_figure, fmt, is_greedy, no_drafts_message, plot_text,
                                    resolve_index)

STAGES = ("① draft: q", "② verify: p", "③ accept iff u < α", "④ emit")
N_STAGES = len(STAGES)
HEIGHT = 560
RESIDUAL_SHOWN = 3            # top residual tokens listed under the resampled token



def _fate(d: DraftRecord) -> tuple[str, str]:
    """(label, colour) of a draft's verdict."""
    if d.accepted:
        return "✓ accept", pal.ACCEPTED
    if d.tested:
        return "✗ reject", pal.REJECTED
    return "not tested", "#777777"


def _decide_text(d: DraftRecord, greedy: bool, tree: bool = False) -> str:
    label, _ = _fate(d)
    if not d.tested:
        return "not tested<br>(after a rejection)"
    if tree and not greedy and d.u is None:        # a tree rule with no α: the target's own draw picked it
        return f"the target's draw<br>y ~ p hit this child<br><b>{label}</b>"
    if greedy or d.u is None:
        same = "=" if d.accepted else "≠"
        return f"α = {fmt(d.alpha)}<br>draft {same} argmax p<br><b>{label}</b>"
    sign = "<" if d.u < d.alpha else "≥"
    return f"α = {fmt(d.alpha)}<br>u = {fmt(d.u)} {sign} α<br><b>{label}</b>"


def _emit_text(d: DraftRecord) -> str:
    if d.accepted:
        return f"{plot_text(d.text or str(d.token_id), 14)} ✓"
    return "✗ dropped" if d.tested else "dropped"


def _final_text(it: IterationRecord, greedy: bool) -> tuple[str, str, str]:
    """(column header, stage-④ text, colour) for the token the iteration ends with. Greedy: a rejected draft
    is replaced by the target's own choice, argmax p (no residual is drawn)."""
    if it.resampled is not None and greedy:
        r = it.resampled
        return ("target's choice", f"<b>{plot_text(r.text or str(r.token_id), 16)}</b><br>argmax p: the target's<br>"
                                   "own choice replaces<br>the rejected draft", pal.RESAMPLED)
    if it.resampled is not None:
        r = it.resampled
        how = "where every child failed" if it.tree is not None else "from norm(max(0, p − q))"
        lines = [f"<b>{plot_text(r.text or str(r.token_id), 16)}</b>", how]
        if r.residual_prob is not None:
            lines.append(f"prob {fmt(r.residual_prob)}")
        top = [f"{plot_text(str(t[1]), 10)} {float(t[2]):.2f}" for t in r.residual_top[:RESIDUAL_SHOWN]]
        if top:
            lines.append("top: " + ", ".join(top))
        return "resampled", "<br>".join(lines), pal.RESAMPLED
    if it.bonus is not None:
        b = it.bonus
        return ("bonus", f"<b>{plot_text(b.text or str(b.token_id), 16)}</b><br>bonus, from p after<br>"
                         f"the last draft: p = {fmt(b.p)}", pal.BONUS)
    return "", "", "#777777"


def anatomy_figure(trace: Trace, index: int | None = None, stage: int = N_STAGES) -> go.Figure:
    """The selected iteration, step by step (see the module docstring). ``index`` is 0-based (None = the
    last iteration); ``stage`` 1-4 shows the steps up to that one."""
    i = resolve_index(trace, index)
    if i is None:
        return empty_figure("Anatomy of one iteration", "Run a prompt (or load a trace), then pick an iteration.",
                            HEIGHT)
    stage = min(max(int(stage), 1), N_STAGES)
    it = trace.iterations[i]
    title = f"Anatomy of iteration {i + 1}"
    if not it.drafts and it.tree is None:
        return empty_figure(title, no_drafts_message(trace, it), HEIGHT)
    greedy = is_greedy(trace)
    n = len(it.drafts)
    header, final, final_color = _final_text(it, greedy)
    cols = [f"{j + 1}" for j in range(n)] + ([f"+1 {header}"] if header else [])
    x = list(range(len(cols)))
    rows = {s: N_STAGES - s for s in range(N_STAGES)}        # stage 0 on top
    texts = [
        [f"<b>{plot_text(d.text or str(d.token_id), 14)}</b><br>q = {fmt(d.q)}" for d in it.drafts],
        [f"p = {fmt(d.p)}" + (f"<br>(softmax {fmt(d.p_raw)})" if greedy and d.p_raw is not None else "")
         for d in it.drafts],
        [_decide_text(d, greedy, it.tree is not None) for d in it.drafts],
        [_emit_text(d) for d in it.drafts] + [final],
    ]
    fig = go.Figure()
    for s in range(stage):
        cells = texts[s]
        colors = ["#111111"] * len(cells)
        if s == 2:
            colors = [_fate(d)[1] for d in it.drafts]
        if s == 3:
            colors = [_fate(d)[1] for d in it.drafts] + [final_color]
        fig.add_trace(go.Scatter(name=STAGES[s], x=x[:len(cells)], y=[rows[s]] * len(cells), text=cells,
                                 mode="text", textfont={"size": 13, "color": colors}, hoverinfo="skip",
                                 showlegend=False))
    shapes = []
    for s in range(N_STAGES):
        for c in x:
            if s < 3 and c >= n:
                continue                                       # the final column only has an ④ cell
            fill = "white"
            if s < stage and s >= 2 and c < n:
                fill = _fate(it.drafts[c])[1] + ("22" if s == 2 else "33") if (s == 2 or it.drafts[c].accepted) \
                    else "white"
            if s < stage and s == 3 and c == n:
                fill = final_color + "33"
            shapes.append({"type": "rect", "x0": c - 0.46, "x1": c + 0.46, "y0": rows[s] - 0.44, "y1": rows[s] + 0.44,
                           "line": {"color": "#bbbbbb" if s >= stage else "#888888", "width": 1,
                                    "dash": "dot" if s >= stage else "solid"},
                           "fillcolor": fill, "layer": "below"})
    if stage >= 2 and n:    # the one verify forward spans every draft
        shapes.append({"type": "rect", "x0": -0.5, "x1": n - 0.5, "y0": rows[1] - 0.48, "y1": rows[1] + 0.48,
                       "line": {"color": pal.TARGET, "width": 3}, "fillcolor": "rgba(0,0,0,0)"})
    accepted = sum(d.accepted for d in it.drafts)
    ends = ("no extra token" if it.resampled is None and it.bonus is None else "a bonus token" if it.bonus is not None
            else "the target's choice (argmax p)" if greedy else "a resampled token")
    m = len(it.emitted)
    tokens = f"{m} token{'s' if m != 1 else ''} from ONE target forward ({it.verify_ms:.0f} ms)"
    if it.tree is not None:
        t = it.tree
        tested = sum(nd.status != "untested" for nd in t.nodes)
        rule = t.rule.replace("_", " ")
        path = f"the path of {n} accepted shown as a chain" if n else "no child of the root accepted"
        subtitle = html.escape(f"A token tree of {len(t.nodes)} nodes ({tested} tested, rule “{rule}”): {path},",
                               quote=False) + "<br>" + html.escape(
                                   f"then {ends} → {tokens}; the tree figure below shows every node", quote=False)
    else:
        subtitle = f"K = {it.k}: {accepted} of {n} drafts accepted, then {ends} → {tokens}"
    stopped = bool(it.draft_stop) and n < it.k and it.tree is None
    if stopped:
        subtitle += "<br>" + html.escape(f"Only {n} of K = {it.k} drafted: {it.draft_stop}.", quote=False)
    apply_layout(fig, f"{title} — step {stage} of {N_STAGES}: {STAGES[stage - 1]}", height=HEIGHT, subtitle=subtitle,
            shapes=shapes, showlegend=False)
    fig.update_xaxes(range=[-0.55, len(cols) - 0.45], tickvals=x, ticktext=cols, side="top", showgrid=False,
                     zeroline=False, title_text="")
    fig.update_yaxes(range=[0.45, N_STAGES + 0.55], tickvals=[rows[s] for s in range(N_STAGES)],
                     ticktext=list(STAGES), showgrid=False, zeroline=False, fixedrange=True)
    fig.update_xaxes(fixedrange=True)
    return fig


__all__ = ["anatomy_figure", "STAGES", "N_STAGES"]
