"""What is particular to ``RedisRoomStore``, on a real redis-server (the session's; skipped without the binary): two
stores on one Redis as two replicas (a presenter on one, students on both, guesses sent at once counted exactly),
Redis's own TTL freeing an expired room, ``SPECDEC_CLASS_STORE`` read strictly, an unreachable Redis refused in
words, and the memo of a Reveal (plain values, tuples, a Trace) kept as JSON and read back the same."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from components.serving.classroom import ClassLimits, GuessSpec, MemoryRoomStore, Question, RoomError, Shown
from components.serving.classroom import wire
from components.serving.classroom.redis_store import RedisRoomStore, check_url, room_key
from components.serving.classroom.store import store_from_env
from specdec_core import Trace
from tests.class_helpers import at_once

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ngram_extractive.json"
CHOICE = Question(3, 12, "Three", "<p>t</p>", GuessSpec("same?", choices=("identical", "different")))
SHOWN = Shown("<p>run</p>", ("{}", None))


def test_two_replicas_share_a_room_and_count_guesses_sent_at_once_exactly(redis_db):
    a = RedisRoomStore.from_url(redis_db, ClassLimits(students=500, sends=50))
    b = RedisRoomStore.from_url(redis_db, ClassLimits(students=500, sends=50))
    code, secret = a.create()
    a.publish_run(code, secret, CHOICE, SHOWN, {"memo": 1}, None)
    n = 160
    ids = [""] * n

    def student(i: int) -> None:
        store = (a, b)[i % 2]                   # half the students on each replica
        ids[i] = store.join(code, None).student
        for choice in ("identical", "different", CHOICE.guess.choices[i % 2]):
            store.guess(code, ids[i], 3, 1, choice)
        (b, a)[i % 2].guess(code, ids[i], 3, 1, CHOICE.guess.choices[i % 2])     # a replay, on the other
    errors = at_once(n, student)
    assert not errors, errors[:3]
    view = b.lead(code, secret)
    assert (view.students, view.guesses) == (n, n) and len(set(ids)) == n
    job = b.begin_reveal(code, secret)            # the Reveal from the other replica sees every guess
    assert sorted(job.guesses.values()) == sorted(CHOICE.guess.choices[i % 2] for i in range(n))
    assert a.class_view(code).phase == "locked" and a.stage(code) == b.stage(code)


def test_a_rooms_keys_expire_in_redis_itself(redis_db):
    s = RedisRoomStore.from_url(redis_db, ClassLimits(life_s=1.0))
    code, secret = s.create()
    s.publish_run(code, secret, CHOICE, SHOWN, {"memo": 1}, None)
    me = s.join(code, None).student
    s.guess(code, me, 3, 1, "identical")
    r = redis.Redis.from_url(redis_db, decode_responses=True)
    keys = r.keys(room_key(code) + "*")
    assert len(keys) >= 6 and all(0 < r.pttl(k) <= 1000 for k in keys)
    time.sleep(1.2)
    assert r.keys(room_key(code) + "*") == []
    with pytest.raises(RoomError, match="There is no class"):
        s.class_view(code)
    assert s.rooms() == 0


@pytest.mark.parametrize("raw", ["redis:/x", "http://127.0.0.1:6379/0", "redis://127.0.0.1/0", "redis://:6379/0",
                                 "redis://127.0.0.1:6379/zero", "redis://h:99999/0", "redis://h:1/0?x=1", "5"])
def test_the_store_variable_is_read_strictly(raw):
    with pytest.raises(ValueError, match="SPECDEC_CLASS_STORE must be memory or redis://HOST:PORT/N"):
        store_from_env({"SPECDEC_CLASS_STORE": raw})


def test_the_store_variable_never_echoes_a_password():
    with pytest.raises(ValueError) as e:
        check_url("redis://:hunter2@127.0.0.1/0")
    assert "hunter2" not in str(e.value)


def test_memory_is_the_default_and_redis_is_chosen_by_its_url(redis_db):
    assert isinstance(store_from_env({}), MemoryRoomStore)
    assert isinstance(store_from_env({"SPECDEC_CLASS_STORE": "memory"}), MemoryRoomStore)
    store = store_from_env({"SPECDEC_CLASS_STORE": redis_db, "SPECDEC_CLASS_STUDENTS": "7"})
    assert isinstance(store, RedisRoomStore) and store.limits.students == 7


def test_an_unreachable_redis_is_said_in_one_line():
    from tools.procs import free_port
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(ValueError, match=r"SPECDEC_CLASS_STORE: cannot reach Redis at 127.0.0.1:\d+"):
        store_from_env({"SPECDEC_CLASS_STORE": url})
    s = RedisRoomStore.from_url(url, ping=False)
    for call in (s.create, lambda: s.join("7KX4MP9A", None), lambda: s.class_view("7KX4MP9A"),
                 lambda: s.stages(["7KX4MP9A"])):
        with pytest.raises(RoomError, match="cannot be reached just now") as e:
            call()
        assert e.value.status == 503


def test_a_memo_and_the_rooms_records_go_through_json_unchanged():
    trace = Trace.from_dict(json.loads(EXAMPLE.read_text(encoding="utf-8")))
    memo = {"trace": trace, "index": 2, "rows": [(0.3, [0.5, 1.0])], "standard": (trace, trace), "ok": True,
            "verify_ms": [30.5, float("inf")], "s": "x"}
    back = wire.loads(wire.dumps(memo))
    assert back["trace"].to_dict() == trace.to_dict() and back["rows"] == [(0.3, [0.5, 1.0])]
    assert isinstance(back["standard"], tuple) and back["verify_ms"][1] == float("inf")
    assert {k: v for k, v in back.items() if k not in ("trace", "standard")} == \
        {k: v for k, v in memo.items() if k not in ("trace", "standard")}
    for record in (CHOICE, SHOWN):
        assert wire.loads(wire.dumps(record)) == record
    for bad in ({"x": object()}, {1: 2}, {"$tuple": 1}):
        with pytest.raises(TypeError):
            wire.dumps(bad)
    with pytest.raises(ValueError, match="not a record"):
        wire.loads('{"$": "Secret"}')


def test_a_memo_the_store_cannot_keep_is_refused_in_words(redis_db):
    s = RedisRoomStore.from_url(redis_db)
    code, secret = s.create()
    with pytest.raises(RoomError, match="cannot be shared through the class's store"):
        s.publish_run(code, secret, CHOICE, SHOWN, {"model": object()}, None)
