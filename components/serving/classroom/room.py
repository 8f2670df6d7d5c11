"""What a class's room holds, as plain values: its limits (from the environment), its phases, the question of the
chapter it is on, the presenter's run as every page draws it, a Reveal's results and the record the presenter
keeps, and the views the pages get — ``LeadView`` for the presenter's page, ``ClassView`` for the students'.

A ``ClassView`` is the same for every student of a room (the students' page builds its own line from it and the
guess it sent): it is built only from the fields listed on it and has no place for the presenter's secret, the
run's memo, a student's id or another student's guess, so none can reach a student's page.

Figures are held as Plotly JSON text, made once per room (``plotly.io.to_json``): every page is sent the same text.
Times are seconds since the epoch (``time.time``), so that replicas sharing a store agree on a timer's end.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.serving.run_limits import env_number

# phases of the current chapter
WAITING = "waiting"        # the presenter has not run this chapter yet
OPEN = "open"              # the run is in: guesses are taken
LOCKED = "locked"          # guesses closed (by the presenter, the timer, or while a Reveal measures)
REVEALED = "revealed"      # the answer and the class's guesses are out
PHASES = (WAITING, OPEN, LOCKED, REVEALED)

ROOMS_ENV = "SPECDEC_CLASS_ROOMS"
STUDENTS_ENV = "SPECDEC_CLASS_STUDENTS"
HOURS_ENV = "SPECDEC_CLASS_HOURS"
MAX_TIMER_S = 600          # a guess timer runs at most ten minutes
MAX_GUESS_TEXT = 200       # a guess is a number or one of a chapter's choices: anything longer is not one


class RoomError(Exception):
    """A refusal for the page, in words. ``gone``: the room no longer exists (wrong code, expired, ended), so a
    page following it stops asking. ``status``: the HTTP status the class's routes answer it with; ``reason``: what
    the page should ask for again ("nickname"), or ""."""

    def __init__(self, message: str, gone: bool = False, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.gone = gone
        self.status = status or (404 if gone else 409)
        self.reason = reason


def no_room(shown: str = "") -> RoomError:
    named = f" {shown}" if shown else ""
    return RoomError(f"There is no class{named} here: the code may be mistyped, or the class has ended. Ask your "
                     "presenter for the code.", gone=True)


NOT_LEAD = "Only the presenter's page can lead this class."
NOT_JOINED = "This page has not joined the class: reload it."
REMOVED = "Your presenter removed you from this class."
NO_RUN = "Run this chapter first: the class's answer comes from your run."
MOVED_ON = "The class has moved on since: look at the run on your screen now and guess again."
NEED_NICKNAME = "This class asks for a nickname: type one, then Join."
NICK_TAKEN = "Someone in this class has that nickname already: choose another."



@dataclass(frozen=True)
class ClassLimits:
    """How much one server takes: rooms at once, students per room, a room's life; and how often one student may
    send a guess (``sends`` within ``window_s`` seconds)."""
    rooms: int = 20
    students: int = 500
    life_s: float = 3 * 3600.0
    sends: int = 5
    window_s: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClassLimits:
        """``SPECDEC_CLASS_ROOMS`` (default 20), ``SPECDEC_CLASS_STUDENTS`` (500), ``SPECDEC_CLASS_HOURS`` (3);
        ValueError naming the variable when one is malformed."""
        env = os.environ if env is None else env
        d = cls()
        return cls(int(env_number(env, ROOMS_ENV, d.rooms, True)),
                   int(env_number(env, STUDENTS_ENV, d.students, True)),
                   env_number(env, HOURS_ENV, d.life_s / 3600) * 3600)


@dataclass(frozen=True)
class GuessSpec:
    """A chapter's guess control (a learner's commitment, ``pages.learn.book.Guess``), as the class's pages draw it
    and the store checks a guess against it: a slider (``minimum``..``maximum`` by ``step``) or a choice
    (``choices``)."""
    label: str
    minimum: float = 0.0
    maximum: float = 1.0
    step: float = 1.0
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> Any:
        """A student's guess as the store keeps it: one of the choices, or a number (not text) on the slider (a whole
        number when the slider counts in whole steps); ValueError in words otherwise."""
        if self.choices:
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"the guess must be one of {', '.join(self.choices)}, got {str(value)[:40]!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or isinstance(value, float) and not math.isfinite(value) or not self.minimum <= value <= self.maximum:
            raise ValueError(f"the guess must be a number from {self.minimum:g} to {self.maximum:g}, "
                             f"got {str(value)[:40]!r}")
        steps = (value - self.minimum) / self.step if self.step > 0 else 0.0
        if abs(steps - round(steps)) > 1e-6:
            raise ValueError(f"the guess must be a number from {self.minimum:g} to {self.maximum:g} in steps of "
                             f"{self.step:g}, got {str(value)[:40]!r}")
        if float(self.step).is_integer() and float(self.minimum).is_integer() and float(value).is_integer():
            return int(value)
        return float(value)


@dataclass(frozen=True)
class Question:
    """The chapter a room is on, as a student's page shows it: its number of ``of``, title, text (HTML, made by the
    page's builders from the chapter's own text) and guess."""
    number: int
    of: int
    title: str
    text: str
    guess: GuessSpec


@dataclass(frozen=True)
class Shown:
    """The presenter's run of the current chapter as every page draws it: the note (HTML, escaped by whoever
    built it), the figures (Plotly JSON; None: the slot's placeholder), the setting the presenter chose in words,
    and the run's tokens coloured by fate (HTML; shown only from the Reveal on when ``tokens_at_reveal``: in a chapter
    whose question they would answer)."""
    note: str
    figures: tuple[str | None, ...]
    setting: str = ""
    tokens: str = ""
    tokens_at_reveal: bool = False


@dataclass(frozen=True)
class Truth:
    """What a Reveal measured, as a class's pages say it: the value with the band a guess counts in (its 95 %
    interval or the chapter's tolerance), the answers judged right (choices, or whole numbers), in words."""
    value: float | None = None
    low: float | None = None
    high: float | None = None
    right: tuple[Any, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class Revealed:
    """A Reveal's results as every page shows them: the figures that show the answer (JSON; None keeps the run's),
    the class's histogram (JSON), the answer block (HTML), what was measured, the verdict on each distinct guess
    sent (a student's page finds its own there), the class's median (numbers) or most chosen answer, the counts."""
    figures: tuple[str | None, ...]
    histogram: str
    summary: str
    truth: Truth
    verdicts: tuple[tuple[Any, str | None], ...]
    median: Any
    right: int
    total: int


@dataclass(frozen=True)
class ChapterResult:
    """What the presenter keeps of one Reveal: the chapter, what the run measured (in words; the value and its band
    as numbers where it is one; the answers judged right), the class's guesses, anonymous (each with its verdict,
    sorted by value), and how many were right."""
    chapter: int
    title: str
    run_no: int
    revealed_at: float
    measured: str
    value: float | None
    low: float | None
    high: float | None
    right_answers: tuple[Any, ...]
    guesses: tuple[tuple[Any, str | None], ...]
    right: int
    total: int


@dataclass(frozen=True)
class LiveShown:
    """A Live run the presenter pushed to the class: its tokens (HTML) and one figure (JSON)."""
    html: str
    figure: str | None


@dataclass(frozen=True)
class ClassView:
    """All that a student's page is ever sent of a room: the same for every student."""
    code: str
    chapter: int
    phase: str                           # as it is now: an open phase past its timer reads LOCKED
    run_no: int
    stage: int                           # changes on every update a student's page shows
    question: Question | None
    deadline: float | None               # the guess timer's end (epoch seconds), while guessing is open
    shown: Shown | None
    revealed: Revealed | None
    live: LiveShown | None
    live_no: int
    nicknames: bool                      # whether joining asks for a nickname
    removed: tuple[int, ...]             # the handles of the students the presenter removed


@dataclass(frozen=True)
class Joined:
    """A student in a room: the id its page keeps (its credential), its public handle (a number; the presenter
    removes a student by it), its nickname ("" without), and its guess on the current run (None without)."""
    student: str
    handle: int
    nickname: str
    guess: Any


@dataclass(frozen=True)
class Student:
    """A student as the presenter's roster lists it."""
    handle: int
    nickname: str
    answered: bool


@dataclass(frozen=True)
class LeadView:
    """What the presenter's page shows of its room."""
    code: str
    chapter: int
    phase: str
    run_no: int
    students: int
    guesses: int
    version: int                         # changes on every update (a join and a guess too)
    minutes_left: float
    timer_left: float | None             # seconds left on the guess timer, while it runs
    nicknames: bool


@dataclass(frozen=True)
class RevealJob:
    """What a Reveal works from, taken at once: the presenter's run and every guess in (guessing locked)."""
    chapter: int
    run_no: int
    memo: Any
    setting: Any
    guesses: Mapping[str, Any]


def phase_now(phase: str, deadline: float | None, now: float) -> str:
    """The phase as it is at ``now``: open guessing whose timer has run out is locked."""
    return LOCKED if phase == OPEN and deadline is not None and now >= deadline else phase


def plain_guess(value: Any) -> Any:
    """``value`` when it is a plain guess value (a finite number or a short text), else RoomError."""
    number = isinstance(value, int) and abs(value) < 2**53 or isinstance(value, float) and math.isfinite(value)
    if isinstance(value, bool) or not (number or isinstance(value, str) and len(value) <= MAX_GUESS_TEXT):
        raise RoomError("A guess is a number or one of the answers offered.", status=400)
    return value


def guess_of(question: Question | None, value: Any) -> Any:
    """A guess (already ``plain_guess``) checked against the room's question: the value as kept, or RoomError in
    words."""
    if question is None:
        raise RoomError("Wait for the presenter's run, then guess.")
    try:
        return question.guess.check(value)
    except ValueError as e:
        raise RoomError(f"{str(e)[:1].upper()}{str(e)[1:]}.", status=400) from None


def check_timer(seconds: Any) -> float:
    """A guess timer's length in seconds (1 … ``MAX_TIMER_S``), else RoomError in words."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 1 <= seconds <= MAX_TIMER_S:
        raise RoomError(f"A guess timer runs 1 to {MAX_TIMER_S} seconds, got {str(seconds)[:20]!r}.", status=400)
    return float(seconds)


def median_of(values: list[Any], choices: tuple[str, ...]) -> Any:
    """The class's middle guess: the median of numbers, the most chosen answer (the first offered on a tie); None
    without guesses."""
    if not values:
        return None
    if choices:
        return max(choices, key=lambda c: (values.count(c), -choices.index(c)))
    xs = sorted(float(v) for v in values)
    mid = len(xs) // 2
    m = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return int(m) if m.is_integer() else round(m, 6)


def refusal(kind: str, limits: ClassLimits, phase: str = "") -> RoomError:
    """The refusal a store answers with, by its kind (the words ``RedisRoomStore``'s scripts answer too)."""
    said = {"not_lead": (NOT_LEAD, 403), "no_run": (NO_RUN, 409), "removed": (REMOVED, 403),
            "not_joined": (NOT_JOINED, 403), "moved": (MOVED_ON, 409),
            "closed": ("Wait for the presenter's run, then guess." if phase == WAITING else
                       "Guessing is closed for this run.", 409),
            "not_open": ("A timer runs while guessing is open: run the chapter (or open guesses again) first.", 409),
            "no_student": ("That student is not in this class (any more).", 409),
            "rate": (f"Easy: at most {limits.sends} sends in {limits.window_s:g} s. Your last guess counts.", 429),
            "rooms": (f"This server is already running {limits.rooms} classes, its limit: try again when one has "
                      "ended.", 409),
            "need_nick": (NEED_NICKNAME, 400), "nick_taken": (NICK_TAKEN, 409)}
    if kind == "full":
        return RoomError(f"This class is full: it has its {limits.students} students. Ask your presenter.", gone=True,
                         status=409)
    message, status = said.get(kind, (f"The class's store answered {kind[:40]!r}.", 500))
    return RoomError(message, status=status, reason="nickname" if kind in ("need_nick", "nick_taken") else "")


__all__ = ["WAITING", "OPEN", "LOCKED", "REVEALED", "PHASES", "RoomError", "ClassLimits", "GuessSpec", "Question",
           "Shown", "Truth", "Revealed", "ChapterResult", "LiveShown", "ClassView", "Joined", "Student", "LeadView",
           "RevealJob", "phase_now", "plain_guess", "guess_of", "check_timer", "median_of", "no_room", "ROOMS_ENV",
           "STUDENTS_ENV", "HOURS_ENV", "MAX_TIMER_S", "MAX_GUESS_TEXT", "NOT_LEAD", "NOT_JOINED", "REMOVED",
           "NO_RUN", "MOVED_ON", "NEED_NICKNAME", "NICK_TAKEN", "refusal"]
