"""Hostile input to a class's handlers, deterministic: join codes, presenter secrets, guesses, student ids and the
names a page keeps (its stored ids, its ``me``), as HTML, huge, of the wrong type, or replayed. Every call answers
with a message (no exception reaches the page), nothing from the input is drawn as HTML, the room changes only
as its presenter says, a replayed send counts once, and the presenter's secret reaches no student."""
from __future__ import annotations

import contextlib
import itertools
import random

import pytest

from components.pages.classroom import lead as ld
from components.pages.classroom import student as st
from components.render.base import empty_figure
from components.serving.classroom import ClassLimits, MemoryRoomStore
from tests.class_helpers import Page, sent_text
from tools.fuzz import _BAD_ANY_NUMBER, _NOT_NUMBERS

MARK = "<img src=x onerror=alert(1)>"
HOSTILE_TEXT = [MARK, "<script>alert(1)</script>", "\"><svg onload=alert(1)>", "'; DROP TABLE rooms; --",
                "\x00\x01", "\u202e7KX4MP9A", "x" * 100_000, "7KX4MP9A" * 1000, "../../etc/passwd", "🎓" * 50,
                "&lt;b&gt;", "javascript:alert(1)"]
WRONG_TYPES = [None, 0, -1, 70.5, True, [], ["7KX4MP9A"], {}, {"code": MARK}, b"bytes", float("nan")]


def _values(rng: random.Random, n: int) -> list:
    pool = HOSTILE_TEXT + WRONG_TYPES + _NOT_NUMBERS + _BAD_ANY_NUMBER
    return [rng.choice(pool) for _ in range(n)]


def text_of(outputs) -> str:
    return sent_text(outputs)


def assert_safe(outputs) -> None:
    """Nothing hostile drawn as markup: the marker's tags never appear unescaped in any output."""
    text = text_of(outputs)
    for raw in ("<img src=x", "<script>", "<svg onload"):
        assert raw not in text, text[:400]


@pytest.fixture
def room():
    store = MemoryRoomStore(ClassLimits(rooms=4, students=40, sends=3, window_s=60.0))
    lead = ld.start_class(store, "http://127.0.0.1:7860/")[0]
    figs = [empty_figure("a", "b"), empty_figure("c", "d")]
    ld.publish_run(store, lead, 1, ("<p>run</p>", *figs, {"verify_ms": [30.0 + i for i in range(9)]}, ""), None)
    return store, lead


def test_hostile_codes_and_stored_ids_get_a_message(room):
    store, lead = room
    rng = random.Random(0)
    ids_palette = [None, MARK, {"last": MARK, "ids": {MARK: MARK}}, {"ids": [1, 2]}, {"last": 5},
                   {"last": lead["code"], "ids": {lead["code"]: MARK}}, {"ids": {f"c{i}": "x" for i in range(10_000)}}]
    students = store.lead(lead["code"], lead["secret"]).students
    for code, ids in itertools.product(HOSTILE_TEXT + WRONG_TYPES + _values(rng, 20), ids_palette):
        out = st.join_class(store, code, ids)
        assert_safe(out)
        assert "sd-class-status" in out[0] and len(out[0]) < 400
    added = store.lead(lead["code"], lead["secret"]).students - students
    assert added <= len(ids_palette)            # only the stored-ids cases naming the real room joined


def test_hostile_me_states_and_guesses_are_refused_and_never_counted(room):
    store, lead = room
    rng = random.Random(1)
    me = Page(store, lead["code"]).me
    fakes = [None, MARK, {}, {"code": lead["code"]}, {"code": lead["code"], "student": MARK},
             {"code": MARK, "student": me["student"]}, {**me, "chapter": MARK}, {**me, "chapter": 99},
             {**me, "chapter": 2}, {**me, "run_no": MARK}, {**me, "run_no": -1},
             {**me, "student": "A" * 16}, {**me, "code": lead["code"].lower()}]
    for fake, (slider, radio) in itertools.product(fakes, zip(_values(rng, 12), _values(rng, 12))):
        for handler in (st.refresh_class, st.live_of):
            assert_safe(handler(store, fake))
        said = st.send_guess(store, fake, slider, radio)
        assert_safe(said)
        assert "Not sent" in said or "has not joined" in said, said
    for slider in HOSTILE_TEXT + WRONG_TYPES + _NOT_NUMBERS + _BAD_ANY_NUMBER + [0.5, 8.25, -3]:
        said = st.send_guess(store, me, slider, MARK)
        assert_safe(said)
        assert "Not sent" in said
    assert store.lead(lead["code"], lead["secret"]).guesses == 0


def test_a_replayed_send_counts_once_and_is_rate_limited(room):
    store, lead = room
    me = Page(store, lead["code"]).me
    said = [st.send_guess(store, me, 4.5, None) for _ in range(10)]
    assert all("Sent: 4.5" in s for s in said[:3])
    assert all("at most 3 sends in 60 s" in s for s in said[3:])
    view = store.lead(lead["code"], lead["secret"])
    assert view.guesses == 1 and store.student_view(lead["code"], me["student"]).guess == 4.5


def test_forged_leads_never_move_the_class_and_never_see_a_secret(room):
    store, lead = room
    code, secret = lead["code"], lead["secret"]
    me = Page(store, code).me
    rng = random.Random(2)
    secrets_ = _values(rng, 10) + [me["student"], "A" * 32, secret[:-1] + ("B" if secret[-1] == "A" else "A"),
                                   secret + "A"]
    forged = [None, MARK, me, *({"code": code, "secret": s} for s in secrets_), {"code": MARK, "secret": secret},
              {"code": code.lower(), "secret": secret.swapcase()}]
    before = store.lead(code, secret)
    for bad in forged:
        for out in (ld.lock_guesses(store, bad), ld.lead_poll(store, bad, -1), ld.end_class(store, bad),
                    ld.reveal_to_class(store, None, bad), ld.follow_chapter(store, bad, 3),
                    ld.push_live(store, bad, {"schema": MARK})):
            assert_safe(out)
            assert secret not in text_of(out)
        for link in (MARK, f"{code}.{MARK}", f"{code}.{secret[:-1]}", "x" * 5000, 5):
            out = ld.restore_lead(store, link, bad, "http://127.0.0.1:7860/")
            assert_safe(out)
            assert secret not in text_of(out)
        for value in (MARK, 5, None):
            with pytest.warns(UserWarning, match="did not get this setting") if bad else contextlib.nullcontext():
                ld.choose_setting(store, bad, value, number=5)
    after = store.lead(code, secret)
    assert (after.chapter, after.phase, after.run_no, store.rooms()) == (before.chapter, before.phase,
                                                                         before.run_no, 1)


def test_a_replayed_join_is_the_same_student_and_fills_nothing(room):
    store, lead = room
    first = Page(store, lead["code"])
    for _ in range(100):
        assert Page(store, lead["code"], first.ids).me["student"] == first.me["student"]
    assert store.lead(lead["code"], lead["secret"]).students == 1
