"""What a class's pages show, as pure builders: the class's guesses against what the run measured (one figure, a
pure function of (truth, judged guesses)), and the small HTML blocks around it — the join code and its QR, the
presenter's count, a student's one-line status, the class's summary of a Reveal. Every text is escaped here.

The figure:

- Numeric guesses: a histogram (one bar per slider value, or bins of a few values on a fine slider), stacked by
  verdict (right, can't tell, wrong), the measured value as a line and the band a guess counts in (its 95 %
  interval, or the chapter's tolerance) shaded; whole-number answers judged exactly (K, drafts kept) mark the
  right value on the axis instead.
- Choice guesses: one bar per answer offered, the right ones marked ✓.
The title says how many guessed and how many were right. ``truth`` is any object with the fields of
``pages.learn.reveal.Truth`` (value, low, high, right, label).
"""
from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import plotly.graph_objects as go

from components.render import palette as pal
from components.render.base import apply_layout

RIGHT, WRONG, CANT_TELL = "right", "wrong", "can't tell"      # the verdicts of pages.learn.reveal
ORDER = ((RIGHT, "right", pal.ACCEPTED), (CANT_TELL, "can't tell", pal.RESAMPLED), (WRONG, "not this time", pal.REJECTED))
MAX_BARS = 24             # a finer slider is binned
HEIGHT = 360


class TruthLike(Protocol):
    value: float | None
    low: float | None
    high: float | None
    right: tuple[Any, ...]
    label: str


def _title(judged: Sequence[tuple[Any, str | None]], truth: TruthLike) -> tuple[str, str]:
    n = len(judged)
    right = sum(v == RIGHT for _, v in judged)
    head = f"The class's guesses: {n} in, {right} right" if n else "The class's guesses: none came in"
    sub = f"measured: {html.escape(truth.label)}" if truth.label else ""
    return head, sub


def _bin(step: float, lo: float, hi: float) -> float:
    """The width of a bar: the slider's step, or a few steps when that would make more than ``MAX_BARS`` bars."""
    if step <= 0 or not math.isfinite(step):
        step = (hi - lo) / MAX_BARS or 1.0
    n = max(1, math.ceil((hi - lo) / step + 1e-9) + 1)
    return step * max(1, math.ceil(n / MAX_BARS))


def class_histogram(truth: TruthLike, judged: Sequence[tuple[Any, str | None]], choices: Sequence[str] = (),
                    minimum: float = 0.0, maximum: float = 1.0, step: float = 1.0) -> go.Figure:
    """The class's ``judged`` guesses ((guess, verdict) pairs) against ``truth``; ``choices`` for a choice guess,
    else the slider's ``minimum``, ``maximum`` and ``step``."""
    head, sub = _title(judged, truth)
    fig = go.Figure()
    if choices:
        shown = [f"{c} ✓" if c in truth.right else c for c in choices]
        for verdict, name, colour in ORDER:
            counts = Counter(g for g, v in judged if v == verdict)
            if any(counts.values()):
                fig.add_bar(x=shown, y=[counts.get(c, 0) for c in choices], name=name, marker_color=colour,
                            hovertemplate="%{x}: %{y}<extra>" + name + "</extra>")
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=shown)
    else:
        width = _bin(step, minimum, maximum)
        exact = bool(truth.right) and truth.low is None

        def centre(g: float) -> float:
            return minimum + round((g - minimum) / width) * width
        for verdict, name, colour in ORDER:
            counts = Counter(round(centre(float(g)), 9) for g, v in judged if v == verdict)
            if counts:
                xs = sorted(counts)
                fig.add_bar(x=xs, y=[counts[x] for x in xs], width=width * 0.9, name=name, marker_color=colour,
                            hovertemplate="%{x}: %{y}<extra>" + name + "</extra>")
        if truth.low is not None and truth.high is not None:
            fig.add_vrect(x0=truth.low, x1=truth.high, fillcolor=pal.ACCEPTED, opacity=0.13, line_width=0,
                          layer="below")
        if truth.value is not None:
            fig.add_scatter(x=[truth.value, truth.value], y=[0, 1], yaxis="y2", mode="lines", name="measured",
                            line={"color": pal.THEORY, "width": 3, "dash": "dash"}, hoverinfo="skip")
            fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True})
        pad = width / 2
        seen = [x for x in (truth.value, truth.low, truth.high) if x is not None and math.isfinite(x)]
        fig.update_xaxes(range=[min([minimum, *seen]) - pad, max([maximum, *seen]) + pad],
                         title_text="guess" + (" (✓ = the right answer)" if exact else ""))
        if exact:
            ticks = [minimum + i * step for i in range(round((maximum - minimum) / step) + 1)]
            fig.update_xaxes(tickvals=ticks, ticktext=[f"{t:g} ✓" if t in truth.right else f"{t:g}" for t in ticks])
    fig.update_layout(barmode="stack", bargap=0.1)
    fig.update_yaxes(title_text="students", rangemode="tozero", tickformat="d", dtick=max(1, len(judged) // 8) or 1)
    return apply_layout(fig, head, HEIGHT, sub)


# --- the HTML around it -----------------------------------------------------------------------------------

CSS = """
.sd-class-code { font-size: 22px; margin: 2px 0; }
.sd-class-code b { font-family: ui-monospace, Menlo, Consolas, monospace; letter-spacing: 2px; font-size: 30px; }
.sd-class-join { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; }
.sd-class-join p { margin: 2px 0; font-size: 16px; overflow-wrap: anywhere; }
.sd-class-qr { image-rendering: pixelated; background: #fff; }
.sd-class-count { font-size: 20px; margin: 2px 0; }
.sd-class-status { font-size: 16px; padding: 6px 10px; border-radius: 6px; background: #f4f4f4; margin: 2px 0;
                   overflow-wrap: anywhere; }
.sd-class-problem { border-left: 5px solid #D55E00; }
.sd-class-ok { border-left: 5px solid #009E73; }
.sd-class-wait { border-left: 5px solid #777; }
body.sd-presenter .sd-class-code { font-size: 30px !important; }
body.sd-presenter .sd-class-code b { font-size: 44px !important; }
body.sd-presenter .sd-class-count { font-size: 28px !important; }
"""


def code_html(shown: str) -> str:
    """The join code as a projector shows it."""
    return f'<p class="sd-class-code">Class code: <b>{html.escape(shown)}</b></p>'


def join_html(link: str, qr: str) -> str:
    """The join link in words next to its QR code (``qr``: an ``<img>`` from ``render.qr``)."""
    return (f'<div class="sd-class-join">{qr}<div><p>Students: scan the code, or open</p>'
            f'<p><b>{html.escape(link)}</b></p><p>and guess on your phone.</p></div></div>')


def count_html(students: int, guesses: int, phase: str = "", minutes_left: float | None = None) -> str:
    """The presenter's count: guesses in of the students in, the phase in words, the room's time left."""
    left = f" · {minutes_left:.0f} min left" if minutes_left is not None else ""
    say = f" · {html.escape(phase)}" if phase else ""
    return (f'<p class="sd-class-count">Guesses in: <b>{guesses}</b> of <b>{students}</b> '
            f'student{"s" if students != 1 else ""}{say}{left}</p>')


def status_html(text: str, kind: str = "wait") -> str:
    """One line for a student (or the presenter): ``kind`` "ok", "wait" or "problem" colours its edge."""
    return f'<p class="sd-class-status sd-class-{html.escape(kind)}" role="status">{html.escape(text, quote=False)}</p>'


def _class_words(total: int, right: int) -> str:
    return f"{total} guess{'es' if total != 1 else ''} in, {right} right" if total else "no guesses came in"


def roster_choices(students: Sequence[Any]) -> list[tuple[str, int]]:
    """The presenter's list of students, for a dropdown: (label, handle); the label is the nickname (as text: the
    dropdown draws it as text) or "student N", and whether they answered this run."""
    return [(f"{s.nickname or f'student {s.handle}'} (#{s.handle}){' ✓' if s.answered else ''}", s.handle)
            for s in students]


_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])")


def text_html(markdown: str) -> str:
    """A chapter's text (the lesson's own markdown: paragraphs, **bold**, *italic*) as HTML, escaped first."""
    paragraphs = [p.strip() for p in markdown.split("\n\n") if p.strip()]
    out = []
    for p in paragraphs:
        body = _ITALIC.sub(r"<em>\1</em>", _BOLD.sub(r"<strong>\1</strong>", html.escape(p, quote=False)))
        out.append(f"<p>{body}</p>")
    return "".join(out)


def summary_html(measured: str, judged: str, why: str, extra: str, total: int, right: int) -> str:
    """The class's Reveal: what the run measured, how many of the class were right, how a guess was judged, why;
    ``extra`` is HTML already escaped by its builder (the chapter's answer adds it)."""
    class_line = _class_words(total, right)
    rule = f'<p class="sd-learn-judged">{html.escape(judged)}</p>' if judged else ""
    return (f'<div class="sd-learn-reveal sd-class-summary"><p><b>This run:</b> {html.escape(measured)} &nbsp;·&nbsp; '
            f'<b>The class:</b> {html.escape(class_line)}</p>{rule}'
            f'<p class="sd-learn-why">Why: {html.escape(why)}</p></div>{extra}')


__all__ = ["class_histogram", "TruthLike", "RIGHT", "WRONG", "CANT_TELL", "CSS", "code_html", "join_html",
           "count_html", "status_html", "summary_html", "text_html", "roster_choices"]
