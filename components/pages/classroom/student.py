"""A student's page of a class (``/class?class=CODE``; the app's ``?class=CODE`` leads there), phone first: the
chapter the presenter is on, the presenter's run (drawn from the figures the room made once; a student never runs
a model), the guess and **Send**, then the answer and the class's histogram once the presenter reveals.

The handlers are module-level functions (the room store passed in) that the tests call without a browser:
``join_class`` (on load, or the code typed in), ``poll_class`` (the page's gr.Timer: one cheap look at the room's
stage, answering "nothing new" with gr.skip() for every output unless it changed) and ``send_guess``. They
return tuples in the order of ``OUTPUTS``; ``render_view`` turns the room's ``StudentView`` (all a student is
ever sent: it has no place for the presenter's secret) into those updates, sending only what changed (the
figures when the run or the Reveal changes, the guess control when the chapter or run does).

The student's id is kept in the browser's storage (``ids``: per class code), so a reload joins as the same
student and sees the guess it sent. A student's page has no control that moves the class: no Run, Reveal, Back or
Next (``.learn-run``, ``.learn-reveal``, ``.learn-prev``, ``.learn-next`` are absent); ``learn-title``,
``.learn-chapter``, ``.learn-text``, ``.learn-note``, ``.learn-plot``, ``.learn-guess`` and ``.learn-answer``
mean what they mean on the Learn tab. Ids: ``class-status`` (one line: the phase, the student's guess, or a
refusal), ``class-send``, ``class-histogram``, ``class-join-form``, ``class-live-run``.
"""
from __future__ import annotations

from typing import Any

import gradio as gr
from gradio.components.plot import PlotData

from components.pages.classroom.publish import (REVEAL_FIGURE, WAIT_FIGURE, check_guess, class_chapter,
                                                placeholder_json)
from components.pages.learn.book import N_PLOTS
from components.pages.learn.nav import title_html
from components.pages.learn.tab import N
from components.render.classroom import class_line_html, setting_html, status_html
from components.serving.classroom import LOCKED, OPEN, REVEALED, WAITING, RoomError, RoomStore, StudentView
from components.serving.classroom.codes import STUDENT_BYTES, check_token, parse_code, shown_code

POLL_S = 1.0                 # the page asks for the room's stage this often (docs/classroom.md: what it costs)
MAX_KEPT = 8                 # classes whose student id the browser keeps
OUTPUTS = ("title", "status", "chapter", "text", "note", "plot1", "slider", "radio", "send", "answer", "histogram",
           "plot2", "live", "live_html", "live_plot", "form", "timer", "me", "ids")
N_OUT = len(OUTPUTS)
AT = {name: i for i, name in enumerate(OUTPUTS)}
ASK_CODE = "Type the class code your presenter shows (8 letters and digits), then Join."


def _plot(json_text: str | None, visible: bool = True) -> Any:
    return gr.Plot(value=PlotData(type="plotly", plot=json_text) if json_text else None, visible=visible)


def _updates(**named: Any) -> tuple:
    """A tuple of every output: the named updates, gr.skip() for the rest."""
    out = [gr.skip()] * N_OUT
    for name, value in named.items():
        out[AT[name]] = value
    return tuple(out)


def _status(view: StudentView) -> str:
    mine = view.guess
    sent = f" Your guess: {mine} (sent)." if mine is not None else ""
    where = f"Class {shown_code(view.code)} · chapter {view.chapter}: "
    if view.phase == WAITING:
        return status_html(where + "wait for your presenter's run, then guess here.", "wait")
    if view.phase == OPEN:
        change = " You can change it until your presenter locks guesses." if mine is not None else ""
        return status_html(where + ("guess, then Send." if mine is None else "guessing is open.") + sent + change, "ok")
    if view.phase == LOCKED:
        return status_html(where + "guesses are locked." + (sent or " You sent no guess this time."), "wait")
    return status_html(where + "the answer is out." + (sent or " You sent no guess this time."), "ok")


def _note(view: StudentView) -> str:
    if view.shown is None:
        return '<div class="sd-learn-note"><p>Waiting for your presenter to run this chapter.</p></div>'
    setting = setting_html(view.shown.setting) if view.shown.setting else ""
    return setting + view.shown.note


def _figures(view: StudentView) -> list[str]:
    """The figures a student sees: the Reveal's where it drew one, else the run's, else the slot's placeholder."""
    title = class_chapter(view.chapter).title
    shown = list(view.shown.figures) if view.shown is not None else []
    shown = (shown + [None] * N_PLOTS)[:N_PLOTS]
    revealed = (list(view.revealed_figures) + [None] * N_PLOTS)[:N_PLOTS]
    wait = WAIT_FIGURE if view.shown is None else REVEAL_FIGURE
    return [r or s or placeholder_json(title, wait) for r, s in zip(revealed, shown)]


def _answer(view: StudentView) -> str:
    """A student's own answer and the class's count; the class's summary for one who sent no guess."""
    return view.answer + class_line_html(view.total, view.right) if view.answer else view.summary


def _guess_controls(view: StudentView, configure: bool) -> tuple[Any, Any]:
    """(slider, radio): the chapter's guess control shown and set (``configure``: a new chapter or run), the other
    hidden; only while guessing is open can they be moved."""
    g = class_chapter(view.chapter).guess
    open_ = view.phase == OPEN
    label = f"your guess: {g.label}"
    if not configure:
        return (gr.Slider(interactive=open_) if not g.choices else gr.skip(),
                gr.Radio(interactive=open_) if g.choices else gr.skip())
    if g.choices:
        mine = view.guess if view.guess in g.choices else None
        return gr.Slider(visible=False), gr.Radio(choices=list(g.choices), value=mine, label=label, visible=True,
                                                  interactive=open_)
    mine = view.guess if isinstance(view.guess, (int, float)) else g.minimum
    return (gr.Slider(minimum=g.minimum, maximum=g.maximum, step=g.step, value=mine, label=label, visible=True,
                      interactive=open_), gr.Radio(visible=False, value=None))


def render_view(view: StudentView, student: str, seen: Any = None) -> tuple:
    """The page's updates for ``student``'s ``view``, given what it last drew (``seen``: the ``me`` it holds, or
    None on joining)."""
    prev = seen if isinstance(seen, dict) and seen.get("code") == view.code else {}
    first = not prev
    new_chapter = first or prev.get("chapter") != view.chapter
    new_run = new_chapter or prev.get("run_no") != view.run_no
    revealed = view.phase == REVEALED and view.histogram is not None
    new_reveal = new_run or prev.get("revealed") != revealed
    ch = class_chapter(view.chapter)
    named: dict[str, Any] = {"status": _status(view), "note": _note(view), "send": gr.Button(interactive=view.phase == OPEN)}
    if new_chapter:
        named.update(title=title_html(view.chapter, N, ch.title), text=ch.text)
    named["slider"], named["radio"] = _guess_controls(view, new_run)
    if new_reveal:
        plot1, plot2 = _figures(view)
        named.update(plot1=_plot(plot1), plot2=_plot(plot2),
                     answer=_answer(view) if revealed else "",
                     histogram=_plot(view.histogram, True) if revealed else gr.Plot(visible=False))
    if first or prev.get("live_no") != view.live_no:
        live = view.live
        named.update(live=gr.Column(visible=live is not None))
        if live is not None:
            named.update(live_html=live.html, live_plot=_plot(live.figure))
    if first:
        named.update(chapter=gr.Column(visible=True), form=gr.Column(visible=False), timer=gr.Timer(active=True))
    named["me"] = {"code": view.code, "student": student, "stage": view.stage, "chapter": view.chapter, "run_no": view.run_no, "live_no": view.live_no,
                   "revealed": revealed}
    return _updates(**named)


def _refused(message: str, gone: bool) -> tuple:
    """A refusal in one line; a room that is gone stops the polling and offers the code form again."""
    if not gone:
        return _updates(status=status_html(message, "problem"))
    return _updates(status=status_html(message, "problem"), form=gr.Column(visible=True), timer=gr.Timer(active=False),
                    chapter=gr.Column(visible=False), me=None)


def _kept(ids: Any) -> dict:
    """The browser's stored ids, as far as they are well formed: {"last": code, "ids": {code: student}}."""
    ids = ids if isinstance(ids, dict) else {}
    kept = ids.get("ids") if isinstance(ids.get("ids"), dict) else {}
    return {"last": ids.get("last") if isinstance(ids.get("last"), str) else None,
            "ids": {c: s for c, s in list(kept.items())[-MAX_KEPT:] if isinstance(c, str) and isinstance(s, str)}}


def join_class(store: RoomStore, raw_code: Any, ids: Any = None) -> tuple:
    """Join the class ``raw_code`` names (from the link, or typed), as the student this browser was in it before
    (``ids``: the browser's stored ids), else as a new one; the room's current state drawn (a late joiner sees
    the run and the answer as they are). Without a code: the last class this browser joined, else the code form."""
    kept = _kept(ids)
    quiet = raw_code is None or raw_code == ""
    if quiet:
        if kept["last"] is None:
            return _updates(status=status_html(ASK_CODE, "wait"), form=gr.Column(visible=True))
        raw_code = kept["last"]
    try:
        code = parse_code(raw_code)
        student = store.join(code, kept["ids"].get(code))
        view = store.student_view(code, student)
    except ValueError as e:
        return _refused(f"{str(e)[:1].upper()}{str(e)[1:]}.", True)
    except RoomError as e:
        return _refused(ASK_CODE if quiet else str(e), True)
    ids_out = {"last": code, "ids": {**{c: s for c, s in kept["ids"].items() if c != code}, code: student}}
    return (*render_view(view, student)[:-1], ids_out)


def _me(me: Any) -> tuple[str, str] | None:
    if not isinstance(me, dict):
        return None
    try:
        return parse_code(me.get("code")), check_token(me.get("student"), "student id", STUDENT_BYTES)
    except ValueError:
        return None


def poll_class(store: RoomStore, me: Any) -> tuple:
    """The page's timer: the room's stage, and the page's updates only when it changed (else gr.skip() for all)."""
    who = _me(me)
    if who is None:
        return _updates()
    code, student = who
    try:
        if store.stage(code) == me.get("stage"):
            return _updates()
        view = store.student_view(code, student)
    except RoomError as e:
        return _refused(str(e), e.gone)
    return render_view(view, student, me)


def send_guess(store: RoomStore, me: Any, slider: Any = None, radio: Any = None) -> str:
    """Send the guess on the control the chapter uses, for the run the page shows: the status line (what was sent,
    or why not)."""
    who = _me(me)
    if who is None:
        return status_html("This page has not joined a class: open the class's link, or type its code.", "problem")
    code, student = who
    try:
        ch = class_chapter(me.get("chapter"))
        value = check_guess(ch.guess, radio if ch.guess.choices else slider)
        store.guess(code, student, me.get("chapter"), me.get("run_no"), value)
    except ValueError as e:
        return status_html(f"Not sent: {e}.", "problem")
    except RoomError as e:
        return status_html(f"Not sent: {e}", "problem")
    return status_html(f"Sent: {value}. You can change it until your presenter locks guesses.", "ok")


__all__ = ["POLL_S", "OUTPUTS", "N_OUT", "AT", "ASK_CODE", "render_view", "join_class", "poll_class", "send_guess"]
