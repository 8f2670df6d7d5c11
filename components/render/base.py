"""What every figure shares: the house layout (``apply_layout``, and ``house_layout`` under it for the teaching
figures), the house template (``HOUSE_TEMPLATE``), the message figure for "nothing to show yet"
(``empty_figure``), safe model text (``plot_text``), and which iteration a view shows (``resolve_index``, the
most instructive one a finished run opens on: ``instructive_index``).

The layout is built to stay legible at any font size and width, since the page lays the same figures out again
at projector sizes in presenter mode (``pages/figures_js.py``): the title sits just above the plot area and pushes
the top margin (``title.automargin``), every axis pushes its margin for its tick labels and title (the template's
``automargin``), and a legend below the plot is anchored to the bottom of the figure (``yref="container"``), where
Plotly reserves its height in addition to the axes' room, so no legend can land on an axis title or wrap onto one.
"""
from __future__ import annotations

import html
import textwrap

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.trace import IterationRecord

from components.render import palette as pal

HEIGHT = 390
TITLE_SIZE = 16
FONT_SIZE = 13
TITLE_TOP = 6             # px above the title (its text box reaches a little above the height Plotly gives it)
TITLE_GAP = 10            # px between the title (its last line) and the plot area
ABOVE_GAP = 28            # the same when the figure writes something just above its plot (subplot titles, verdicts)

# The house template: only what the figures rely on (plotly's default template is ~7 KB of JSON in every figure,
# about 400 KB of the page when gradio inlines the initial figures). Okabe-Ito colours; every axis makes room
# for its tick labels and title (automargin).
_AXIS = {"automargin": True, "title": {"standoff": 10}, "showgrid": True, "gridcolor": "#e6e6e6", "zeroline": False,
         "linecolor": "#888", "ticks": ""}
HOUSE_TEMPLATE = go.layout.Template(
    layout={"colorway": [pal.TARGET, pal.DRAFT, pal.ACCEPTED, pal.REJECTED, pal.BONUS, pal.BASELINE, pal.THEORY],
            "font": {"family": pal.FONT, "size": FONT_SIZE, "color": "#222"}, "paper_bgcolor": "white",
            "plot_bgcolor": "white", "hovermode": "closest", "hoverlabel": {"align": "left", "font": {"size": 13}},
            "autotypenumbers": "strict", "xaxis": _AXIS, "yaxis": _AXIS,
            "annotationdefaults": {"arrowcolor": "#333", "arrowhead": 0, "arrowwidth": 1},
            "shapedefaults": {"line": {"color": "#333"}}},
    data={"bar": [go.Bar(error_x={"color": "#333"}, error_y={"color": "#333"},
                         marker={"line": {"color": "white", "width": 0.5},
                                 "pattern": {"fillmode": "overlay", "size": 10, "solidity": 0.2}})],
          "heatmap": [go.Heatmap(colorbar={"outlinewidth": 0, "ticks": ""})]})

# Where a legend goes. "below": under the plot, anchored to the figure's bottom edge (its rows reserved in the
# bottom margin, below the x axis's own room); "right": beside the plot (it pushes the right margin).
LEGENDS = {
    "below": {"orientation": "h", "xref": "container", "x": 0.01, "xanchor": "left", "yref": "container", "y": 0.0,
              "yanchor": "bottom", "itemsizing": "constant"},
    "right": {"orientation": "v", "yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.02, "itemsizing": "constant"},
}


def plot_text(text: str, limit: int = 24) -> str:
    """A token as a short, visible, HTML-escaped label: spaces as '␣', newlines as '↵'."""
    shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return html.escape(shown or "∅", quote=False)


def title_spec(text: str, above: bool = False) -> dict:
    """The title: at the left, its last line ``TITLE_GAP`` px above the plot area (``ABOVE_GAP`` when ``above``:
    room for what a figure writes just above its plot), pushing the top margin to fit however many lines it has
    (the page wraps a title that is too wide for its figure, ``pages/figures_js.py``)."""
    return {"text": text, "x": 0.01, "xanchor": "left", "xref": "container", "y": 1.0, "yref": "paper",
            "yanchor": "bottom", "automargin": True, "pad": {"t": TITLE_TOP, "b": ABOVE_GAP if above else TITLE_GAP},
            "font": {"size": TITLE_SIZE}}


def writes_above(fig: go.Figure) -> bool:
    """Whether the figure has text just above its plot area: an annotation at or above the top of the paper
    (subplot titles, the verdict row of p vs q)."""
    return any((a.yref or "y").endswith("paper") and a.y is not None and a.y >= 1.0 for a in fig.layout.annotations)


def house_layout(fig: go.Figure, text: str, height: int, legend: str | None = "below", **kw) -> go.Figure:
    """The house look under ``apply_layout`` and the teaching figures: the template, the title ``text`` (HTML,
    escaped by the caller), the height, the legend placed as ``LEGENDS[legend]`` (None: Plotly's own), small
    margins that the title, axes and legend grow as they need."""
    fig.layout.template = HOUSE_TEMPLATE
    layout = {"title": title_spec(text, writes_above(fig)), "height": height,
              "margin": {"l": 10, "r": 20, "t": 10, "b": 10}, "font": {"family": pal.FONT, "size": FONT_SIZE,
                                                                     "color": "#222"}}
    if legend is not None:
        layout["legend"] = LEGENDS[legend]
    fig.update_layout(**layout, **kw)
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def apply_layout(fig: go.Figure, title: str, height: int = HEIGHT, subtitle: str = "", **kw) -> go.Figure:
    """Shared look: title (and an escaped-by-caller subtitle) on top, legend under the plot, large fonts."""
    text = f"{title}<br><sup>{subtitle}</sup>" if subtitle else title
    return house_layout(fig, text, height, **kw)


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
