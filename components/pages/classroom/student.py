"""A student's page of a class (``/class?class=CODE``; the app's ``?class=CODE`` leads there), phone first: the
chapter the presenter is on, the presenter's run (drawn from the figures the room made once; a student never runs
a model), the guess and **Send**, then the answer and the class's histogram once the presenter reveals.

Following the room costs the server little. The page's gr.Timer runs a script in the browser that asks the app's
``/class/stage`` route (``serving.classroom.http``) for the room's stage key (a counter the store bumps on every
change a student sees) and puts it in a hidden box: unchanged ("nothing new"), nothing happens, no gradio event is
sent and nothing is redrawn; changed, the box's change event asks ``refresh_class`` for the page: one event, its
outputs plain values (the texts, the figures as the JSON the room made once, the guess control's value). A gradio
update, even gr.skip(), costs the server a new component and its config for every output (measured: ≈ 2 ms per
output, against ≈ 0.4 ms for a value), so the guess control is set up with updates only when the chapter changed.

The handlers are module-level functions (the room store passed in) that the tests call without a browser:
``join_class`` (on load, or the code typed in), ``refresh_class``, ``live_of``, ``stop_following`` and
``send_guess``; each returns a tuple in the order of its outputs (``JOIN``, ``REFRESH``, ``LIVE``, ``STOP``). They build from the room's ``StudentView`` only (all a student is
ever sent: it has no place for the presenter's secret).

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
from components.serving.classroom.http import GONE, stage_key

POLL_S = 1.0                 # the page asks for the room's stage this often (docs/classroom.md: what it costs)
MAX_KEPT = 8                 # classes whose student id the browser keeps
ASK_CODE = "Type the class code your presenter shows (8 letters and digits), then Join."
HISTOGRAM_WAIT = "The class's guesses are drawn here when your presenter reveals the answer."
JOIN = ("status", "chapter", "form", "timer", "me", "ids", "code", "stage")
REFRESH = ("title", "status", "text", "note", "plot1", "slider", "radio", "answer", "histogram", "plot2", "me",
           "touched", "live_key", "gone")
LIVE = ("live", "live_html", "live_plot")
STOP = ("timer", "form", "chapter")


def _plot(json_text: str) -> PlotData:
    return PlotData(type="plotly", plot=json_text)


# --- what a view shows -------------------------------------------------------------------------------------------

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


def _answer(view: StudentView) -> str:
    """After a Reveal: a student's own answer and the class's count, or the class's summary for one who sent no
    guess; before it, nothing."""
    if view.phase != REVEALED or view.histogram is None:
        return ""
    return view.answer + class_line_html(view.total, view.right) if view.answer else view.summary


def _revealed(view: StudentView) -> bool:
    return view.phase == REVEALED and view.histogram is not None


def _me(view: StudentView, student: str, drawn: bool = True) -> dict:
    """What the page holds of its class: the code, its student id, and (``drawn``) the chapter and run it shows."""
    me = {"code": view.code, "student": student}
    return {**me, "chapter": view.chapter, "run_no": view.run_no} if drawn else me


# --- the handlers ----------------------------------------------------------------------------------------------

def _kept(ids: Any) -> dict:
    """The browser's stored ids, as far as they are well formed: {"last": code, "ids": {code: student}}."""
    ids = ids if isinstance(ids, dict) else {}
    kept = ids.get("ids") if isinstance(ids.get("ids"), dict) else {}
    return {"last": ids.get("last") if isinstance(ids.get("last"), str) else None,
            "ids": {c: s for c, s in list(kept.items())[-MAX_KEPT:] if isinstance(c, str) and isinstance(s, str)}}


def _not_joined(message: str, kind: str = "problem") -> tuple:
    """JOIN's outputs for a page that is in no class: the line, the code form, no polling."""
    return (status_html(message, kind), gr.Column(visible=False), gr.Column(visible=True), gr.Timer(active=False),
            None, gr.skip(), "", GONE)


def join_class(store: RoomStore, raw_code: Any, ids: Any = None) -> tuple:
    """Join the class ``raw_code`` names (from the link, or typed), as the student this browser was in it before
    (``ids``: the browser's stored ids), else as a new one. Without a code: the last class this browser joined,
    else the code form. ``JOIN``'s outputs; the stage key it sets makes the page draw the room as it is (a late
    joiner sees the run and the answer)."""
    kept = _kept(ids)
    quiet = raw_code is None or raw_code == ""
    if quiet:
        if kept["last"] is None:
            return _not_joined(ASK_CODE, "wait")
        raw_code = kept["last"]
    try:
        code = parse_code(raw_code)
        student = store.join(code, kept["ids"].get(code))
        view = store.student_view(code, student)
    except ValueError as e:
        return _not_joined(f"{str(e)[:1].upper()}{str(e)[1:]}.")
    except RoomError as e:
        return _not_joined(ASK_CODE if quiet else str(e))
    ids_out = {"last": code, "ids": {**{c: s for c, s in kept["ids"].items() if c != code}, code: student}}
    return (_status(view), gr.Column(visible=True), gr.Column(visible=False), gr.Timer(active=True),
            _me(view, student, drawn=False), ids_out, code, stage_key(store, code))


def _who(me: Any) -> tuple[str, str] | None:
    if not isinstance(me, dict):
        return None
    try:
        return parse_code(me.get("code")), check_token(me.get("student"), "student id", STUDENT_BYTES)
    except ValueError:
        return None


def _figures(view: StudentView) -> tuple[PlotData, PlotData, PlotData]:
    """(figure 1, the class's histogram, figure 2): the Reveal's figure where it drew one, else the run's, else the
    slot's placeholder; the histogram a placeholder until the Reveal. Every one is JSON the room made once."""
    title = class_chapter(view.chapter).title
    shown = (list(view.shown.figures) if view.shown is not None else []) + [None] * N_PLOTS
    revealed = list(view.revealed_figures) + [None] * N_PLOTS
    wait = WAIT_FIGURE if view.shown is None else REVEAL_FIGURE
    plots = [r or s or placeholder_json(title, wait) for r, s in zip(revealed[:N_PLOTS], shown[:N_PLOTS])]
    histogram = view.histogram if _revealed(view) else placeholder_json("The class's guesses", HISTOGRAM_WAIT)
    return _plot(plots[0]), _plot(histogram), _plot(plots[1])


def _guess_controls(view: StudentView, configure: bool) -> tuple[Any, Any]:
    """(slider, radio): set to this student's guess on this run, else where the control starts. ``configure`` (another
    chapter): the chapter's control shown and set up, the other hidden (updates); otherwise their values only (plain
    values: a gradio update costs the server a new component per output)."""
    g = class_chapter(view.chapter).guess
    label = f"your guess: {g.label}"
    if g.choices:
        mine = view.guess if view.guess in g.choices else None
        if not configure:
            return 0, mine
        return (gr.Slider(minimum=0, maximum=1, step=1, value=0, visible=False),      # hidden, its value in bounds
                gr.Radio(choices=list(g.choices), value=mine, label=label, visible=True))
    mine = view.guess if isinstance(view.guess, (int, float)) else g.minimum
    if not configure:
        return mine, None
    return (gr.Slider(minimum=g.minimum, maximum=g.maximum, step=g.step, value=mine, label=label, visible=True),
            gr.Radio(visible=False, value=None))


def refresh_class(store: RoomStore, me: Any) -> tuple:
    """The room changed: ``REFRESH``'s outputs — the texts, the figures and the guess control's value as plain values
    (the control set up again only when the chapter changed since ``me``), and the Live run's key."""
    who = _who(me)
    if who is None:
        return (gr.skip(),) * len(REFRESH)
    try:
        view = store.student_view(*who)
    except RoomError as e:
        return (gr.skip(), status_html(str(e), "problem"), *(gr.skip(),) * (len(REFRESH) - 3), bool(e.gone))
    ch = class_chapter(view.chapter)
    configure = me.get("chapter") != view.chapter
    plot1, histogram, plot2 = _figures(view)
    slider, radio = _guess_controls(view, configure)
    return (title_html(view.chapter, N, ch.title), _status(view), ch.text, _note(view), plot1, slider, radio,
            _answer(view), histogram, plot2, _me(view, who[1]), view.guess is not None, f"{view.code}:{view.live_no}",
            False)


def live_of(store: RoomStore, me: Any) -> tuple:
    """``LIVE``: the presenter's Live run when one was pushed to the class."""
    who = _who(me)
    try:
        live = store.student_view(*who).live if who is not None else None
    except RoomError:
        live = None
    if live is None:
        return gr.Column(visible=False), gr.skip(), gr.skip()
    return gr.Column(visible=True), live.html, _plot(live.figure) if live.figure else None


def stop_following(gone: Any) -> tuple:
    """``STOP``: a room that is no more stops the polling and offers the code form again."""
    if gone is not True:
        return gr.skip(), gr.skip(), gr.skip()
    return gr.Timer(active=False), gr.Column(visible=True), gr.Column(visible=False)


NOT_TOUCHED = "Not sent: move the slider (or pick an answer) to your guess first."


def send_guess(store: RoomStore, me: Any, slider: Any = None, radio: Any = None, touched: Any = True) -> str:
    """Send the guess on the control the chapter uses, for the run the page shows: the status line (what was sent,
    or why not). A control the student has not moved on this run (``touched`` False, no guess sent yet) sends
    nothing: where a slider starts is nobody's guess."""
    who = _who(me)
    if who is None:
        return status_html("This page has not joined a class: open the class's link, or type its code.", "problem")
    if touched is not True:
        return status_html(NOT_TOUCHED, "problem")
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


__all__ = ["POLL_S", "ASK_CODE", "JOIN", "REFRESH", "LIVE", "STOP", "join_class", "refresh_class", "live_of",
           "stop_following", "send_guess"]
