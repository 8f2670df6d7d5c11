"""The presenter's classroom tools, as thin module-level handlers beside ``lead``'s (the room store passed in): a
guess timer (guesses lock at zero; every page counts down), the roster and removing a student, and the results the
presenter keeps (per revealed chapter: the anonymous guesses, the measured value and its band, how many were right)
as CSV and JSON files for the page's download box. The same results come through ``GET /class/api/results``.
"""
from __future__ import annotations

import time
from typing import Any

import gradio as gr

from components.pages.classroom.lead import count_line, read_lead, shown_key
from components.pages.export import export_file
from components.render.classroom import roster_choices, status_html
from components.serving.classroom import RoomError, RoomStore
from components.serving.classroom.results import results_csv, results_json

TIMER_CHOICES = (15, 30, 45, 60, 90, 120)          # seconds offered; the store takes 1 … 600


def start_timer(store: RoomStore, lead: Any, seconds: Any) -> tuple:
    """Start the guess timer: (status, count, seen)."""
    try:
        code, secret = read_lead(lead)
        view = store.start_timer(code, secret, seconds)
    except RoomError as e:
        return status_html(str(e), "problem"), gr.skip(), gr.skip()
    return (status_html(f"Timer started: guesses lock in {view.timer_left:.0f} s. Every page counts down.", "ok"),
            count_line(view), shown_key(view))


def roster(store: RoomStore, lead: Any) -> Any:
    """The students now in the class, for the roster's dropdown (made when the presenter opens it)."""
    try:
        people = store.roster(*read_lead(lead))
    except RoomError:
        return gr.Dropdown(choices=[], value=None)
    return gr.Dropdown(choices=roster_choices(people), value=None)


def remove_student(store: RoomStore, lead: Any, handle: Any) -> tuple:
    """Remove the student picked in the roster: their guess goes, their page says so. (status, count, roster)."""
    if isinstance(handle, bool) or not isinstance(handle, int):
        return status_html("Pick a student in the list first.", "problem"), gr.skip(), gr.skip()
    try:
        code, secret = read_lead(lead)
        view = store.remove(code, secret, handle)
        people = store.roster(code, secret)
    except RoomError as e:
        return status_html(str(e), "problem"), gr.skip(), gr.skip()
    return (status_html(f"Student #{handle} was removed from the class.", "ok"), count_line(view),
            gr.Dropdown(choices=roster_choices(people), value=None))


def export_results(store: RoomStore, lead: Any, folder: str | None = None) -> tuple:
    """The class's results so far as two files, CSV and JSON: (status, the download box)."""
    try:
        code, secret = read_lead(lead)
        kept = store.results(code, secret)
    except RoomError as e:
        return status_html(str(e), "problem"), gr.skip()
    if not kept:
        return status_html("Nothing to export yet: results are kept from each Reveal to the class.", "problem"), \
            gr.File(value=None, visible=False)
    files = [export_file(results_csv(code, kept), "-class-results.csv", folder),
             export_file(results_json(code, kept, time.time()), "-class-results.json", folder)]
    n = sum(r.total for r in kept)
    return (status_html(f"Results of {len(kept)} chapter{'s' if len(kept) != 1 else ''} ({n} guesses): download "
                        "them below.", "ok"), gr.File(value=files, visible=True))


__all__ = ["TIMER_CHOICES", "start_timer", "roster", "remove_student", "export_results"]
