"""The rooms of the classes this server runs, behind one small interface (``RoomStore``), kept in this process
(``MemoryRoomStore``: one Space replica carries a class). docs/classroom.md says how several replicas would
share rooms through Redis behind the same interface.

Every method is one short step under the store's lock (dictionary updates only: a model's run or a Reveal's
measurement happens outside it, between ``begin_reveal`` and ``finish_reveal``). A presenter's method takes the
room's code and secret; a student's takes the code and the student's id; each refusal is a ``RoomError`` in
words. Expired rooms are removed whenever the store is used (at most once a second), so their memory goes.
"""
from __future__ import annotations

import hmac
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from components.serving.classroom import codes
from components.serving.classroom.room import (LOCKED, OPEN, REVEALED, WAITING, ClassLimits, LeadView, LiveShown,
                                               Revealed, RevealJob, Room, RoomError, Shown, Student, StudentView,
                                               lead_view, student_view)

MAX_GUESS_TEXT = 200          # a guess is a number or one of a chapter's choices: anything longer is not one
SWEEP_EVERY_S = 1.0


class RoomStore(Protocol):
    """Rooms by code. The presenter's methods check ``secret``; the students' check that ``student`` joined."""
    limits: ClassLimits

    def create(self) -> tuple[str, str]: ...                                     # (code, secret)
    def lead(self, code: str, secret: str) -> LeadView: ...
    def end(self, code: str, secret: str) -> None: ...
    def set_chapter(self, code: str, secret: str, chapter: int) -> LeadView: ...
    def publish_run(self, code: str, secret: str, chapter: int, shown: Shown, memo: Any, setting: Any) -> LeadView: ...
    def choose_setting(self, code: str, secret: str, chapter: int, label: str, setting: Any) -> LeadView: ...
    def lock(self, code: str, secret: str, locked: bool) -> LeadView: ...
    def begin_reveal(self, code: str, secret: str) -> RevealJob: ...
    def finish_reveal(self, code: str, secret: str, job: RevealJob, revealed: Revealed | None) -> LeadView: ...
    def push_live(self, code: str, secret: str, live: LiveShown) -> LeadView: ...
    def join(self, code: str, student: str | None) -> str: ...
    def guess(self, code: str, student: str, chapter: int, run_no: int, value: Any) -> None: ...
    def stage(self, code: str) -> int: ...
    def version(self, code: str) -> int: ...
    def student_view(self, code: str, student: str) -> StudentView: ...


class MemoryRoomStore:
    """``RoomStore`` in this process's memory. ``clock`` is injectable for the tests."""

    def __init__(self, limits: ClassLimits | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits or ClassLimits()
        self.clock = clock
        self._rooms: dict[str, Room] = {}
        self._lock = threading.Lock()
        self._swept = -math.inf

    # --- finding a room -------------------------------------------------------------------------------

    def _sweep(self, now: float, force: bool = False) -> None:
        if not force and now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        for code in [c for c, r in self._rooms.items() if r.expires <= now]:
            del self._rooms[code]

    def sweep(self) -> int:
        """Remove the expired rooms now; how many rooms are left."""
        with self._lock:
            self._sweep(self.clock(), force=True)
            return len(self._rooms)

    def _room(self, code: str) -> Room:
        now = self.clock()
        self._sweep(now)
        room = self._rooms.get(code) if isinstance(code, str) else None
        if room is None or room.expires <= now:
            named = f" {codes.shown_code(code)}" if codes.is_code(code) else ""
            raise RoomError(f"There is no class{named} here: the code may be mistyped, or the class has ended. Ask "
                            "your presenter for the code.", gone=True)
        return room

    def _led(self, code: str, secret: str) -> Room:
        room = self._room(code)
        if not isinstance(secret, str) or not hmac.compare_digest(room.secret.encode(), secret.encode("utf-8", "replace")):
            raise RoomError("Only the presenter's page can lead this class.")
        return room

    def _changed(self, room: Room, students_see: bool = True) -> None:
        room.version += 1
        if students_see:
            room.stage += 1

    # --- the presenter --------------------------------------------------------------------------------

    def create(self) -> tuple[str, str]:
        with self._lock:
            now = self.clock()
            self._sweep(now, force=True)
            if len(self._rooms) >= self.limits.rooms:
                raise RoomError(f"This server is already running {self.limits.rooms} classes, its limit: try again "
                                "when one has ended.")
            code = codes.new_code()
            while code in self._rooms:
                code = codes.new_code()
            secret = codes.new_secret()
            self._rooms[code] = Room(code, secret, now, now + self.limits.life_s)
            return code, secret

    def lead(self, code: str, secret: str) -> LeadView:
        with self._lock:
            return lead_view(self._led(code, secret), self.clock())

    def end(self, code: str, secret: str) -> None:
        with self._lock:
            self._led(code, secret)
            del self._rooms[code]

    def set_chapter(self, code: str, secret: str, chapter: int) -> LeadView:
        """Move the class to ``chapter``: its run, guesses and Reveal start afresh (the same chapter: nothing
        changes)."""
        with self._lock:
            room = self._led(code, secret)
            if chapter != room.chapter:
                room.chapter, room.phase, room.shown, room.memo, room.setting = chapter, WAITING, None, None, None
                room.guesses, room.revealed = {}, None
                self._changed(room)
            return lead_view(room, self.clock())

    def publish_run(self, code: str, secret: str, chapter: int, shown: Shown, memo: Any, setting: Any) -> LeadView:
        """The presenter's run of ``chapter`` (the room moves there): guessing opens afresh, on this run."""
        with self._lock:
            room = self._led(code, secret)
            room.chapter, room.phase, room.shown, room.memo, room.setting = chapter, OPEN, shown, memo, setting
            room.run_no += 1
            room.guesses, room.revealed = {}, None
            self._changed(room)
            return lead_view(room, self.clock())

    def choose_setting(self, code: str, secret: str, chapter: int, label: str, setting: Any) -> LeadView:
        """The presenter's choice of a setting the Reveal takes (shown to the class with the run)."""
        with self._lock:
            room = self._led(code, secret)
            if chapter == room.chapter and room.phase in (OPEN, LOCKED, WAITING):
                room.setting = setting
                if room.shown is not None:
                    room.shown = Shown(room.shown.note, room.shown.figures, label)
                self._changed(room)
            return lead_view(room, self.clock())

    def lock(self, code: str, secret: str, locked: bool) -> LeadView:
        with self._lock:
            room = self._led(code, secret)
            if room.phase in (OPEN, LOCKED):
                new = LOCKED if locked else OPEN
                if new != room.phase:
                    room.phase = new
                    self._changed(room)
            return lead_view(room, self.clock())

    def begin_reveal(self, code: str, secret: str) -> RevealJob:
        """Lock guessing and take the run and every guess in, for a Reveal made outside the lock."""
        with self._lock:
            room = self._led(code, secret)
            if room.phase == WAITING or room.memo is None:
                raise RoomError("Run this chapter first: the class's answer comes from your run.")
            if room.phase != LOCKED:
                room.phase = LOCKED
                self._changed(room)
            return RevealJob(room.chapter, room.run_no, room.memo, room.setting, dict(room.guesses))

    def finish_reveal(self, code: str, secret: str, job: RevealJob, revealed: Revealed | None) -> LeadView:
        """The Reveal's results, kept when the room is still on the run it measured (else dropped); None (it
        failed) opens guessing again."""
        with self._lock:
            room = self._led(code, secret)
            if room.run_no == job.run_no and room.chapter == job.chapter and room.phase == LOCKED:
                room.phase, room.revealed = (REVEALED, revealed) if revealed is not None else (OPEN, None)
                self._changed(room)
            return lead_view(room, self.clock())

    def push_live(self, code: str, secret: str, live: LiveShown) -> LeadView:
        with self._lock:
            room = self._led(code, secret)
            room.live, room.live_no = live, room.live_no + 1
            self._changed(room)
            return lead_view(room, self.clock())

    # --- the students ---------------------------------------------------------------------------------

    def join(self, code: str, student: str | None) -> str:
        """``student``'s id again when it joined this room before (a reload), else a new one; RoomError when the
        room is full."""
        with self._lock:
            room = self._room(code)
            if isinstance(student, str) and student in room.students:
                return student
            if len(room.students) >= self.limits.students:
                raise RoomError(f"This class is full: it has its {self.limits.students} students. Ask your "
                                "presenter.", gone=True)
            new = codes.new_student()
            room.students[new] = Student(self.clock())
            self._changed(room, students_see=False)
            return new

    def guess(self, code: str, student: str, chapter: int, run_no: int, value: Any) -> None:
        """``student``'s guess on the run (``chapter``, ``run_no``) their page shows: the latest one counts. The
        value must already be checked against the chapter's guess; here it must only be a plain value."""
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value)
                                           or isinstance(value, str) and len(value) <= MAX_GUESS_TEXT):
            raise RoomError("A guess is a number or one of the answers offered.")
        with self._lock:
            room = self._room(code)
            who = room.students.get(student) if isinstance(student, str) else None
            if who is None:
                raise RoomError("This page has not joined the class: reload it.")
            if chapter != room.chapter or run_no != room.run_no:
                raise RoomError("The class has moved on since: look at the run on your screen now and guess again.")
            if room.phase != OPEN:
                raise RoomError("Guessing is closed for this run." if room.phase != WAITING else
                                "Wait for the presenter's run, then guess.")
            now = self.clock()
            who.sends = [t for t in who.sends if now - t < self.limits.window_s]
            if len(who.sends) >= self.limits.sends:
                raise RoomError(f"Easy: at most {self.limits.sends} sends in {self.limits.window_s:g} s. Your last "
                                "guess counts.")
            who.sends.append(now)
            if student not in room.guesses or room.guesses[student] != value:     # a replayed send counts once
                room.guesses[student] = value
                self._changed(room, students_see=False)

    def stage(self, code: str) -> int:
        with self._lock:
            return self._room(code).stage

    def version(self, code: str) -> int:
        with self._lock:
            return self._room(code).version

    def student_view(self, code: str, student: str) -> StudentView:
        with self._lock:
            room = self._room(code)
            if not isinstance(student, str) or student not in room.students:
                raise RoomError("This page has not joined the class: reload it.")
            return student_view(room, student)

    def rooms(self) -> int:
        with self._lock:
            return len(self._rooms)


_STORE: MemoryRoomStore | None = None
_STORE_LOCK = threading.Lock()


def default_store() -> MemoryRoomStore:
    """This process's store, made on first use with the limits from the environment."""
    global _STORE
    with _STORE_LOCK:
        if _STORE is None:
            _STORE = MemoryRoomStore(ClassLimits.from_env())
        return _STORE


__all__ = ["RoomStore", "MemoryRoomStore", "default_store", "MAX_GUESS_TEXT"]
