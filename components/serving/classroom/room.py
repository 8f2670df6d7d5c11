"""What a class's room holds, as plain values: its limits (from the environment), its phases, the presenter's run
as every page draws it, a Reveal's results, and the two views the pages get — ``LeadView`` for the presenter's,
``StudentView`` for a student's. A ``StudentView`` is built only from the fields listed on it: it has no place
for the presenter's secret, the run's memo or another student's guess, so none can reach a student's page.

Figures are held as Plotly JSON text, made once per room (``plotly.io.to_json``): every page is sent the same
text, and gr.Plot passes it through without serializing it again.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from components.serving.run_limits import env_number

# phases of the current chapter
WAITING = "waiting"        # the presenter has not run this chapter yet
OPEN = "open"              # the run is in: guesses are taken
LOCKED = "locked"          # guesses closed (by the presenter, or while a Reveal measures)
REVEALED = "revealed"      # the answer and the class's guesses are out
PHASES = (WAITING, OPEN, LOCKED, REVEALED)

ROOMS_ENV = "SPECDEC_CLASS_ROOMS"
STUDENTS_ENV = "SPECDEC_CLASS_STUDENTS"
HOURS_ENV = "SPECDEC_CLASS_HOURS"


class RoomError(Exception):
    """A refusal for the page, in words. ``gone``: the room no longer exists (wrong code, expired, ended), so a
    page following it stops asking."""

    def __init__(self, message: str, gone: bool = False) -> None:
        super().__init__(message)
        self.gone = gone


@dataclass(frozen=True)
class ClassLimits:
    """How much one server takes: rooms at once, students per room, a room's life; and how often one student may
    send a guess (``sends`` within ``window_s`` seconds)."""
    rooms: int = 20
    students: int = 200
    life_s: float = 3 * 3600.0
    sends: int = 5
    window_s: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClassLimits:
        """``SPECDEC_CLASS_ROOMS`` (default 20), ``SPECDEC_CLASS_STUDENTS`` (200), ``SPECDEC_CLASS_HOURS`` (3);
        ValueError naming the variable when one is malformed."""
        env = os.environ if env is None else env
        d = cls()
        return cls(int(env_number(env, ROOMS_ENV, d.rooms, True)),
                   int(env_number(env, STUDENTS_ENV, d.students, True)),
                   env_number(env, HOURS_ENV, d.life_s / 3600) * 3600)


@dataclass(frozen=True)
class Shown:
    """The presenter's run of the current chapter as every page draws it: the note (HTML, escaped by whoever
    built it), the figures (Plotly JSON; None: the slot's placeholder) and the setting the presenter chose."""
    note: str
    figures: tuple[str | None, ...]
    setting: str = ""


@dataclass(frozen=True)
class Revealed:
    """A Reveal's results: the figures that show the answer (JSON; None keeps the run's), the class's histogram
    (JSON), the answer block every page shows (HTML), each student's own answer (HTML), and the counts."""
    figures: tuple[str | None, ...]
    histogram: str
    summary: str
    answers: Mapping[str, str]
    right: int
    total: int


@dataclass(frozen=True)
class LiveShown:
    """A Live run the presenter pushed to the class: its tokens (HTML) and one figure (JSON)."""
    html: str
    figure: str | None


@dataclass
class Student:
    joined: float
    sends: list[float] = field(default_factory=list)     # times of the recent sends (the rate limit's window)


@dataclass
class Room:
    code: str
    secret: str
    created: float
    expires: float
    chapter: int = 1
    phase: str = WAITING
    run_no: int = 0                      # counts the runs published to the room (0: none)
    shown: Shown | None = None
    memo: Any = None                     # the presenter's run, for the Reveal: never sent to any page
    setting: Any = None                  # the presenter's setting for the Reveal (a chapter that takes one there)
    students: dict[str, Student] = field(default_factory=dict)
    guesses: dict[str, Any] = field(default_factory=dict)      # student -> guess, for the current run
    revealed: Revealed | None = None
    live: LiveShown | None = None
    live_no: int = 0
    version: int = 0                     # changes on every update (the presenter's page follows it)
    stage: int = 0                       # changes on every update a student's page shows


@dataclass(frozen=True)
class StudentView:
    """All that a student's page is ever sent of a room."""
    code: str
    chapter: int
    phase: str
    run_no: int
    stage: int
    shown: Shown | None
    guess: Any                           # this student's own guess for the current run, or None
    revealed_figures: tuple[str | None, ...] = ()
    histogram: str | None = None
    summary: str = ""
    answer: str = ""                     # this student's own answer block (empty when they sent no guess)
    right: int = 0                       # the class's guesses judged right, of ``total``
    total: int = 0
    live: LiveShown | None = None
    live_no: int = 0


@dataclass(frozen=True)
class LeadView:
    """What the presenter's page shows of its room."""
    code: str
    chapter: int
    phase: str
    run_no: int
    students: int
    guesses: int
    version: int
    revealed: Revealed | None
    minutes_left: float


@dataclass(frozen=True)
class RevealJob:
    """What a Reveal works from, taken at once: the presenter's run and every guess in (guessing locked)."""
    chapter: int
    run_no: int
    memo: Any
    setting: Any
    guesses: Mapping[str, Any]


def student_view(room: Room, student: str) -> StudentView:
    """The room as ``student``'s page sees it."""
    r = room.revealed
    return StudentView(room.code, room.chapter, room.phase, room.run_no, room.stage, room.shown,
                       room.guesses.get(student), r.figures if r else (), r.histogram if r else None,
                       r.summary if r else "", r.answers.get(student, "") if r else "", r.right if r else 0,
                       r.total if r else 0, room.live, room.live_no)


def lead_view(room: Room, now: float) -> LeadView:
    return LeadView(room.code, room.chapter, room.phase, room.run_no, len(room.students), len(room.guesses),
                    room.version, room.revealed, max(0.0, (room.expires - now) / 60))


__all__ = ["WAITING", "OPEN", "LOCKED", "REVEALED", "PHASES", "RoomError", "ClassLimits", "Shown", "Revealed",
           "LiveShown", "Student", "Room", "StudentView", "LeadView", "RevealJob", "student_view", "lead_view",
           "ROOMS_ENV", "STUDENTS_ENV", "HOURS_ENV"]
