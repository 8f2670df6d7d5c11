"""The classes' room store without a page: join codes (alphabet, entropy, forgiving reading), joining, guessing
and the room's limits, expiry with an injected clock, the per-student rate limit, the secret never in what a
student is sent, and many students guessing at once counted exactly."""
from __future__ import annotations

import dataclasses
import json
import math
import threading

import pytest

from components.serving.classroom import (LOCKED, OPEN, REVEALED, WAITING, ClassLimits, MemoryRoomStore, Revealed,
                                          RoomError, Shown, StudentView, parse_code, shown_code)
from components.serving.classroom import codes

SHOWN = Shown("<div>the run</div>", ('{"data": []}', None), "")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def store(clock: Clock | None = None, **limits) -> MemoryRoomStore:
    return MemoryRoomStore(ClassLimits(**limits), clock or Clock())


def opened(s: MemoryRoomStore, chapter: int = 1) -> tuple[str, str]:
    """A room with the presenter's run of ``chapter`` published (guessing open)."""
    code, secret = s.create()
    s.publish_run(code, secret, chapter, SHOWN, {"memo": 1}, None)
    return code, secret


# --- codes ----------------------------------------------------------------------------------------------------

def test_the_code_alphabet_has_no_look_alikes_and_enough_codes():
    assert len(set(codes.ALPHABET)) == len(codes.ALPHABET) == 21
    for gone in "0OQ1IL2Z5S8BGUV":
        assert gone not in codes.ALPHABET
    assert codes.ALPHABET == codes.ALPHABET.upper()
    assert len(codes.ALPHABET) ** codes.CODE_LEN > 3e10          # 20 rooms: a stranger's guess lands ≈ 1 in 2·10⁹


def test_codes_are_random_over_the_alphabet():
    made = [codes.new_code() for _ in range(3000)]
    assert len(set(made)) == len(made)
    assert all(len(c) == codes.CODE_LEN and set(c) <= set(codes.ALPHABET) for c in made)
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

def test_a_room_from_its_start_to_a_reveal():
    s = store()
    code, secret = s.create()
    assert s.lead(code, secret).phase == WAITING
    a = s.join(code, None)
    b = s.join(code, None)
    assert a != b and s.lead(code, secret).students == 2
    with pytest.raises(RoomError, match="Wait for the presenter's run"):
        s.guess(code, a, 1, 0, 3)
    s.publish_run(code, secret, 1, SHOWN, {"memo": 1}, None)
    view = s.student_view(code, a)
    assert (view.phase, view.run_no, view.shown) == (OPEN, 1, SHOWN)
    s.guess(code, a, 1, 1, 3)
    s.guess(code, a, 1, 1, 4)                          # the latest guess counts
    s.guess(code, b, 1, 1, 2.5)
    assert s.lead(code, secret).guesses == 2 and s.student_view(code, a).guess == 4
    with pytest.raises(RoomError, match="moved on"):
        s.guess(code, a, 1, 0, 3)                      # a guess on an older run
    with pytest.raises(RoomError, match="moved on"):
        s.guess(code, a, 2, 1, 3)
    s.lock(code, secret, True)
    with pytest.raises(RoomError, match="closed"):
        s.guess(code, a, 1, 1, 1)
    job = s.begin_reveal(code, secret)
    assert job.guesses == {a: 4, b: 2.5} and job.memo == {"memo": 1}
    revealed = Revealed((None, None), "{}", "<p>summary</p>", {a: "<p>A</p>", b: "<p>B</p>"}, 1, 2)
    assert s.finish_reveal(code, secret, job, revealed).phase == REVEALED
    va, vb = s.student_view(code, a), s.student_view(code, b)
    assert (va.answer, vb.answer, va.summary, va.histogram) == ("<p>A</p>", "<p>B</p>", "<p>summary</p>", "{}")
    s.set_chapter(code, secret, 2)
    v = s.student_view(code, a)
    assert (v.chapter, v.phase, v.shown, v.guess, v.histogram) == (2, WAITING, None, None, None)


def test_a_reload_joins_as_the_same_student_and_keeps_the_guess():
    s = store()
    code, _ = opened(s)
    me = s.join(code, None)
    s.guess(code, me, 1, 1, 2)
    assert s.join(code, me) == me and s.student_view(code, me).guess == 2
    assert s.join(code, "not-one-of-ours") != me                 # an unknown id is a new student


def test_a_replayed_guess_counts_once():
    s = store(sends=50)
    code, secret = opened(s)
    me = s.join(code, None)
    version = s.version(code)
    for _ in range(10):
        s.guess(code, me, 1, 1, 3)
    assert s.lead(code, secret).guesses == 1 and s.version(code) == version + 1


def test_a_guess_must_be_a_plain_value():
    s = store()
    code, _ = opened(s)
    me = s.join(code, None)
    for bad in (math.nan, math.inf, True, None, [1], {"a": 1}, "x" * 201, b"3"):
        with pytest.raises(RoomError, match="A guess is a number or one of the answers offered"):
            s.guess(code, me, 1, 1, bad)


def test_a_stale_reveal_is_dropped_and_a_failed_one_opens_guessing_again():
    s = store()
    code, secret = opened(s)
    job = s.begin_reveal(code, secret)
    s.publish_run(code, secret, 1, SHOWN, {"memo": 2}, None)        # the presenter ran again meanwhile
    assert s.finish_reveal(code, secret, job, Revealed((), "{}", "", {}, 0, 0)).phase == OPEN
    job = s.begin_reveal(code, secret)
    assert s.lead(code, secret).phase == LOCKED
    assert s.finish_reveal(code, secret, job, None).phase == OPEN


def test_reveal_before_a_run_is_refused():
    s = store()
    code, secret = s.create()
    with pytest.raises(RoomError, match="Run this chapter first"):
        s.begin_reveal(code, secret)


# --- who may do what ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("forged", ["", "x" * 32, None, 5, "<script>", "a" * 100_000])
def test_leading_takes_the_secret(forged):
    s = store()
    code, secret = opened(s)
    student = s.join(code, None)
    for attempt in (lambda k: s.set_chapter(code, k, 3), lambda k: s.lock(code, k, True),
                    lambda k: s.begin_reveal(code, k), lambda k: s.end(code, k), lambda k: s.lead(code, k),
                    lambda k: s.publish_run(code, k, 2, SHOWN, None, None)):
        for key in (forged, student, code):
            with pytest.raises(RoomError, match="Only the presenter's page can lead this class"):
                attempt(key)
    assert s.lead(code, secret).chapter == 1 and s.lead(code, secret).phase == OPEN


def test_another_rooms_secret_does_not_lead_this_one():
    s = store()
    code, _ = s.create()
    _, other = s.create()
    with pytest.raises(RoomError, match="Only the presenter's page"):
        s.set_chapter(code, other, 2)


def test_a_student_view_cannot_carry_the_secret_or_another_students_guess():
    s = store()
    code, secret = opened(s)
    a, b = s.join(code, None), s.join(code, None)
    s.guess(code, a, 1, 1, 3)
    s.guess(code, b, 1, 1, 7)
    names = {f.name for f in dataclasses.fields(StudentView)}
    assert not names & {"secret", "memo", "guesses", "students", "setting", "answers"}
    job = s.begin_reveal(code, secret)
    s.finish_reveal(code, secret, job, Revealed((None,), "{}", "<p>s</p>", {a: "mine-a", b: "mine-b"}, 1, 2))
    view = s.student_view(code, a)
    text = json.dumps(dataclasses.asdict(view), default=str)
    assert secret not in text and b not in text and "mine-b" not in text and "7" not in str(view.guess)
    assert view.answer == "mine-a"


# --- limits --------------------------------------------------------------------------------------------------

def test_rooms_per_server_and_students_per_room():
    s = store(rooms=2, students=3)
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
    assert ClassLimits.from_env({}) == ClassLimits()
    for name, raw in (("SPECDEC_CLASS_ROOMS", "many"), ("SPECDEC_CLASS_STUDENTS", "-3"), ("SPECDEC_CLASS_HOURS", "0"),
                      ("SPECDEC_CLASS_ROOMS", "2.5")):
        with pytest.raises(ValueError, match=name):
            ClassLimits.from_env({name: raw})


def test_an_expired_room_is_gone_and_its_memory_freed():
    clock = Clock()
    s = store(clock, rooms=1, life_s=60.0)
    code, secret = opened(s)
    me = s.join(code, None)
    clock.t += 59
    s.guess(code, me, 1, 1, 2)
    clock.t += 2
    for call in (lambda: s.student_view(code, me), lambda: s.join(code, me), lambda: s.stage(code),
                 lambda: s.lead(code, secret)):
        with pytest.raises(RoomError, match=f"There is no class {shown_code(code)} here") as e:
            call()
        assert e.value.gone
    assert s.sweep() == 0 and s.rooms() == 0
    s.create()                                       # the expired room no longer counts against the limit


def test_a_wrong_code_names_no_code_it_was_not_given_as():
    s = store()
    s.create()
    with pytest.raises(RoomError) as e:
        s.stage("<b>x</b>" * 1000)
    assert "<b>" not in str(e.value) and len(str(e.value)) < 200


def test_an_ended_room_is_gone():
    s = store()
    code, secret = opened(s)
    s.end(code, secret)
    assert s.rooms() == 0
    with pytest.raises(RoomError, match="There is no class"):
        s.join(code, None)


def test_sends_are_rate_limited_per_student():
    clock = Clock()
    s = store(clock, sends=3, window_s=10.0)
    code, secret = opened(s)
    me, other = s.join(code, None), s.join(code, None)
    for v in (1, 2, 3):
        s.guess(code, me, 1, 1, v)
        clock.t += 1
    with pytest.raises(RoomError, match="at most 3 sends in 10 s. Your last guess counts"):
        s.guess(code, me, 1, 1, 4)
    s.guess(code, other, 1, 1, 5)                     # another student is not held back
    assert s.student_view(code, me).guess == 3
    clock.t += 8                                      # the first send has left the window
    s.guess(code, me, 1, 1, 4)
    assert s.student_view(code, me).guess == 4 and s.lead(code, secret).guesses == 2


# --- many at once -------------------------------------------------------------------------------------------

def test_students_joining_and_guessing_at_once_are_counted_exactly():
    s = store(students=400, sends=1000)
    code, secret = opened(s)
    n = 200
    start = threading.Barrier(n)
    ids: list[str] = [""] * n
    errors: list[BaseException] = []

    def student(i: int) -> None:
        try:
            start.wait()
            ids[i] = s.join(code, None)
            for v in (i % 5, i % 7, i % 5):          # changes its mind twice: the last one counts
                s.guess(code, ids[i], 1, 1, v)
            s.guess(code, ids[i], 1, 1, i % 5)       # and a replay
        except BaseException as e:       # noqa: BLE001 - collected for the assertion
            errors.append(e)
    threads = [threading.Thread(target=student, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    lead = s.lead(code, secret)
    assert lead.students == n and lead.guesses == n and len(set(ids)) == n
    job = s.begin_reveal(code, secret)
    assert sorted(job.guesses.values()) == sorted(i % 5 for i in range(n))
