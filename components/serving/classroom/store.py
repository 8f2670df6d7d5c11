"""The rooms of the classes this server runs, behind one small interface (``RoomStore``): kept in this process
(``MemoryRoomStore``, the default: one replica carries a class) or in Redis (``redis_store.RedisRoomStore``, chosen
by ``SPECDEC_CLASS_STORE=redis://HOST:PORT/N``: replicas share the rooms). ``default_store()`` makes the one the
environment names.

Every method is one short step (here under the store's lock: dictionary updates only; in Redis one script): a model's
run or a Reveal's measurement happens outside it, between ``begin_reveal`` and ``finish_reveal``. A presenter's method
takes the room's code and secret; a student's takes the code and the student's id; each refusal is a ``RoomError``
in words. Expired rooms are removed whenever the store is used (at most once a second), so their memory goes.
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from components.serving.classroom import codes, names
from components.serving.classroom.names import nickname_of
from components.serving.classroom.room import (LOCKED, OPEN, REVEALED, WAITING, ChapterResult, ClassLimits, ClassView,
                                               Joined, LeadView, LiveShown, Question, Revealed, RevealJob, Shown,
                                               Student, check_timer, guess_of, no_room, phase_now, plain_guess,
                                               refusal)

SWEEP_EVERY_S = 1.0
STORE_ENV = "SPECDEC_CLASS_STORE"


class RoomStore(Protocol):
    """Rooms by code. The presenter's methods check ``secret``; the students' check that ``student`` joined."""
    limits: ClassLimits

    # the presenter
    def create(self, nicknames: bool = False) -> tuple[str, str]: ...                 # (code, secret)
    def lead(self, code: str, secret: str) -> LeadView: ...
    def end(self, code: str, secret: str) -> None: ...
    def set_chapter(self, code: str, secret: str, question: Question) -> LeadView: ...
    def publish_run(self, code: str, secret: str, question: Question, shown: Shown, memo: Any,
                    setting: Any) -> LeadView: ...
    def choose_setting(self, code: str, secret: str, chapter: int, label: str, setting: Any) -> LeadView: ...
    def lock(self, code: str, secret: str, locked: bool) -> LeadView: ...
    def start_timer(self, code: str, secret: str, seconds: float) -> LeadView: ...
    def begin_reveal(self, code: str, secret: str) -> RevealJob: ...
    def finish_reveal(self, code: str, secret: str, job: RevealJob, revealed: Revealed | None,
                      result: ChapterResult | None = None) -> LeadView: ...
    def push_live(self, code: str, secret: str, live: LiveShown) -> LeadView: ...
    def roster(self, code: str, secret: str) -> list[Student]: ...
    def remove(self, code: str, secret: str, handle: int) -> LeadView: ...
    def results(self, code: str, secret: str) -> list[ChapterResult]: ...
    # the students
    def join(self, code: str, student: str | None, nickname: str | None = None) -> Joined: ...
    def guess(self, code: str, student: str, chapter: int, run_no: int, value: Any) -> Any: ...
    def class_view(self, code: str) -> ClassView: ...
    def stages(self, codes_: Iterable[str]) -> dict[str, int | None]: ...            # None: the room is gone
    def stage(self, code: str) -> int: ...
    def version(self, code: str) -> int: ...


@dataclass
class _Student:
    handle: int
    nickname: str
    sends: list[float] = field(default_factory=list)     # times of the recent sends (the rate limit's window)


@dataclass
class _Room:
    code: str
    secret_hash: str
    expires: float
    nicknames: bool
    chapter: int = 1
    question: Question | None = None
    phase: str = WAITING
    run_no: int = 0                      # counts the runs published to the room (0: none)
    shown: Shown | None = None
    memo: Any = None                     # the presenter's run, for the Reveal: never sent to any page
    setting: Any = None                  # the presenter's setting for the Reveal (a chapter that takes one there)
    deadline: float | None = None        # the guess timer's end
    students: dict[str, _Student] = field(default_factory=dict)
    handles: dict[int, str] = field(default_factory=dict)
    nicks: dict[str, str] = field(default_factory=dict)         # names.same_key(nickname) -> student
    removed: set[str] = field(default_factory=set)
    removed_handles: list[int] = field(default_factory=list)
    next_handle: int = 0
    guesses: dict[str, Any] = field(default_factory=dict)       # student -> guess, for the current run
    revealed: Revealed | None = None
    results: list[ChapterResult] = field(default_factory=list)
    live: LiveShown | None = None
    live_no: int = 0
    version: int = 0                     # changes on every update (the presenter's page follows it)
    stage: int = 0                       # changes on every update a student's page shows


class MemoryRoomStore:
    """``RoomStore`` in this process's memory. ``clock`` (epoch seconds) is injectable for the tests."""

    def __init__(self, limits: ClassLimits | None = None, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits or ClassLimits()
        self.clock = clock
        self._rooms: dict[str, _Room] = {}
        self._lock = threading.Lock()
        self._swept = -math.inf

    # --- finding a room -------------------------------------------------------------------------------

    def _sweep(self, now: float, force: bool = False) -> None:
        if not force and now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        for code in [c for c, r in self._rooms.items() if r.expires <= now]:
            del self._rooms[code]

    def _room(self, code: str) -> _Room:
        now = self.clock()
        self._sweep(now)
        room = self._rooms.get(code) if isinstance(code, str) else None
        if room is None or room.expires <= now:
            raise no_room(codes.shown_code(code) if codes.is_code(code) else "")
        return room

    def _led(self, code: str, secret: str) -> _Room:
        room = self._room(code)
        if not codes.secret_matches(room.secret_hash, secret):
            raise refusal("not_lead", self.limits)
        return room

    def _changed(self, room: _Room, students_see: bool = True) -> None:
        room.version += 1
        if students_see:
            room.stage += 1

    def _lead_view(self, room: _Room) -> LeadView:
        now = self.clock()
        phase = phase_now(room.phase, room.deadline, now)
        left = max(0.0, room.deadline - now) if room.deadline is not None and phase == OPEN else None
        return LeadView(room.code, room.chapter, phase, room.run_no, len(room.students), len(room.guesses),
                        room.version, max(0.0, (room.expires - now) / 60), left, room.nicknames)

    def _fresh_run(self, room: _Room) -> None:
        room.guesses, room.revealed, room.deadline = {}, None, None

    # --- the presenter --------------------------------------------------------------------------------

    def create(self, nicknames: bool = False) -> tuple[str, str]:
        with self._lock:
            now = self.clock()
            self._sweep(now, force=True)
            if len(self._rooms) >= self.limits.rooms:
                raise refusal("rooms", self.limits)
            code = codes.new_code()
            while code in self._rooms:
                code = codes.new_code()
            secret = codes.new_secret()
            self._rooms[code] = _Room(code, codes.secret_hash(secret), now + self.limits.life_s, bool(nicknames))
            return code, secret

    def lead(self, code: str, secret: str) -> LeadView:
        with self._lock:
            return self._lead_view(self._led(code, secret))

    def end(self, code: str, secret: str) -> None:
        with self._lock:
            self._led(code, secret)
            del self._rooms[code]

    def set_chapter(self, code: str, secret: str, question: Question) -> LeadView:
        """Move the class to ``question``'s chapter: its run, guesses and Reveal start afresh (the same chapter:
        nothing changes)."""
        with self._lock:
            room = self._led(code, secret)
            if question.number != room.chapter or room.question is None:
                room.chapter, room.question, room.phase = question.number, question, WAITING
                room.shown = room.memo = room.setting = None
                self._fresh_run(room)
                self._changed(room)
            return self._lead_view(room)

    def publish_run(self, code: str, secret: str, question: Question, shown: Shown, memo: Any,
                    setting: Any) -> LeadView:
        """The presenter's run of ``question``'s chapter (the room moves there): guessing opens afresh, on this run."""
        with self._lock:
            room = self._led(code, secret)
            room.chapter, room.question, room.phase = question.number, question, OPEN
            room.shown, room.memo, room.setting = shown, memo, setting
            room.run_no += 1
            self._fresh_run(room)
            self._changed(room)
            return self._lead_view(room)

    def choose_setting(self, code: str, secret: str, chapter: int, label: str, setting: Any) -> LeadView:
        """The presenter's choice of a setting the Reveal takes (shown to the class with the run)."""
        with self._lock:
            room = self._led(code, secret)
            if chapter == room.chapter and room.phase in (OPEN, LOCKED, WAITING):
                room.setting = setting
                if room.shown is not None:
                    room.shown = dataclasses.replace(room.shown, setting=label)
                self._changed(room)
            return self._lead_view(room)

    def lock(self, code: str, secret: str, locked: bool) -> LeadView:
        """Lock guessing, or open it again (a timer that ran out is cleared: open means open)."""
        with self._lock:
            room = self._led(code, secret)
            phase = phase_now(room.phase, room.deadline, self.clock())
            if phase in (OPEN, LOCKED):
                new = LOCKED if locked else OPEN
                if new != phase or room.deadline is not None:
                    room.phase, room.deadline = new, None
                    self._changed(room)
            return self._lead_view(room)

    def start_timer(self, code: str, secret: str, seconds: float) -> LeadView:
        """Guessing locks ``seconds`` from now (every page counts down): only while guessing is open."""
        seconds = check_timer(seconds)
        with self._lock:
            room = self._led(code, secret)
            if phase_now(room.phase, room.deadline, self.clock()) != OPEN:
                raise refusal("not_open", self.limits)
            room.deadline = self.clock() + seconds
            self._changed(room)
            return self._lead_view(room)

    def begin_reveal(self, code: str, secret: str) -> RevealJob:
        """Lock guessing and take the run and every guess in, for a Reveal made outside the lock."""
        with self._lock:
            room = self._led(code, secret)
            if room.phase == WAITING or room.memo is None:
                raise refusal("no_run", self.limits)
            if room.phase != LOCKED or room.deadline is not None:
                room.phase, room.deadline = LOCKED, None
                self._changed(room)
            return RevealJob(room.chapter, room.run_no, room.memo, room.setting, dict(room.guesses))

    def finish_reveal(self, code: str, secret: str, job: RevealJob, revealed: Revealed | None,
                      result: ChapterResult | None = None) -> LeadView:
        """The Reveal's results (and the record the presenter keeps), kept when the room is still on the run it
        measured (else dropped); None (it failed) opens guessing again."""
        with self._lock:
            room = self._led(code, secret)
            if room.run_no == job.run_no and room.chapter == job.chapter and room.phase == LOCKED:
                room.phase, room.revealed = (REVEALED, revealed) if revealed is not None else (OPEN, None)
                if revealed is not None and result is not None:
                    room.results.append(result)
                self._changed(room)
            return self._lead_view(room)

    def push_live(self, code: str, secret: str, live: LiveShown) -> LeadView:
        with self._lock:
            room = self._led(code, secret)
            room.live, room.live_no = live, room.live_no + 1
            self._changed(room)
            return self._lead_view(room)

    def roster(self, code: str, secret: str) -> list[Student]:
        with self._lock:
            room = self._led(code, secret)
            return [Student(s.handle, s.nickname, sid in room.guesses) for sid, s in room.students.items()]

    def remove(self, code: str, secret: str, handle: int) -> LeadView:
        """Remove the student ``handle`` names: their guess goes, their page says so, their id cannot join again."""
        with self._lock:
            room = self._led(code, secret)
            sid = room.handles.pop(handle, None) if isinstance(handle, int) else None
            if sid is None:
                raise refusal("no_student", self.limits)
            del room.students[sid]                       # the nickname stays taken
            room.guesses.pop(sid, None)
            room.removed.add(sid)
            room.removed_handles.append(handle)
            self._changed(room)
            return self._lead_view(room)

    def results(self, code: str, secret: str) -> list[ChapterResult]:
        with self._lock:
            return list(self._led(code, secret).results)

    # --- the students ---------------------------------------------------------------------------------

    def join(self, code: str, student: str | None, nickname: str | None = None) -> Joined:
        """``student`` again when it joined this room before (a reload), else a new student (with ``nickname`` when
        the room asks for one); RoomError when the room is full, the nickname taken, or the student removed."""
        with self._lock:
            room = self._room(code)
            if isinstance(student, str) and student in room.removed:
                raise refusal("removed", self.limits)
            if isinstance(student, str) and student in room.students:
                s = room.students[student]
                return Joined(student, s.handle, s.nickname, room.guesses.get(student))
            if len(room.students) >= self.limits.students:
                raise refusal("full", self.limits)
            nick = nickname_of(nickname, room.nicknames)
            key = names.same_key(nick)
            if nick and key in room.nicks:
                raise refusal("nick_taken", self.limits)
            new = codes.new_student()
            room.next_handle += 1
            room.students[new] = _Student(room.next_handle, nick)
            room.handles[room.next_handle] = new
            if nick:
                room.nicks[key] = new
            self._changed(room, students_see=False)
            return Joined(new, room.next_handle, nick, None)

    def guess(self, code: str, student: str, chapter: int, run_no: int, value: Any) -> Any:
        """``student``'s guess on the run (``chapter``, ``run_no``) their page shows, checked against the chapter's
        question: the latest one counts; the value as kept."""
        plain_guess(value)
        with self._lock:
            room = self._room(code)
            if chapter != room.chapter:
                raise refusal("moved", self.limits)
            kept = guess_of(room.question, value)
            who = room.students.get(student) if isinstance(student, str) else None
            if who is None:
                raise refusal("removed" if student in room.removed else "not_joined", self.limits)
            if run_no != room.run_no:
                raise refusal("moved", self.limits)
            now = self.clock()
            phase = phase_now(room.phase, room.deadline, now)
            if phase != OPEN:
                raise refusal("closed", self.limits, phase)
            who.sends = [t for t in who.sends if now - t < self.limits.window_s]
            if len(who.sends) >= self.limits.sends:
                raise refusal("rate", self.limits)
            who.sends.append(now)
            if student not in room.guesses or room.guesses[student] != kept:     # a replayed send counts once
                room.guesses[student] = kept
                self._changed(room, students_see=False)
            return kept

    def class_view(self, code: str) -> ClassView:
        with self._lock:
            r = self._room(code)
            phase = phase_now(r.phase, r.deadline, self.clock())
            return ClassView(r.code, r.chapter, phase, r.run_no, r.stage, r.question,
                             r.deadline if phase == OPEN else None, r.shown, r.revealed, r.live, r.live_no,
                             r.nicknames, tuple(r.removed_handles))

    def stages(self, codes_: Iterable[str]) -> dict[str, int | None]:
        with self._lock:
            now = self.clock()
            self._sweep(now)
            return {c: (r.stage if (r := self._rooms.get(c)) is not None and r.expires > now else None)
                    for c in codes_}

    def stage(self, code: str) -> int:
        with self._lock:
            return self._room(code).stage

    def version(self, code: str) -> int:
        with self._lock:
            return self._room(code).version

    def rooms(self) -> int:
        with self._lock:
            return len(self._rooms)


def store_from_env(env: dict[str, str] | None = None, limits: ClassLimits | None = None) -> RoomStore:
    """The store ``SPECDEC_CLASS_STORE`` names: unset or ``memory``, this process's; ``redis://HOST:PORT/N``, the
    rooms in that Redis (checked with a ping). ValueError naming the variable when it is malformed or unreachable."""
    env = dict(os.environ) if env is None else env
    limits = limits or ClassLimits.from_env(env)
    raw = env.get(STORE_ENV, "").strip()
    if raw in ("", "memory"):
        return MemoryRoomStore(limits)
    from components.serving.classroom.redis_store import RedisRoomStore
    return RedisRoomStore.from_url(raw, limits, variable=STORE_ENV)


_STORE: RoomStore | None = None
_STORE_LOCK = threading.Lock()


def default_store() -> RoomStore:
    """This process's store, made on first use from the environment (``store_from_env``)."""
    global _STORE
    with _STORE_LOCK:
        if _STORE is None:
            _STORE = store_from_env()
        return _STORE


__all__ = ["RoomStore", "MemoryRoomStore", "default_store", "store_from_env", "STORE_ENV"]
