"""What every figure shares: the house layout (``apply_layout``), the message figure for "nothing to show yet"
(``empty_figure``), safe model text (``plot_text``), and which iteration a view shows (``resolve_index``, the
most instructive one a finished run opens on: ``instructive_index``)."""
from __future__ import annotations

import html
import textwrap

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.trace import IterationRecord

from components.render import palette as pal

HEIGHT = 390


def plot_text(text: str, limit: int = 24) -> str:
    """A token as a short, visible, HTML-escaped label: spaces as '␣', newlines as '↵'."""
    shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return html.escape(shown or "∅", quote=False)


def apply_layout(fig: go.Figure, title: str, height: int = HEIGHT, subtitle: str = "", **kw) -> go.Figure:
    """Shared look: title (and an escaped-by-caller subtitle) on top, legend under the plot, large fonts."""
    text = f"{title}<br><sup>{subtitle}</sup>" if subtitle else title
    fig.update_layout(
        title={"text": text, "x": 0.01, "xanchor": "left", "font": {"size": 16}},
        height=height, margin={"l": 60, "r": 20, "t": 70 if subtitle else 50, "b": 105},
        font={"family": pal.FONT, "size": 13, "color": "#222"},
        paper_bgcolor="white", plot_bgcolor="white",
        legend={"orientation": "h", "yanchor": "top", "y": -0.3, "xanchor": "left", "x": 0.0},
        hoverlabel={"font": {"size": 13}}, **kw)
    fig.update_xaxes(showgrid=True, gridcolor="#e6e6e6", zeroline=False, linecolor="#888")
    fig.update_yaxes(showgrid=True, gridcolor="#e6e6e6", zeroline=False, linecolor="#888")
    return fig


def no_drafts_message(trace: Trace, it: IterationRecord) -> str:
    """Why an iteration verified no drafts: K was 0, or the drafter's recorded reason (older traces, which
    do not record one: the draft's confidence stop, or no n-gram match)."""
    if it.k == 0:
        why = "K was 0"
    elif it.draft_stop:
        why = it.draft_stop
    elif trace.config.get("drafter") != "ngram" and (trace.config.get("confidence_stop") or 0) > 0:
        why = "the draft's confidence in its first token was below the confidence stop"
    else:
        why = "no n-gram match"
    return f"The drafter proposed nothing this iteration ({why}): the target emitted one token on its own."


def empty_figure(title: str, message: str, height: int = HEIGHT) -> go.Figure:
    """A blank figure that says why it is blank."""
    fig = go.Figure()
    wrapped = "<br>".join(textwrap.wrap(html.escape(message, quote=False), 64))
    fig.add_annotation(text=wrapped, x=0.5, y=0.5, xref="paper", yref="paper",
                       showarrow=False, font={"size": 15, "color": "#555"})
    apply_layout(fig, title, height)
    fig.update_layout(margin={"b": 20})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def resolve_index(trace: Trace, index: int | None) -> int | None:
    """The iteration to show: ``index`` clamped into range, the last one when None, None when there are none."""
    n = len(trace.iterations)
    if n == 0:
        return None
    if index is None:
        return n - 1
    return min(max(int(index), 0), n - 1)


def is_greedy(trace: Trace) -> bool:
    """Temperature 0: p and q are one-hot at their argmax, a draft is kept iff it is the target's argmax, and a
    rejected draft is replaced by the target's own choice (no residual is drawn)."""
    return trace.config.get("temperature", 0) == 0


def instructive_index(trace: Trace) -> int | None:
    """The iteration a finished run opens on: in a run with token trees, the first tree whose accepted path has
    two nodes or more; else the first with a rejection (p vs q, the residual and the anatomy all have something
    to show), else the first with drafts, else the last; None when there is none."""
    its = trace.iterations
    tree = next((it.index for it in its if it.tree is not None and len(it.tree.path) >= 2), None)
    if tree is not None:
        return tree
    rejected = next((it.index for it in its if any(d.tested and not d.accepted for d in it.drafts)), None)
    if rejected is None:
        rejected = next((it.index for it in its if it.drafts), None)
    return rejected if rejected is not None else resolve_index(trace, None)


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for a figure's labels; "–" for none. A value too small for ``digits`` decimals keeps one
    significant digit (a sampled token's q of 0.0004 is not "0.000")."""
    if x is None:
        return "–"
    return f"{x:.1g}" if 0 < abs(x) < 0.5 * 10 ** -digits else f"{x:.{digits}f}"
