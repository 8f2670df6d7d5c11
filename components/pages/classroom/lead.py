"""The presenter's side of a class, as thin module-level handlers (the room store passed in; the tests call them
without a browser): start a class, take it back after a reload, follow the room's count, lock guesses, reveal to
the class, follow the presenter's chapter, hand the presenter's Learn runs and a Live run to the room, end it.

The page holds what it leads as ``{"code", "secret"}``: in a gr.State for its events, in the browser's storage
(a reload keeps the room) and in the presenter's private link (``?presenter=1&lead=CODE.SECRET``, read once by the
page and taken out of the address bar, which a projector shows). Every handler hands the store the secret; the
store refuses without it, so a student's page, which never has it, cannot lead.

The handlers return tuples in the order of the page's outputs (``lead_page`` wires them):
``PANEL`` = (lead, stored lead, code, join, count, status, controls, start, link, timer, seen, lock).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr
from gradio.components.plot import PlotData

from specdec_core import Trace

from components.pages.classroom.publish import (REVEAL_FIGURE, class_chapter, figure_json, placeholder_json,
                                                question_of, reveal_for_class, setting_words)
from components.pages.classroom.publish import shown_run as make_shown
from components.pages.learn.book import N_PLOTS
from components.pages.learn.tab import N, go_to
from components.render.classroom import code_html, count_html, join_html, status_html
from components.render.figures import timeline_figure
from components.render.qr import qr_img
from components.render.tokens import tokens_html
from components.serving.classroom import (LOCKED, OPEN, REVEALED, WAITING, ChapterResult, LeadView, LiveShown,
                                          Revealed, RevealJob, RoomError, RoomStore)
from components.serving.classroom.codes import SECRET_BYTES, check_token, is_code, parse_code, shown_code
from components.serving.messages import page_warning
from components.serving.pairs import Pool

POLL_S = 1.0                 # the presenter's page asks for the room's version this often (the count)
MAX_BASE = 300
_BASE = re.compile(r"https?://[A-Za-z0-9.\-:\[\]]+(/[A-Za-z0-9._~%/-]*)?")
PHASE_WORDS = {WAITING: "waiting for your run", OPEN: "guessing open", LOCKED: "guesses locked",
               REVEALED: "revealed"}
N_PANEL = 12
LINK_LABEL = "Your presenter link (private: it leads this class from any browser; do not project it)"


def base_url(raw: Any) -> str:
    """The page's own address (as its browser reports it), without query or fragment; "" when it is not one."""
    if not isinstance(raw, str) or len(raw) > MAX_BASE:
        return ""
    raw = raw.split("?", 1)[0].split("#", 1)[0]
    return raw if _BASE.fullmatch(raw) else ""


def join_link(base: str, code: str) -> str:
    return f"{base}?class={code}" if base else f"?class={code}"


def lead_link(base: str, code: str, secret: str) -> str:
    return f"{base}?presenter=1&lead={code}.{secret}"


def read_lead(lead: Any) -> tuple[str, str]:
    """(code, secret) of what a page leads, or RoomError when it leads nothing (or holds something forged)."""
    if not isinstance(lead, dict):
        raise RoomError("This page leads no class: press Start a class (presenter mode, Learn tab).")
    try:
        return parse_code(lead.get("code")), check_token(lead.get("secret"), "presenter secret", SECRET_BYTES)
    except ValueError:
        raise RoomError("This page leads no class: press Start a class (presenter mode, Learn tab).") from None


def parse_lead_param(raw: Any) -> dict | None:
    """``CODE.SECRET`` from a presenter link, as a lead, or None when it is not one."""
    if not isinstance(raw, str) or "." not in raw or len(raw) > 100:
        return None
    code, _, secret = raw.partition(".")
    try:
        return {"code": parse_code(code), "secret": check_token(secret, "presenter secret", SECRET_BYTES)}
    except ValueError:
        return None


# --- the panel's state ----------------------------------------------------------------------------------------

def _skip_panel() -> tuple:
    return (gr.skip(),) * N_PANEL


def _panel(lead: dict, view: LeadView, base: str | None, message: str = "", kind: str = "ok") -> tuple:
    """The panel of a page that leads ``view``'s room; ``base`` (the page's address) None: the join link, its QR
    and the presenter link stay as they are."""
    code = view.code
    join = link = gr.skip()
    if base is not None:
        shown = join_link(base, code)
        join = join_html(shown, qr_img(shown, f"QR code of the class's link {shown}"))
        link = gr.Textbox(value=lead_link(base, code, lead["secret"]) if base else "", visible=bool(base))
    status = status_html(message, kind) if message else gr.skip()
    lock = gr.Button("Open guesses again" if view.phase == LOCKED else "Lock guesses",
                     interactive=view.phase in (OPEN, LOCKED))
    return (lead, lead, code_html(shown_code(code)), join, count_line(view), status, gr.Column(visible=True),
            gr.Row(visible=False), link, gr.Timer(active=True), shown_key(view), lock)


def shown_key(view: LeadView) -> str:
    """What the count line shows, as a key: it changes with the room (a join, a guess), its phase (a timer that ran
    out) and every second the timer counts down."""
    left = "" if view.timer_left is None else str(math.ceil(view.timer_left))
    return f"{view.version}|{view.phase}|{left}"


def count_line(view: LeadView) -> str:
    timer = f" · ⏱ {view.timer_left:.0f} s left" if view.timer_left is not None else ""
    return count_html(view.students, view.guesses,
                      f"chapter {view.chapter}: {PHASE_WORDS.get(view.phase, '')}{timer}", view.minutes_left)


def _lost(e: RoomError, code: Any = None) -> str:
    """A refusal in the presenter's words: a room that is gone has ended or expired (not "ask your presenter")."""
    if e.gone and is_code(code):
        return f"The class {shown_code(code)} has ended or expired: start a new one."
    return str(e)


def _no_class(message: str = "", kind: str = "problem") -> tuple:
    """The panel of a page that leads nothing (again): Start shown, the rest cleared."""
    return (None, None, "", "", "", status_html(message, kind) if message else "", gr.Column(visible=False),
            gr.Row(visible=True), gr.Textbox(value="", visible=False), gr.Timer(active=False), -1,
            gr.Button("Lock guesses"))


def start_class(store: RoomStore, base: Any, lead: Any = None, nicknames: Any = False, chapter: Any = 1) -> tuple:
    """Start a class: a room with its code, join link and QR (``base``: the page's address, from its browser;
    ``nicknames``: joining asks each student for one, else the class is anonymous), on the presenter's ``chapter``. A
    page that already leads a live room keeps it."""
    where = base_url(base)
    try:
        code, secret = read_lead(lead)
        view = store.lead(code, secret)
        return _panel({"code": code, "secret": secret}, view, where, "This page already leads this class.")
    except RoomError:
        pass
    try:
        code, secret = store.create(nicknames=nicknames is True)
        number = chapter if isinstance(chapter, int) and not isinstance(chapter, bool) and 1 <= chapter <= N else 1
        view = store.set_chapter(code, secret, question_of(number))
    except RoomError as e:
        return _no_class(str(e))
    return _panel({"code": code, "secret": secret}, view, where,
                  "Class started. Students join with the code or the QR; run a chapter and they see your run.")


def restore_lead(store: RoomStore, from_link: Any, stored: Any, base: Any) -> tuple:
    """On page load: the class this presenter leads, from their private link (``?lead=``) or from the browser's
    storage (a reload), with the page moved to the room's chapter: PANEL + the Learn navigation's updates. A link
    that leads nothing says so; a stale stored lead is dropped quietly."""
    where = base_url(base)
    linked = parse_lead_param(from_link)
    nav_skip = (gr.skip(),) * (2 + N)
    if from_link and linked is None:
        return (*_no_class("That presenter link is not one this server issued."), *nav_skip)
    for lead, said in ((linked, True), (stored, False)):
        if lead is None:
            continue
        try:
            code, secret = read_lead(lead)
            view = store.lead(code, secret)
        except RoomError as e:
            if said:
                return (*_no_class(_lost(e, lead.get("code") if isinstance(lead, dict) else None)), *nav_skip)
            continue
        lead = {"code": code, "secret": secret}
        return (*_panel(lead, view, where, "You lead this class again."), *go_to(view.chapter))
    if stored is not None:
        return (*_no_class(), *nav_skip)
    return (*_skip_panel(), *nav_skip)


def lead_poll(store: RoomStore, lead: Any, seen: Any) -> tuple:
    """The presenter's timer: the count again when the room changed (a student joined or guessed) or while the guess
    timer counts down, else nothing."""
    if not lead:
        return (*_skip_panel()[:-3], gr.Timer(active=False), gr.skip(), gr.skip())
    try:
        code, secret = read_lead(lead)
        view = store.lead(code, secret)
    except RoomError as e:
        return _no_class(_lost(e, lead.get("code") if isinstance(lead, dict) else None))
    if shown_key(view) == seen:
        return _skip_panel()
    return (*(gr.skip(),) * 4, count_line(view), *(gr.skip(),) * 5, shown_key(view), gr.skip())


def lock_guesses(store: RoomStore, lead: Any) -> tuple:
    """Lock guessing (or open it again): while locked, a student's Send is refused with a line saying so."""
    try:
        code, secret = read_lead(lead)
        view = store.lead(code, secret)
        view = store.lock(code, secret, view.phase != LOCKED)
    except RoomError as e:
        if e.gone:
            return _no_class(_lost(e, lead.get("code") if isinstance(lead, dict) else None))
        return (*_skip_panel()[:5], status_html(str(e), "problem"), *_skip_panel()[6:])
    said = "Guesses locked." if view.phase == LOCKED else "Guessing is open again."
    return _panel({"code": code, "secret": secret}, view, None, said)


def end_class(store: RoomStore, lead: Any) -> tuple:
    """End the class: its room and everything in it is freed; the students' pages say the class has ended."""
    try:
        store.end(*read_lead(lead))
    except RoomError:
        pass
    return _no_class("The class has ended.", "wait")


def hide_results() -> Any:
    """After the class ended: its last answer and histogram leave the page."""
    return gr.Column(visible=False)


def show_panel(presenter_on: Any, lead: Any) -> Any:
    """The class panel shows in presenter mode, and whenever the page leads a class."""
    return gr.Column(visible=bool(presenter_on) or bool(lead))


# --- the chapter, the runs ----------------------------------------------------------------------------------

def follow_chapter(store: RoomStore, lead: Any, number: Any) -> tuple:
    """The presenter's Learn page moved to chapter ``number`` (Back, Next, the list, a key): the class follows.
    (status, count, seen, the class's results hidden)."""
    if not lead or isinstance(number, bool) or not isinstance(number, int):
        return gr.skip(), gr.skip(), gr.skip(), gr.skip()
    try:
        code, secret = read_lead(lead)
        view = store.set_chapter(code, secret, question_of(number))
    except RoomError as e:
        return status_html(str(e), "problem"), gr.skip(), gr.skip(), gr.skip()
    title = class_chapter(number).title
    return (status_html(f"The class follows you to chapter {number}, “{title}”. Run it: they see your run.", "ok"),
            count_line(view), shown_key(view), gr.Column(visible=view.phase == REVEALED))


def publish_run(store: RoomStore, lead: Any, number: int, outputs: Sequence[Any], setting: Any) -> None:
    """The Learn tab's hook: a run of the leading page (its outputs: note, figures …, memo, answer) goes to the room,
    its figures made once for every page. A room that is gone is said in a warning; the run itself stands."""
    if not lead:
        return
    note, figures, memo = outputs[0], outputs[1:1 + N_PLOTS], outputs[1 + N_PLOTS]
    try:
        code, secret = read_lead(lead)
        store.publish_run(code, secret, question_of(number), make_shown(number, note, figures, setting, memo), memo,
                          setting)
    except RoomError as e:
        page_warning(f"The class did not get this run: {e}")


def choose_setting(store: RoomStore, lead: Any, value: Any, number: int) -> None:
    """A setting the Reveal takes (chapter 5's bug), changed by the presenter: the class sees the new choice."""
    if not lead:
        return
    try:
        ch = class_chapter(number)
        code, secret = read_lead(lead)
        if ch.setting is not None and ch.setting.at_reveal:
            store.choose_setting(code, secret, number, setting_words(ch, ch.setting.check(value)), value)
    except (RoomError, ValueError) as e:
        page_warning(f"The class did not get this setting: {e}")


def reveal_to_class(store: RoomStore, pool: Pool, lead: Any,
                    measure: Callable[[Pool, RevealJob], tuple[Revealed, ChapterResult]] = reveal_for_class) -> tuple:
    """Reveal to the whole class: guessing locked, the chapter's answer measured once from the presenter's run
    (``measure``: ``publish.reveal_for_class``, on a GPU where there is one), every guess judged, the histogram
    made; every page shows them. (status, count, results, class answer, class histogram, then for each chapter its
    answer and figures on this page: the room's chapter gets them)."""
    rest = (gr.skip(),) * (N * (1 + N_PLOTS))
    try:
        code, secret = read_lead(lead)
        job = store.begin_reveal(code, secret)
    except RoomError as e:
        return status_html(str(e), "problem"), gr.skip(), gr.skip(), gr.skip(), gr.skip(), *rest
    try:
        revealed, result = measure(pool, job)
    except RoomError as e:
        store.finish_reveal(code, secret, job, None)
        return status_html(str(e), "problem"), gr.skip(), gr.skip(), gr.skip(), gr.skip(), *rest
    view = store.finish_reveal(code, secret, job, revealed, result)
    if view.phase != REVEALED or view.chapter != job.chapter:
        return status_html("The class moved on while the answer was measured.", "problem"), count_line(view), \
            gr.skip(), gr.skip(), gr.skip(), *rest
    chapters = []
    for n in range(1, N + 1):
        if n != job.chapter:
            chapters += [gr.skip()] * (1 + N_PLOTS)
            continue
        figures = (list(revealed.figures) + [None] * N_PLOTS)[:N_PLOTS]
        chapters += [revealed.summary, *(PlotData(type="plotly", plot=f) if f else gr.skip() for f in figures)]
    n = revealed.total
    said = f"Revealed to the class: {n} guess{'es' if n != 1 else ''}, {revealed.right} right."
    return (status_html(said, "ok"), count_line(view), gr.Column(visible=True), revealed.summary,
            PlotData(type="plotly", plot=revealed.histogram), *chapters)


def push_live(store: RoomStore, lead: Any, latest: Any) -> Any:
    """Send the presenter's latest Live run to the class (its tokens and its timeline): the status line."""
    if not isinstance(latest, dict):
        return status_html("Make a Live run first (the Live tab): this sends its tokens and timeline.", "problem")
    try:
        code, secret = read_lead(lead)
        trace = Trace.from_dict(latest)
        figure = timeline_figure(trace)
        shown = figure_json(figure) or placeholder_json("Live run", REVEAL_FIGURE)
        store.push_live(code, secret, LiveShown(tokens_html(trace), shown))
    except (RoomError, ValueError) as e:
        return status_html(str(e), "problem")
    return status_html("Your Live run went to the class.", "ok")


__all__ = ["POLL_S", "base_url", "join_link", "lead_link", "read_lead", "parse_lead_param", "start_class",
           "restore_lead", "lead_poll", "lock_guesses", "end_class", "hide_results", "show_panel", "follow_chapter",
           "publish_run", "choose_setting", "reveal_to_class", "push_live", "N_PANEL", "LINK_LABEL", "PHASE_WORDS",
           "count_line", "shown_key"]
