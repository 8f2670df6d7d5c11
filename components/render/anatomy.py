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
import textwrap

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.trace import DraftRecord, IterationRecord
from specdec_core.trace import sampler_of

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

STAGES = ("① draft: q", "② verify: p", "③ accept iff u < α", "④ emit")
COUPLED_STAGES = ("① draft: q", "② verify: p", "③ accept iff it is the target's sample", "④ emit")
NARROW_STAGES = ("① q", "② p", "③ test", "④ emit")
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


def _decide_text(d: DraftRecord, greedy: bool, tree: bool = False, narrow: bool = False, target: str = "") -> str:
    label, _ = _fate(d)
    if not d.tested:
        return "not tested" if narrow else "not tested<br>(after a rejection)"
    if d.target_token is not None and not greedy:    # the coupled rule: kept iff it is the target's keyed sample
        same = "= the target's sample" if d.accepted else f"≠ the target's<br>sample {target}"
        chance = f"P(kept) {fmt(d.accept_prob, 2)}"
        return f"{same}<br><b>{label}</b>" if narrow else f"{same}<br>{chance}<br><b>{label}</b>"
    if narrow and (greedy or d.u is None):
        return f"α {fmt(d.alpha, 2)}<br><b>{label}</b>"
    if narrow:
        return f"α {fmt(d.alpha, 2)}<br>u {fmt(d.u, 2)}<br><b>{label}</b>"
    if tree and not greedy and d.u is None:        # a tree rule with no α: the target's own draw picked it
        return f"the target's draw<br>y ~ p hit this child<br><b>{label}</b>"
    if greedy or d.u is None:
        same = "=" if d.accepted else "≠"
        return f"α = {fmt(d.alpha)}<br>draft {same} argmax p<br><b>{label}</b>"
    sign = "<" if d.u < d.alpha else "≥"
    return f"α = {fmt(d.alpha)}<br>u = {fmt(d.u)} {sign} α<br><b>{label}</b>"


def _target_text(it: IterationRecord) -> str:
    """The target's sample at the iteration's mismatch (the coupled rule writes it), quoted for a figure."""
    r = it.resampled
    return plot_text(r.text or str(r.token_id), 12) if r is not None else ""


def _emit_text(d: DraftRecord) -> str:
    if d.accepted:
        return f"{plot_text(d.text or str(d.token_id), 14)} ✓"
    return "✗ dropped" if d.tested else "dropped"


def _final_text(it: IterationRecord, greedy: bool, narrow: bool = False, coupled: bool = False) -> tuple[str, str, str]:
    """(column header, stage-④ text, colour) for the token the iteration ends with. Greedy: a rejected draft
    is replaced by the target's own choice, argmax p (no residual is drawn). ``narrow``: the token and one word."""
    if narrow:
        token = it.resampled or it.bonus
        if token is None:
            return "", "", "#777777"
        kind = ("bonus" if it.bonus is not None else "target's choice" if greedy else "target's sample" if coupled
                else "resampled")
        color = pal.BONUS if it.bonus is not None else pal.RESAMPLED
        return kind, f"<b>{plot_text(token.text or str(token.token_id), 12)}</b><br>{kind}", color
    if it.resampled is not None and coupled and not greedy:
        r = it.resampled
        q = "" if r.q is None else f", q = {fmt(r.q)}"
        return ("target's sample", f"<b>{plot_text(r.text or str(r.token_id), 16)}</b><br>the target's own<br>"
                                   f"sample here<br>p = {fmt(r.p)}{q}", pal.RESAMPLED)
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


def anatomy_figure(trace: Trace, index: int | None = None, stage: int = N_STAGES, narrow: bool = False) -> go.Figure:
    """The selected iteration, step by step (see the module docstring). ``index`` is 0-based (None = the
    last iteration); ``stage`` 1-4 shows the steps up to that one, and before step ③ nothing on the figure says
    which drafts will be accepted or how the iteration ends. ``narrow`` (a phone) turns the grid: one row per
    draft, one column per step."""
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
    coupled = sampler_of(trace.config) == "coupled" and not greedy
    decided = stage >= 3
    n = len(it.drafts)
    header, final, final_color = _final_text(it, greedy, narrow, coupled)
    heads = [f"{j + 1}" for j in range(n)] + ([f"+1 {header}" if decided else "+1"] if header else [])
    size = 11 if narrow else 13
    texts = [
        [f"<b>{plot_text(d.text or str(d.token_id), 14)}</b><br>q = {fmt(d.q)}" for d in it.drafts],
        [_verify_text(d, greedy, narrow) for d in it.drafts],
        [_decide_text(d, greedy, it.tree is not None, narrow, _target_text(it)) for d in it.drafts],
        [_emit_text(d) for d in it.drafts] + [final],
    ]

    def at(s: int, c: int) -> tuple[int, int]:
        """(x, y) of step ``s``'s cell in column ``c``: steps top to bottom, or (narrow) left to right."""
        return (s, len(heads) - 1 - c) if narrow else (c, N_STAGES - 1 - s)

    fig = go.Figure()
    for s in range(stage):
        cells = texts[s]
        colors = ["#111111"] * len(cells)
        if s == 2:
            colors = [_fate(d)[1] for d in it.drafts]
        if s == 3:
            colors = [_fate(d)[1] for d in it.drafts] + [final_color]
        xy = [at(s, c) for c in range(len(cells))]
        fig.add_trace(go.Scatter(name=STAGES[s], x=[p[0] for p in xy], y=[p[1] for p in xy], text=cells,
                                 mode="text", textfont={"size": size, "color": colors}, hoverinfo="skip",
                                 showlegend=False))
    shapes = []
    for s in range(N_STAGES):
        for c in range(len(heads)):
            if s < 3 and c >= n:
                continue                                       # the final column only has an ④ cell
            fill = "white"
            if s < stage and s >= 2 and c < n:
                fill = _fate(it.drafts[c])[1] + ("22" if s == 2 else "33") if (s == 2 or it.drafts[c].accepted) \
                    else "white"
            if s < stage and s == 3 and c == n:
                fill = final_color + "33"
            x, y = at(s, c)
            shapes.append({"type": "rect", "x0": x - 0.46, "x1": x + 0.46, "y0": y - 0.44, "y1": y + 0.44,
                           "line": {"color": "#bbbbbb" if s >= stage else "#888888", "width": 1,
                                    "dash": "dot" if s >= stage else "solid"},
                           "fillcolor": fill, "layer": "below"})
    if stage >= 2 and n:    # the one verify forward spans every draft
        (x0, y0), (x1, y1) = at(1, 0), at(1, n - 1)
        shapes.append({"type": "rect", "x0": min(x0, x1) - 0.5 + (0.02 if narrow else 0),
                       "x1": max(x0, x1) + 0.5 - (0.02 if narrow else 0),
                       "y0": min(y0, y1) - 0.48, "y1": max(y0, y1) + 0.48,
                       "line": {"color": pal.TARGET, "width": 3}, "fillcolor": "rgba(0,0,0,0)"})
    lines = [_subtitle(it, greedy, decided, coupled)]
    stopped = bool(it.draft_stop) and n < it.k and it.tree is None
    if stopped:
        lines.append(html.escape(f"Only {n} of K = {it.k} drafted: {it.draft_stop}.", quote=False))
    if narrow:
        lines = [w for line in lines for w in textwrap.wrap(line.replace("<br>", " "), 50)]
    subtitle = "<br>".join(lines)
    steps = list(NARROW_STAGES if narrow else COUPLED_STAGES if coupled else STAGES)
    if narrow:
        heads = [h.split(" ")[0] for h in heads]
    height = 190 + 74 * len(heads) if narrow else HEIGHT
    apply_layout(fig, f"Iteration {i + 1}, step {stage} of {N_STAGES}" if narrow else
                 f"{title} — step {stage} of {N_STAGES}: {steps[stage - 1]}",
                 height=height, subtitle="" if narrow else subtitle, shapes=shapes, showlegend=False)
    if narrow:       # the subtitle's lines above the column heads, clear of the title
        fig.update_layout(margin={"l": 28, "r": 4, "t": 70 + 15 * len(lines), "b": 6})
        fig.add_annotation(text=subtitle, xref="paper", yref="paper", x=0, xshift=-24, y=1, yshift=26,
                           xanchor="left", yanchor="bottom", align="left", showarrow=False, font={"size": 11})
        fig.update_layout(title={"y": 1, "yref": "container", "yanchor": "top", "pad": {"t": 10}})
    cols, rows = (steps, heads[::-1]) if narrow else (heads, steps[::-1])
    fig.update_xaxes(range=[-0.55, len(cols) - 0.45], tickvals=list(range(len(cols))), ticktext=cols, side="top",
                     showgrid=False, zeroline=False, title_text="", fixedrange=True, tickangle=0)
    fig.update_yaxes(range=[-0.55, len(rows) - 0.45], tickvals=list(range(len(rows))), ticktext=rows,
                     showgrid=False, zeroline=False, fixedrange=True)
    return fig


def _verify_text(d: DraftRecord, greedy: bool, narrow: bool = False) -> str:
    """Step ②: the target's p of the draft. Greedy: whether it is the target's top choice (the warped p is 1 or
    0), with the plain softmax probability beside it."""
    if not greedy:
        return f"p = {fmt(d.p)}"
    if narrow:
        top = "top ✓" if d.p >= 1 else "not top"
        return top + (f"<br>softmax<br>{fmt(d.p_raw, 2)}" if d.p_raw is not None else "")
    top = "the target's<br>top choice" if d.p >= 1 else "not the target's<br>top choice"
    return top + (f"<br>(softmax p {fmt(d.p_raw)})" if d.p_raw is not None else "")


def _subtitle(it: IterationRecord, greedy: bool, decided: bool, coupled: bool = False) -> str:
    """What the iteration did; before step ③ only what was drafted and that one forward verifies it."""
    n = len(it.drafts)
    verify = f"ONE target forward verifies them ({it.verify_ms:.0f} ms)"
    if it.tree is not None:
        t = it.tree
        if not decided:
            return html.escape(f"A token tree of {len(t.nodes)} nodes; {verify}; the tree figure below shows every "
                               "node", quote=False)
        tested = sum(nd.status != "untested" for nd in t.nodes)
        rule = t.rule.replace("_", " ")
        path = f"the path of {n} accepted shown as a chain" if n else "no child of the root accepted"
        ends = _ending(it, greedy, coupled)
        m = len(it.emitted)
        return html.escape(f"A token tree of {len(t.nodes)} nodes ({tested} tested, rule “{rule}”): {path},",
                           quote=False) + "<br>" + html.escape(
            f"then {ends} → {m} token{'s' if m != 1 else ''} from ONE target forward ({it.verify_ms:.0f} ms); "
            "the tree figure below shows every node", quote=False)
    if not decided:
        return f"K = {it.k}: {n} draft{'s' if n != 1 else ''}, then {verify}"
    accepted = sum(d.accepted for d in it.drafts)
    m = len(it.emitted)
    return (f"K = {it.k}: {accepted} of {n} drafts accepted, then {_ending(it, greedy, coupled)} → {m} token"
            f"{'s' if m != 1 else ''} from ONE target forward ({it.verify_ms:.0f} ms)")


def _ending(it: IterationRecord, greedy: bool, coupled: bool = False) -> str:
    return ("no extra token" if it.resampled is None and it.bonus is None else "a bonus token" if it.bonus is not None
            else "the target's choice (argmax p)" if greedy else "the target's own sample (coupled rule)" if coupled
            else "a resampled token")
