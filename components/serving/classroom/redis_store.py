"""``RoomStore`` in Redis, so that several replicas of the app share their classes' rooms
(``SPECDEC_CLASS_STORE=redis://HOST:PORT/N``): a presenter on one replica, students on any.

Every method that checks and changes a room is one Lua script (``redis_scripts``: the keys and what they hold), so
a join under the student limit, a guess checked against the phase, the run, the timer and the rate limit, a lock or
a Reveal are atomic across processes as the lock makes them in one: no guess is lost or counted twice when
students on two replicas send at once. A room's keys expire with it (``PEXPIREAT``): Redis frees expired rooms
itself. The presenter's secret is kept as its SHA-256 and compared by it. Reading a room for the students' pages
(``class_view``, ``stages``) is one pipelined round trip, and names fields one by one, so the secret's hash is
never read for a page. Times come from this process's clock (``clock``: epoch seconds), which replicas share as
their clocks agree. A Redis that cannot be reached is a ``RoomError`` in words (HTTP 503), never a traceback.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import redis

from components.serving.classroom import codes, names, wire
from components.serving.classroom.names import nickname_of
from components.serving.classroom import redis_scripts as lua
from components.serving.classroom.room import (OPEN, ChapterResult, ClassLimits, ClassView, Joined, LeadView,
                                               LiveShown, Question, Revealed, RevealJob, RoomError, Shown, Student,
                                               check_timer, guess_of, no_room, phase_now, plain_guess, refusal)

PREFIX = "specdec:class:"
ROOMS_KEY = PREFIX + "rooms"           # code -> expiry (ms), for the server-wide room limit
VIEW_FIELDS = ("chapter", "phase", "run_no", "stage", "question", "deadline", "setting_label", "live_no",
               "nicknames", "expires_ms")
CACHE_MAX = 2000                       # questions and nickname flags this process keeps, by room
MAX_CONNECTIONS = 48                   # this process's connections to Redis; more callers wait for one (≤ 5 s)
UNREACHABLE = "The class's store (Redis) cannot be reached just now: try again in a moment."


def room_key(code: str) -> str:
    return f"{PREFIX}{{{code}}}"


def check_url(raw: str, variable: str = "SPECDEC_CLASS_STORE") -> str:
    """``raw`` when it reads ``redis://HOST:PORT/N`` (or ``rediss://``, a password allowed), else ValueError naming
    ``variable`` (and never the password)."""
    try:
        where = urlsplit(raw)
        port, db = where.port, where.path.lstrip("/")
    except ValueError:
        where, port, db = None, None, ""
    if where is None or where.scheme not in ("redis", "rediss") or not where.hostname or port is None \
            or not (db == "" or db.isdigit()) or where.query or where.fragment:
        shown = raw.split("@")[-1][:60]
        raise ValueError(f"{variable} must be memory or redis://HOST:PORT/N, got {shown!r}")
    return raw


@contextmanager
def _reachable() -> Iterator[None]:
    """Redis away (a connection or a time-out) becomes the one-line RoomError every route answers with 503."""
    try:
        yield
    except redis.RedisError:
        raise RoomError(UNREACHABLE, status=503) from None


class RedisRoomStore:
    """``RoomStore`` on a Redis server. ``clock`` (epoch seconds) is injectable for the tests."""

    def __init__(self, client: redis.Redis, limits: ClassLimits | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.limits = limits or ClassLimits()
        self.clock = clock
        self.r = client
        self._scripts = {name: client.register_script(getattr(lua, name)) for name in lua.__all__ if name != "PRELUDE"}
        self._questions: dict[tuple[str, int], Question] = {}      # (code, chapter) -> its question (never changes)
        self._asks_nicknames: dict[str, bool] = {}                  # fixed when the room is made

    @classmethod
    def from_url(cls, url: str, limits: ClassLimits | None = None, variable: str = "SPECDEC_CLASS_STORE",
                 ping: bool = True) -> RedisRoomStore:
        """A store on the Redis ``url`` names; ValueError naming ``variable`` when it is malformed or (``ping``)
        cannot be reached."""
        pool = redis.BlockingConnectionPool.from_url(check_url(url, variable), max_connections=MAX_CONNECTIONS,
                                                     timeout=5, decode_responses=True, socket_timeout=5,
                                                     socket_connect_timeout=3, health_check_interval=30)
        client = redis.Redis(connection_pool=pool)
        if ping:
            try:
                client.ping()
            except redis.RedisError as e:
                where = urlsplit(url)
                raise ValueError(f"{variable}: cannot reach Redis at {where.hostname}:{where.port} "
                                 f"({str(e)[:120]})") from None
        return cls(client, limits)

    @staticmethod
    def _remember(cache: dict, key: Any, value: Any) -> None:
        """Keep ``value`` in one of this process's small caches (emptied past ``CACHE_MAX`` entries: rooms go)."""
        if len(cache) >= CACHE_MAX:
            cache.clear()
        cache[key] = value

    # --- calling Redis ---------------------------------------------------------------------------------

    def _run(self, name: str, code: str, *args: Any, keys: tuple[str, ...] = ()) -> list:
        if not codes.is_code(code):
            raise no_room()
        try:
            out = self._scripts[name](keys=[room_key(code), *keys], args=[repr(self.clock()), *args])
        except redis.ResponseError as e:             # the script failed: say so, it is not a network problem
            raise RoomError(f"The class's store refused this: {str(e)[:120]}", status=500) from None
        except redis.RedisError:
            raise RoomError(UNREACHABLE, status=503) from None
        status = out[0]
        if status in ("ok", "again", "new"):
            return out
        raise self._refusal(status, code, out)

    def _refusal(self, status: str, code: str, out: list) -> RoomError:
        if status == "gone":
            return no_room(codes.shown_code(code))
        return refusal(status, self.limits, out[1] if status == "closed" else "")

    def _lead_view(self, code: str, out: list) -> LeadView:
        _, chapter, phase, run_no, students, guesses, version, expires_ms, deadline, nicknames = out[:10]
        now = self.clock()
        left = max(0.0, float(deadline) - now) if deadline and phase == OPEN else None
        return LeadView(code, int(chapter), phase, int(run_no), int(students), int(guesses), int(version),
                        max(0.0, (int(expires_ms) / 1000 - now) / 60), left, nicknames == "1")

    def _pipeline(self, build: Callable[[Any], None]) -> list:
        with _reachable(), self.r.pipeline(transaction=False) as p:
            build(p)
            return p.execute()

    # --- the presenter --------------------------------------------------------------------------------

    def create(self, nicknames: bool = False) -> tuple[str, str]:
        now = self.clock()
        secret = codes.new_secret()
        for _ in range(20):
            code = codes.new_code()
            with _reachable():
                out = self._scripts["CREATE"](keys=[ROOMS_KEY, room_key(code)], args=[
                    code, codes.secret_hash(secret), repr(now), str(int((now + self.limits.life_s) * 1000)),
                    str(self.limits.rooms), "1" if nicknames else "0"])
            if out[0] == "ok":
                self._remember(self._asks_nicknames, code, bool(nicknames))
                return code, secret
            if out[0] == "full":
                raise refusal("rooms", self.limits)
        raise RoomError("Could not find a free class code: try again.", status=503)

    def _led(self, name: str, code: str, secret: str, *args: Any, keys: tuple[str, ...] = ()) -> list:
        if not isinstance(secret, str):
            raise refusal("not_lead", self.limits)
        return self._run(name, code, codes.secret_hash(secret), *args, keys=keys)

    def lead(self, code: str, secret: str) -> LeadView:
        return self._lead_view(code, self._led("LEAD", code, secret))

    def end(self, code: str, secret: str) -> None:
        self._led("END", code, secret, code, keys=(ROOMS_KEY,))

    def set_chapter(self, code: str, secret: str, question: Question) -> LeadView:
        return self._lead_view(code, self._led("SET_CHAPTER", code, secret, str(question.number),
                                               wire.dumps(question)))

    def publish_run(self, code: str, secret: str, question: Question, shown: Shown, memo: Any,
                    setting: Any) -> LeadView:
        try:
            memo_text = wire.dumps(memo)
        except TypeError as e:
            raise RoomError(f"This run cannot be shared through the class's store: {e}.") from None
        return self._lead_view(code, self._led("PUBLISH", code, secret, str(question.number), wire.dumps(question),
                                               wire.dumps(shown), memo_text, wire.dumps(setting), shown.setting))

    def choose_setting(self, code: str, secret: str, chapter: int, label: str, setting: Any) -> LeadView:
        return self._lead_view(code, self._led("CHOOSE_SETTING", code, secret, str(chapter), label,
                                               wire.dumps(setting)))

    def lock(self, code: str, secret: str, locked: bool) -> LeadView:
        return self._lead_view(code, self._led("LOCK", code, secret, "1" if locked else "0"))

    def start_timer(self, code: str, secret: str, seconds: float) -> LeadView:
        seconds = check_timer(seconds)
        return self._lead_view(code, self._led("TIMER", code, secret, repr(self.clock() + seconds)))

    def begin_reveal(self, code: str, secret: str) -> RevealJob:
        _, chapter, run_no, memo, setting, flat = self._led("BEGIN_REVEAL", code, secret)
        guesses = {flat[i]: json.loads(flat[i + 1]) for i in range(0, len(flat), 2)}
        return RevealJob(int(chapter), int(run_no), wire.loads(memo), wire.loads(setting) if setting else None,
                         guesses)

    def finish_reveal(self, code: str, secret: str, job: RevealJob, revealed: Revealed | None,
                      result: ChapterResult | None = None) -> LeadView:
        return self._lead_view(code, self._led(
            "FINISH_REVEAL", code, secret, str(job.chapter), str(job.run_no),
            wire.dumps(revealed) if revealed is not None else "", wire.dumps(result) if result is not None else ""))

    def push_live(self, code: str, secret: str, live: LiveShown) -> LeadView:
        return self._lead_view(code, self._led("PUSH_LIVE", code, secret, wire.dumps(live)))

    def roster(self, code: str, secret: str) -> list[Student]:
        _, flat, answered = self._led("ROSTER", code, secret)
        done = set(answered)
        people = [(json.loads(flat[i + 1]), flat[i] in done) for i in range(0, len(flat), 2)]
        return sorted((Student(int(h), nick, a) for (h, nick), a in people), key=lambda s: s.handle)

    def remove(self, code: str, secret: str, handle: int) -> LeadView:
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise refusal("no_student", self.limits)
        return self._lead_view(code, self._led("REMOVE", code, secret, str(handle)))

    def results(self, code: str, secret: str) -> list[ChapterResult]:
        return [wire.loads(r) for r in self._led("RESULTS", code, secret)[1]]

    # --- the students ---------------------------------------------------------------------------------

    def _asks(self, code: str) -> bool:
        if code not in self._asks_nicknames:
            with _reachable():
                flag = self.r.hget(room_key(code), "nicknames")
            if flag is None:
                raise no_room(codes.shown_code(code))
            self._remember(self._asks_nicknames, code, flag == "1")
        return self._asks_nicknames[code]

    def join(self, code: str, student: str | None, nickname: str | None = None) -> Joined:
        if not codes.is_code(code):
            raise no_room()
        old = student if isinstance(student, str) else ""
        nick = ""
        if not old or nickname:                                  # a reload need not give its nickname again
            nick = nickname_of(nickname, self._asks(code))
        new = codes.new_student()
        out = self._run("JOIN", code, old, new, nick, names.same_key(nick) if nick else "",
                        str(self.limits.students))
        if out[0] == "again":
            handle, nick = json.loads(out[1])
            return Joined(old, int(handle), nick, json.loads(out[2]) if out[2] else None)
        return Joined(new, int(out[1]), out[2], None)

    def _question(self, code: str, chapter: int) -> Question | None:
        """The room's question (cached when it is ``chapter``'s: a chapter's question never changes); no_room when
        the room is gone."""
        key = (code, chapter)
        if key not in self._questions:
            raw, exp = self._pipeline(lambda p: p.hmget(room_key(code), ("question", "expires_ms")))[0]
            if exp is None or int(exp) <= self.clock() * 1000:
                raise no_room(codes.shown_code(code))
            question = wire.loads(raw)
            if question is None or question.number != chapter:
                return question
            self._remember(self._questions, key, question)
        return self._questions[key]

    def guess(self, code: str, student: str, chapter: int, run_no: int, value: Any) -> Any:
        plain_guess(value)
        if not codes.is_code(code):
            raise no_room()
        if not isinstance(student, str) or isinstance(chapter, bool) or not isinstance(chapter, int) \
                or isinstance(run_no, bool) or not isinstance(run_no, int):
            raise refusal("not_joined" if not isinstance(student, str) else "moved", self.limits)
        question = self._question(code, chapter)
        if question is not None and question.number != chapter:
            raise refusal("moved", self.limits)
        kept = guess_of(question, value)
        self._run("GUESS", code, student, str(chapter), str(run_no), json.dumps(kept), str(self.limits.sends),
                  repr(self.limits.window_s))
        return kept

    def class_view(self, code: str) -> ClassView:
        if not codes.is_code(code):
            raise no_room()
        key = room_key(code)
        fields, shown, revealed, live, removed = self._pipeline(lambda p: (
            p.hmget(key, VIEW_FIELDS), p.get(key + ":shown"), p.get(key + ":revealed"), p.get(key + ":live"),
            p.hvals(key + ":removed")))
        f = dict(zip(VIEW_FIELDS, fields))
        now = self.clock()
        if f["expires_ms"] is None or int(f["expires_ms"]) <= now * 1000:
            raise no_room(codes.shown_code(code))
        deadline = float(f["deadline"]) if f["deadline"] else None
        phase = phase_now(f["phase"], deadline, now)
        shown_run: Shown | None = wire.loads(shown)
        if shown_run is not None and f["setting_label"] != shown_run.setting:
            shown_run = dataclasses.replace(shown_run, setting=f["setting_label"] or "")
        return ClassView(code, int(f["chapter"]), phase, int(f["run_no"]), int(f["stage"]), wire.loads(f["question"]),
                         deadline if phase == OPEN else None, shown_run,
                         wire.loads(revealed) if phase == "revealed" else None, wire.loads(live), int(f["live_no"]),
                         f["nicknames"] == "1", tuple(sorted(int(h) for h in removed)))

    def stages(self, codes_: Iterable[str]) -> dict[str, int | None]:
        wanted = [c for c in codes_ if codes.is_code(c)]
        answers = self._pipeline(lambda p: [p.hmget(room_key(c), ("stage", "expires_ms")) for c in wanted])
        now_ms = self.clock() * 1000
        return {c: int(stage) if stage is not None and exp is not None and int(exp) > now_ms else None
                for c, (stage, exp) in zip(wanted, answers)}

    def stage(self, code: str) -> int:
        stage = self.stages([code]).get(code)
        if stage is None:
            raise no_room(codes.shown_code(code) if codes.is_code(code) else "")
        return stage

    def version(self, code: str) -> int:
        if not codes.is_code(code):
            raise no_room()
        version, exp = self._pipeline(lambda p: p.hmget(room_key(code), ("version", "expires_ms")))[0]
        if version is None or exp is None or int(exp) <= self.clock() * 1000:
            raise no_room(codes.shown_code(code))
        return int(version)

    def rooms(self) -> int:
        """The rooms alive in this Redis (all replicas')."""
        now_ms = self.clock() * 1000
        with _reachable():
            return int(self.r.zcount(ROOMS_KEY, f"({now_ms}", "+inf"))


__all__ = ["RedisRoomStore", "check_url", "room_key", "PREFIX", "ROOMS_KEY", "UNREACHABLE"]
