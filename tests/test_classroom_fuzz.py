"""Hostile input to a class, deterministic: the class's routes (join, guess, the event stream, the results) sent join
codes, student ids, nicknames, guesses, presenter secrets and whole bodies as HTML, huge, of the wrong type, or
replayed; and the presenter's handlers given forged leads. Every answer is a one-line refusal as JSON (no exception
reaches a page, no byte of the input comes back as markup), the room changes only as its presenter says, a replayed
send counts once, and the presenter's secret is in nothing a student receives."""
from __future__ import annotations

import contextlib
import itertools
import json
import random

import pytest
from starlette.testclient import TestClient

from components.pages.classroom import lead as ld
from components.pages.classroom import manage as mg
from components.render.base import empty_figure
from components.serving.classroom import ClassLimits, MemoryRoomStore
from components.serving.classroom.names import check_nickname
from tests.class_helpers import Page, class_app
from tools.fuzz import _BAD_ANY_NUMBER, _NOT_NUMBERS

MARK = "<img src=x onerror=alert(1)>"
HOSTILE_TEXT = [MARK, "<script>alert(1)</script>", "\"><svg onload=alert(1)>", "'; DROP TABLE rooms; --",
                "\x00\x01", "\u202e7KX4MP9A", "x" * 100_000, "7KX4MP9A" * 1000, "../../etc/passwd", "🎓" * 50,
                "&lt;b&gt;", "javascript:alert(1)", "=cmd|' /C calc'!A0"]
WRONG_TYPES = [None, 0, -1, 70.5, True, [], ["7KX4MP9A"], {}, {"code": MARK}, float("nan"), 10**400]


def _values(rng: random.Random, n: int) -> list:
    pool = HOSTILE_TEXT + WRONG_TYPES + _NOT_NUMBERS + _BAD_ANY_NUMBER
    return [rng.choice(pool) for _ in range(n)]


def fine_nickname(value) -> bool:
    try:
        check_nickname(value)
        return True
    except ValueError:
        return False


def as_json(value):
    """``value`` as the JSON a browser could send (NaN, Infinity and huge integers as JSON's extensions do)."""
    return json.dumps(value, allow_nan=True, default=str)


def assert_refused(r, statuses=(400, 403, 404, 409, 413, 429)) -> str:
    """A one-line JSON refusal with none of the input's markup in it."""
    assert r.status_code in statuses, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == "application/json" and r.headers["x-content-type-options"] == "nosniff"
    for raw in (b"<img", b"<script", b"<svg", b"<b>"):
        assert raw not in r.content, r.content[:300]
    error = r.json()["error"]
    assert isinstance(error, str) and "\n" not in error and 10 < len(error) < 300
    return error


@pytest.fixture
def room():
    store = MemoryRoomStore(ClassLimits(rooms=4, students=400, sends=3, window_s=60.0))
    lead = ld.start_class(store, "http://127.0.0.1:7860/", None, True)[0]          # nicknames asked for
    figs = [empty_figure("a", "b"), empty_figure("c", "d")]
    ld.publish_run(store, lead, 1, ("<p>run</p>", *figs, {"verify_ms": [30.0 + i for i in range(9)]}, ""), None)
    with TestClient(class_app(store), raise_server_exceptions=True) as client:
        yield store, lead, client


def test_hostile_joins_are_refused_in_one_line(room):
    store, lead, client = room
    rng = random.Random(0)
    code = lead["code"]
    for bad in HOSTILE_TEXT + WRONG_TYPES + _values(rng, 20):
        assert_refused(client.post("/class/api/join", content=as_json({"code": bad, "nickname": "Ann"})))
        if fine_nickname(bad):
            continue
        r = client.post("/class/api/join", content=as_json({"code": code, "student": bad, "nickname": bad}))
        said = assert_refused(r)
        assert r.status_code == 413 or "nickname" in said and r.json()["reason"] == "nickname"
    for body in (b"", b"null", b"[]", b"5", b'"code"', b"{", b"\xff\xfe", b'{"code": ' + b"[" * 5000,
                 b"{" + b" " * 100_000 + b"}"):
        assert_refused(client.post("/class/api/join", content=body))
    assert store.lead(code, lead["secret"]).students == 0


def test_hostile_guesses_are_refused_and_never_counted(room):
    store, lead, client = room
    rng = random.Random(1)
    me = Page(client, store, lead["code"], nickname="Ann").student
    code = lead["code"]
    good = {"code": code, "student": me, "chapter": 1, "run_no": 1}
    for key, bad in itertools.product(["code", "student", "chapter", "run_no", "value"],
                                      HOSTILE_TEXT + WRONG_TYPES + _values(rng, 10)):
        if key == "value" and isinstance(bad, (int, float)) and not isinstance(bad, bool) and 1 <= bad <= 8 \
                and (bad * 4).is_integer():
            continue                                       # a real guess
        body = {**good, "value": 2.0, key: bad}
        assert_refused(client.post("/class/api/guess", content=as_json(body)))
    for value in (0.5, 8.25, -3, 2.1, "2", "identical", MARK, None):
        assert_refused(client.post("/class/api/guess", json={**good, "value": value}))
    assert store.lead(code, lead["secret"]).guesses == 0


def test_a_replayed_send_counts_once_and_is_rate_limited(room):
    store, lead, client = room
    pg = Page(client, store, lead["code"], nickname="Bea")
    said = [pg.send(4.5) for _ in range(10)]
    assert all(s.get("guess") == 4.5 for s in said[:3])
    assert all("at most 3 sends in 60 s" in s["error"] and s["_status"] == 429 for s in said[3:])
    assert store.lead(lead["code"], lead["secret"]).guesses == 1


def test_a_replayed_join_is_the_same_student_and_fills_nothing(room):
    store, lead, client = room
    first = Page(client, store, lead["code"], nickname="Cy")
    for _ in range(50):
        again = Page(client, store, lead["code"], first.student)
        assert (again.student, again.joined["nickname"]) == (first.student, "Cy")
    assert store.lead(lead["code"], lead["secret"]).students == 1


def test_hostile_nicknames_are_refused_and_a_kept_one_never_reaches_a_student(room):
    store, lead, client = room
    for nick in HOSTILE_TEXT + ["a" * 21, "xXb1tchXx", " ", "\u200bAnn", "A\u0301\u0301\u0301" * 10]:
        assert_refused(client.post("/class/api/join", json={"code": lead["code"], "nickname": nick}))
    ok = Page(client, store, lead["code"], nickname="Zoë")
    assert ok.joined["nickname"] == "Zoë"
    assert "Zoë" not in json.dumps(ok.room(), ensure_ascii=False)


def test_hostile_results_requests_never_answer(room):
    store, lead, client = room
    code, secret = lead["code"], lead["secret"]
    me = Page(client, store, code, nickname="Di").student
    rng = random.Random(3)
    near = secret[:-1] + ("y" if secret.endswith("x") else "x")           # one character off, never the secret
    headers = [{}, {"Authorization": secret}, {"Authorization": f"Basic {secret}"},
               {"Authorization": f"Bearer {me}"}, {"Authorization": f"Bearer {near}"},
               {"Authorization": "Bearer " + "A" * 32}, {"Authorization": f"Bearer {MARK}"},
               {"Authorization": "Bearer " + "x" * 10_000}]
    for h, raw_code in itertools.product(headers, [code, *(v[:20_000] for v in _values(rng, 6) if isinstance(v, str))]):
        assert_refused(client.get("/class/api/results", params={"code": raw_code}, headers=h))


def test_hostile_stream_requests(room):
    store, lead, client = room
    for bad in HOSTILE_TEXT:                  # (an address holds at most ~65,000 characters: the client's limit)
        assert_refused(client.get("/class/api/events", params={"code": bad[:20_000]}))


def test_forged_leads_never_move_the_class_and_never_see_a_secret(room):
    store, lead, client = room
    code, secret = lead["code"], lead["secret"]
    me = Page(client, store, code, nickname="Ed").student
    rng = random.Random(2)
    secrets_ = _values(rng, 10) + [me, "A" * 32, secret[:-1] + ("B" if secret[-1] == "A" else "A"), secret + "A"]
    forged = [None, MARK, {"code": code, "student": me}, *({"code": code, "secret": s} for s in secrets_),
              {"code": MARK, "secret": secret}, {"code": code.lower(), "secret": secret.swapcase()}]
    before = store.lead(code, secret)
    for bad in forged:
        for out in (ld.lock_guesses(store, bad), ld.lead_poll(store, bad, -1), ld.end_class(store, bad),
                    ld.reveal_to_class(store, None, bad), ld.follow_chapter(store, bad, 3),
                    ld.push_live(store, bad, {"schema": MARK}), mg.start_timer(store, bad, 30),
                    mg.remove_student(store, bad, 1), mg.export_results(store, bad), mg.roster(store, bad)):
            text = json.dumps(out, default=repr)
            assert "<img src=x" not in text and secret not in text
        for link in (MARK, f"{code}.{MARK}", f"{code}.{secret[:-1]}", "x" * 5000, 5):
            out = ld.restore_lead(store, link, bad, "http://127.0.0.1:7860/")
            assert secret not in json.dumps(out, default=repr)
        for value in (MARK, 5, None):
            with pytest.warns(UserWarning, match="did not get this setting") if bad else contextlib.nullcontext():
                ld.choose_setting(store, bad, value, number=5)
    after = store.lead(code, secret)
    assert (after.chapter, after.phase, after.run_no, after.students, store.rooms()) == \
        (before.chapter, before.phase, before.run_no, before.students, 1)
