"""The classes' room stores without a page, each test run on both: this process's ``MemoryRoomStore`` and
``RedisRoomStore`` on a real redis-server (started by the session's fixture; skipped, saying why, without the
binary). Join codes, joining, nicknames, guessing and the room's limits, expiry (the store's clock; Redis's own TTL
separately), the per-student rate limit, the guess timer, removing a student, the results kept, the secret never
in what a student is sent nor kept in the clear, and many students guessing at once counted exactly."""
from __future__ import annotations

import dataclasses
import json
import math
import time

import pytest

from components.serving.classroom import (LOCKED, OPEN, REVEALED, WAITING, ChapterResult, ClassLimits, ClassView,
                                          GuessSpec, MemoryRoomStore, Question, Revealed, RoomError, Shown, Truth,
                                          parse_code, shown_code)
from components.serving.classroom import codes
from tests.class_helpers import at_once

SHOWN = Shown("<div>the run</div>", ('{"data": []}', None), "")
SLIDER = Question(1, 12, "One", "<p>text</p>", GuessSpec("how many?", 0, 10, 0.5))
WHOLE = Question(2, 12, "Two", "<p>text</p>", GuessSpec("how many?", 0, 4, 1))
CHOICE = Question(3, 12, "Three", "<p>text</p>", GuessSpec("same?", choices=("identical", "different")))


class Clock:
    def __init__(self) -> None:
        self.t = time.time()           # near the real time: Redis expires a room's keys at their real expiry

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory", "redis"])
def make(request):
    """A function (clock=None, **limits) -> a fresh store of the kind the test runs on."""
    if request.param == "memory":
        return lambda clock=None, **limits: MemoryRoomStore(ClassLimits(**limits), clock or Clock())
    url = request.getfixturevalue("redis_db")
    from components.serving.classroom.redis_store import RedisRoomStore

    def redis_store(clock=None, **limits):
        s = RedisRoomStore.from_url(url, ClassLimits(**limits))
        s.clock = clock or Clock()
        return s
    return redis_store


def opened(s, question: Question = SLIDER) -> tuple[str, str]:
    """A room with the presenter's run of ``question``'s chapter published (guessing open)."""
    code, secret = s.create()
    s.publish_run(code, secret, question, SHOWN, {"memo": 1}, None)
    return code, secret


def revealed_of(guesses: dict) -> Revealed:
    return Revealed((None, None), "{}", "<p>summary</p>", Truth(2.0, 1.5, 2.5, (), "2.0"),
                    tuple((v, "right") for v in sorted(set(guesses.values()))), 2, 1, len(guesses))


# --- codes ----------------------------------------------------------------------------------------------------

def test_the_code_alphabet_has_no_look_alikes_and_enough_codes():
    assert len(set(codes.ALPHABET)) == len(codes.ALPHABET) == 21
    for gone in "0OQ1IL2Z5S8BGUV":
        assert gone not in codes.ALPHABET
    assert len(codes.ALPHABET) ** codes.CODE_LEN > 3e10          # 20 rooms: a stranger's guess lands ≈ 1 in 2·10⁹


def test_codes_are_random_over_the_alphabet():
    made = [codes.new_code() for _ in range(3000)]
    assert len(set(made)) == len(made)
    counts = {ch: sum(c.count(ch) for c in made) for ch in codes.ALPHABET}
    expected = 3000 * codes.CODE_LEN / 21
    assert all(abs(n - expected) < 0.25 * expected for n in counts.values()), counts     # every character used


def test_secrets_and_student_ids_are_long_url_safe_tokens():
    secrets_ = {codes.new_secret() for _ in range(200)}
    assert len(secrets_) == 200 and all(len(s) == 32 and codes.check_token(s, "x", codes.SECRET_BYTES) for s in secrets_)
    assert len(codes.new_student()) == 16
    for bad in (None, "", "a" * 31, "a" * 33, "<script>alert(1)</script>xxxxxxx", 12345, ["a" * 32]):
        with pytest.raises(ValueError, match="not a presenter secret"):
            codes.check_token(bad, "presenter secret", codes.SECRET_BYTES)


@pytest.mark.parametrize("typed", ["7kx4mp9a", "7KX4-MP9A", " 7kx4 mp9a ", "7KX4MP9A"])
def test_a_typed_code_is_read_forgivingly(typed):
    assert parse_code(typed) == "7KX4MP9A" and shown_code("7KX4MP9A") == "7KX4-MP9A"


@pytest.mark.parametrize("bad", ["7KX4MP9", "7KX4MP9AA", "7KX4MP90", "OKX4MP9A", "", None, 7, ["7KX4MP9A"],
                                 "<img src=x>", "x" * 10_000, "7KX4\u2011MP9A"])
def test_a_bad_code_is_refused_with_what_a_code_looks_like(bad):
    with pytest.raises(ValueError, match="is not a class code: a code is 8 letters and digits") as e:
        parse_code(bad)
    assert len(str(e.value)) < 160


# --- joining and guessing --------------------------------------------------------------------------------------

def test_a_room_from_its_start_to_a_reveal(make):
    s = make()
    code, secret = s.create()
    assert s.lead(code, secret).phase == WAITING
    a, b = s.join(code, None), s.join(code, None)
    assert a.student != b.student and (a.handle, b.handle) == (1, 2) and s.lead(code, secret).students == 2
    with pytest.raises(RoomError, match="Wait for the presenter's run"):
        s.guess(code, a.student, 1, 0, 3)
    s.publish_run(code, secret, SLIDER, SHOWN, {"memo": 1}, None)
    view = s.class_view(code)
    assert (view.phase, view.run_no, view.shown, view.question) == (OPEN, 1, SHOWN, SLIDER)
    assert s.guess(code, a.student, 1, 1, 3) == 3
    s.guess(code, a.student, 1, 1, 4.5)                      # the latest guess counts
    s.guess(code, b.student, 1, 1, 2.5)
    assert s.lead(code, secret).guesses == 2 and s.join(code, a.student).guess == 4.5
    with pytest.raises(RoomError, match="moved on"):
        s.guess(code, a.student, 1, 0, 3)                    # a guess on an older run
    with pytest.raises(RoomError, match="moved on"):
        s.guess(code, a.student, 2, 1, 3)
    s.lock(code, secret, True)
    with pytest.raises(RoomError, match="closed"):
        s.guess(code, a.student, 1, 1, 1)
    job = s.begin_reveal(code, secret)
    assert job.guesses == {a.student: 4.5, b.student: 2.5} and job.memo == {"memo": 1}
    result = ChapterResult(1, "One", 1, 0.0, "2.0", 2.0, 1.5, 2.5, (), ((2.5, "right"), (4.5, "wrong")), 1, 2)
    assert s.finish_reveal(code, secret, job, revealed_of(job.guesses), result).phase == REVEALED
    v = s.class_view(code)
    assert v.revealed == revealed_of(job.guesses) and v.phase == REVEALED
    assert s.results(code, secret) == [result]
    s.set_chapter(code, secret, WHOLE)
    v = s.class_view(code)
    assert (v.chapter, v.phase, v.shown, v.revealed, v.question) == (2, WAITING, None, None, WHOLE)
    assert s.join(code, a.student).guess is None and s.results(code, secret) == [result]


def test_a_guess_is_checked_against_the_rooms_question(make):
    s = make()
    code, secret = opened(s, WHOLE)
    me = s.join(code, None).student
    assert s.guess(code, me, 2, 1, 3.0) == 3 and isinstance(s.join(code, me).guess, int)
    for bad in (5, -1, 2.5, "3", "identical"):
        with pytest.raises(RoomError, match="the guess must be a number from 0 to 4|The guess must be"):
            s.guess(code, me, 2, 1, bad)
    s.publish_run(code, secret, CHOICE, SHOWN, {"memo": 2}, None)
    assert s.guess(code, me, 3, 2, "different") == "different"
    with pytest.raises(RoomError, match="The guess must be one of identical, different"):
        s.guess(code, me, 3, 2, "same")


def test_a_reload_joins_as_the_same_student_and_keeps_the_guess(make):
    s = make()
    code, _ = opened(s)
    me = s.join(code, None)
    s.guess(code, me.student, 1, 1, 2)
    again = s.join(code, me.student)
    assert (again.student, again.handle, again.guess) == (me.student, me.handle, 2)
    assert s.join(code, "not-one-of-ours").student != me.student           # an unknown id is a new student


def test_a_replayed_guess_counts_once(make):
    s = make(sends=50)
    code, secret = opened(s)
    me = s.join(code, None).student
    version = s.version(code)
    for _ in range(10):
        s.guess(code, me, 1, 1, 3)
    assert s.lead(code, secret).guesses == 1 and s.version(code) == version + 1


def test_a_guess_must_be_a_plain_value(make):
    s = make()
    code, _ = opened(s)
    me = s.join(code, None).student
    for bad in (math.nan, math.inf, True, None, [1], {"a": 1}, "x" * 201, b"3"):
        with pytest.raises(RoomError, match="A guess is a number or one of the answers offered"):
            s.guess(code, me, 1, 1, bad)


def test_a_stale_reveal_is_dropped_and_a_failed_one_opens_guessing_again(make):
    s = make()
    code, secret = opened(s)
    job = s.begin_reveal(code, secret)
    s.publish_run(code, secret, SLIDER, SHOWN, {"memo": 2}, None)        # the presenter ran again meanwhile
    assert s.finish_reveal(code, secret, job, revealed_of({})).phase == OPEN
    job = s.begin_reveal(code, secret)
    assert s.lead(code, secret).phase == LOCKED
    assert s.finish_reveal(code, secret, job, None).phase == OPEN
    assert s.results(code, secret) == []


def test_reveal_before_a_run_is_refused(make):
    s = make()
    code, secret = s.create()
    with pytest.raises(RoomError, match="Run this chapter first"):
        s.begin_reveal(code, secret)


def test_the_setting_chosen_reaches_the_class(make):
    s = make()
    code, secret = opened(s)
    stage = s.stage(code)
    s.choose_setting(code, secret, 1, "the bug: none", "none")
    assert s.class_view(code).shown.setting == "the bug: none" and s.stage(code) == stage + 1
    assert s.begin_reveal(code, secret).setting == "none"


# --- the timer ----------------------------------------------------------------------------------------------

def test_a_timer_locks_guessing_at_zero(make):
    clock = Clock()
    s = make(clock)
    code, secret = opened(s)
    me = s.join(code, None).student
    with pytest.raises(RoomError, match="1 to 600 seconds"):
        s.start_timer(code, secret, 0)
    view = s.start_timer(code, secret, 30)
    assert view.timer_left == pytest.approx(30) and s.class_view(code).deadline == pytest.approx(clock.t + 30)
    clock.t += 29
    s.guess(code, me, 1, 1, 3)
    assert s.lead(code, secret).timer_left == pytest.approx(1)
    clock.t += 1.5
    with pytest.raises(RoomError, match="Guessing is closed"):
        s.guess(code, me, 1, 1, 4)
    view = s.class_view(code)
    assert (view.phase, view.deadline) == (LOCKED, None) and s.lead(code, secret).phase == LOCKED
    with pytest.raises(RoomError, match="while guessing is open"):
        s.start_timer(code, secret, 10)
    s.lock(code, secret, False)                              # open again: the timer is gone
    assert s.class_view(code).phase == OPEN and s.guess(code, me, 1, 1, 4) == 4
    assert s.join(code, me).guess == 4


# --- who may do what ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("forged", ["", "x" * 32, None, 5, "<script>", "a" * 100_000])
def test_leading_takes_the_secret(make, forged):
    s = make()
    code, secret = opened(s)
    student = s.join(code, None)
    for attempt in (lambda k: s.set_chapter(code, k, WHOLE), lambda k: s.lock(code, k, True),
                    lambda k: s.begin_reveal(code, k), lambda k: s.end(code, k), lambda k: s.lead(code, k),
                    lambda k: s.publish_run(code, k, WHOLE, SHOWN, None, None), lambda k: s.start_timer(code, k, 5),
                    lambda k: s.remove(code, k, 1), lambda k: s.results(code, k), lambda k: s.roster(code, k)):
        for key in (forged, student.student, code, codes.secret_hash(secret)):
            with pytest.raises(RoomError, match="Only the presenter's page can lead this class"):
                attempt(key)
    assert s.lead(code, secret).chapter == 1 and s.lead(code, secret).phase == OPEN


def test_another_rooms_secret_does_not_lead_this_one(make):
    s = make()
    code, _ = s.create()
    _, other = s.create()
    with pytest.raises(RoomError, match="Only the presenter's page"):
        s.set_chapter(code, other, WHOLE)


def test_a_class_view_carries_no_secret_no_id_and_no_ones_guess(make):
    s = make()
    code, secret = opened(s)
    a, b = s.join(code, None), s.join(code, None)
    s.guess(code, a.student, 1, 1, 3)
    s.guess(code, b.student, 1, 1, 9.5)
    names = {f.name for f in dataclasses.fields(ClassView)}
    assert not names & {"secret", "memo", "guesses", "students", "setting", "answers"}
    job = s.begin_reveal(code, secret)
    s.finish_reveal(code, secret, job, revealed_of({}))
    text = json.dumps(dataclasses.asdict(s.class_view(code)), default=str)
    assert secret not in text and codes.secret_hash(secret) not in text
    assert a.student not in text and b.student not in text and "9.5" not in text


def test_the_secret_is_kept_hashed(make, request):
    s = make()
    code, secret = s.create()
    if isinstance(s, MemoryRoomStore):
        kept = json.dumps(dataclasses.asdict(s._rooms[code]), default=str)
    else:
        kept = json.dumps({k: s.r.dump(k).hex() if s.r.type(k) != "hash" else s.r.hgetall(k) for k in s.r.keys("*")})
    assert secret not in kept and codes.secret_hash(secret) in kept


# --- nicknames and removing a student ------------------------------------------------------------------------

def test_nicknames_are_off_by_default_and_checked_when_asked_for(make):
    s = make()
    code, secret = s.create()
    assert s.join(code, None, "Ann").nickname == ""             # an anonymous class ignores a nickname
    code, secret = s.create(nicknames=True)
    assert s.lead(code, secret).nicknames and s.class_view(code).nicknames
    with pytest.raises(RoomError, match="asks for a nickname"):
        s.join(code, None)
    for bad, words in (("<b>x</b>", "letters, digits"), ("x" * 21, "1 to 20"), ("xXb1tchXx", "choose another"),
                       ("\u202eAnn", "letters, digits"), (5, "text of 1 to 20")):
        with pytest.raises(RoomError, match=words):
            s.join(code, None, bad)
    ann = s.join(code, None, "  Ann  ")
    assert ann.nickname == "Ann"
    with pytest.raises(RoomError, match="has that nickname already"):
        s.join(code, None, "ANN")
    assert s.join(code, ann.student).nickname == "Ann"          # a reload keeps it, without giving it again
    assert [(p.handle, p.nickname, p.answered) for p in s.roster(code, secret)] == [(1, "Ann", False)]


def test_the_presenter_removes_a_student(make):
    s = make()
    code, secret = opened(s)
    a, b = s.join(code, None), s.join(code, None)
    s.guess(code, a.student, 1, 1, 3)
    s.guess(code, b.student, 1, 1, 4)
    assert [(p.handle, p.answered) for p in s.roster(code, secret)] == [(1, True), (2, True)]
    stage = s.stage(code)
    view = s.remove(code, secret, a.handle)
    assert (view.students, view.guesses) == (1, 1) and s.stage(code) == stage + 1
    assert s.class_view(code).removed == (a.handle,)
    with pytest.raises(RoomError, match="removed you"):
        s.guess(code, a.student, 1, 1, 5)
    with pytest.raises(RoomError, match="removed you"):
        s.join(code, a.student)
    with pytest.raises(RoomError, match="not in this class"):
        s.remove(code, secret, a.handle)
    assert list(s.begin_reveal(code, secret).guesses.values()) == [4]


# --- limits --------------------------------------------------------------------------------------------------

def test_rooms_per_server_and_students_per_room(make):
    s = make(rooms=2, students=3)
    code, _ = s.create()
    s.create()
    with pytest.raises(RoomError, match="already running 2 classes"):
        s.create()
    for _ in range(3):
        s.join(code, None)
    with pytest.raises(RoomError, match="This class is full: it has its 3 students") as e:
        s.join(code, None)
    assert e.value.gone


def test_limits_from_the_environment():
    lim = ClassLimits.from_env({"SPECDEC_CLASS_ROOMS": "5", "SPECDEC_CLASS_STUDENTS": "40", "SPECDEC_CLASS_HOURS": "1.5"})
    assert (lim.rooms, lim.students, lim.life_s) == (5, 40, 5400.0)
    assert ClassLimits.from_env({}) == ClassLimits() and ClassLimits().students == 500
    for name, raw in (("SPECDEC_CLASS_ROOMS", "many"), ("SPECDEC_CLASS_STUDENTS", "-3"), ("SPECDEC_CLASS_HOURS", "0"),
                      ("SPECDEC_CLASS_ROOMS", "2.5")):
        with pytest.raises(ValueError, match=name):
            ClassLimits.from_env({name: raw})


def test_an_expired_room_is_gone(make):
    clock = Clock()
    s = make(clock, rooms=1, life_s=60.0)
    code, secret = opened(s)
    me = s.join(code, None).student
    clock.t += 59
    s.guess(code, me, 1, 1, 2)
    clock.t += 2
    for call in (lambda: s.class_view(code), lambda: s.join(code, me), lambda: s.stage(code),
                 lambda: s.lead(code, secret), lambda: s.guess(code, me, 1, 1, 3)):
        with pytest.raises(RoomError, match=f"There is no class {shown_code(code)} here") as e:
            call()
        assert e.value.gone
    assert s.stages([code]) == {code: None}
    s.create()                                       # the expired room no longer counts against the limit


def test_a_wrong_code_names_no_code_it_was_not_given_as(make):
    s = make()
    s.create()
    with pytest.raises(RoomError) as e:
        s.stage("<b>x</b>" * 1000)
    assert "<b>" not in str(e.value) and len(str(e.value)) < 200


def test_an_ended_room_is_gone(make):
    s = make()
    code, secret = opened(s)
    s.end(code, secret)
    with pytest.raises(RoomError, match="There is no class"):
        s.join(code, None)
    assert s.stages([code]) == {code: None}


def test_sends_are_rate_limited_per_student(make):
    clock = Clock()
    s = make(clock, sends=3, window_s=10.0)
    code, secret = opened(s)
    me, other = s.join(code, None).student, s.join(code, None).student
    for v in (1, 2, 3):
        s.guess(code, me, 1, 1, v)
        clock.t += 1
    with pytest.raises(RoomError, match="at most 3 sends in 10 s. Your last guess counts"):
        s.guess(code, me, 1, 1, 4)
    s.guess(code, other, 1, 1, 5)                     # another student is not held back
    assert s.join(code, me).guess == 3
    clock.t += 8                                      # the first send has left the window
    s.guess(code, me, 1, 1, 4)
    assert s.join(code, me).guess == 4 and s.lead(code, secret).guesses == 2


# --- many at once -------------------------------------------------------------------------------------------

def test_students_joining_and_guessing_at_once_are_counted_exactly(make):
    s = make(students=400, sends=1000)
    code, secret = opened(s)
    n = 120
    ids: list[str] = [""] * n

    def student(i: int) -> None:
        ids[i] = s.join(code, None).student
        for v in (i % 5, i % 7, i % 5):          # changes its mind twice: the last one counts
            s.guess(code, ids[i], 1, 1, v)
        s.guess(code, ids[i], 1, 1, i % 5)       # and a replay
    assert not at_once(n, student)
    lead = s.lead(code, secret)
    assert lead.students == n and lead.guesses == n and len(set(ids)) == n
    job = s.begin_reveal(code, secret)
    assert sorted(job.guesses.values()) == sorted(i % 5 for i in range(n))
