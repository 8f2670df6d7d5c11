"""The students' page and the class's routes over real HTTP (uvicorn in a thread, ``tests.class_helpers.served``):
the page and its files (gzip once, ETag, 304, no CDN), the event stream (the room at once, then each change, a
figure sent once per stream, keep-alive comments, ``gone`` when the class ends; the headers a proxy needs), and two
replicas on one redis-server: a change made on one reaches a page following the other."""
from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from components.pages.classroom import lead as ld
from components.pages.classroom.student_page import PLOTLY_JS
from components.render.base import empty_figure
from components.serving.classroom import ClassLimits, MemoryRoomStore
from tests.class_helpers import Events, served

RUN = ("<div class='sd-learn-note'><p>the run</p></div>", empty_figure("run figure", "drawn"), None,
       {"verify_ms": [30.0, 31.0, 35.0, 36.0, 50.0, 52.0, 60.0, 62.0, 70.0]}, "")
BASE = "http://127.0.0.1:7860/"


@pytest.fixture
def store():
    return MemoryRoomStore(ClassLimits(rooms=4, students=50))


def test_the_page_and_its_files(store):
    with served(store) as (url,), httpx.Client(base_url=url) as c:
        page = c.get("/class", params={"class": "7KX4MP9A"})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for needed in ('id="learn-title"', 'id="class-send"', 'id="class-histogram"', 'class="learn-guess"',
                       'id="class-status"', 'id="class-timer"', 'name="viewport"', 'src="class/static/class.js"'):
            assert needed in page.text, needed
        assert "http" not in re.sub(r"<meta[^>]*>", "", page.text)           # nothing from elsewhere: no CDN
        assert c.get("/class/", params={"class": "X"}, follow_redirects=False).headers["location"] == "/class?class=X"
        js = c.get("/class/static/class.js", headers={"Accept-Encoding": "gzip"})
        assert js.headers["content-encoding"] == "gzip" and "EventSource" in js.text
        again = c.get("/class/static/class.js", headers={"If-None-Match": js.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        plotly = c.get("/class/static/plotly.min.js", headers={"Accept-Encoding": "identity"})
        assert plotly.content == PLOTLY_JS.read_bytes() and "max-age" in plotly.headers["cache-control"]
        with c.stream("GET", "/class/static/plotly.min.js", headers={"Accept-Encoding": "gzip"}) as packed:
            assert packed.headers["content-encoding"] == "gzip"
            assert int(packed.headers["content-length"]) < len(plotly.content) / 2
        assert c.get("/class/static/..%2Fapp.py").status_code == 404
        assert c.get("/class/static/nope.js").status_code == 404


def test_the_stream_sends_the_room_then_each_change_and_each_figure_once(store):
    lead = ld.start_class(store, BASE)[0]
    code = lead["code"]
    with served(store, keepalive_s=0.3) as (url,):
        events = Events(url, code)
        try:
            event, first = events.next()
            assert event == "room" and first["room"]["phase"] == "waiting" and first["figures"] == {}
            assert events.status == 200 and events.headers["content-type"].startswith("text/event-stream")
            assert events.headers["cache-control"] == "no-cache, no-transform"
            assert events.headers["x-accel-buffering"] == "no" and "content-encoding" not in events.headers
            ld.publish_run(store, lead, 1, RUN, None)
            event, run = events.next()
            ids = run["room"]["run"]["figures"]
            assert run["room"]["phase"] == "open" and set(run["figures"]) == set(ids)
            assert run["figures"][ids[0]]["layout"]["title"]["text"].startswith("run figure")
            assert abs(run["now"] / 1000 - time.time()) < 5
            ld.lock_guesses(store, lead)
            event, locked = events.next()
            assert locked["room"]["phase"] == "locked" and locked["figures"] == {}      # figures sent once
            assert locked["room"]["run"]["figures"] == ids
            assert events.next(skip_comments=False) == ("comment", "keep-alive")          # nothing new: a comment
            ld.end_class(store, lead)
            event, data = events.next()
            assert event == "gone" and data == {"gone": True}
            assert events.next()[0] == "closed"
        finally:
            events.close()


def test_a_stream_for_no_class_is_refused_in_one_line(store):
    with served(store) as (url,), httpx.Client(base_url=url) as c:
        for raw in ("<script>", "7KX4MP9A", "", "x" * 10_000):
            r = c.get("/class/api/events", params={"code": raw})
            if raw == "7KX4MP9A":             # a well-formed code of no class: the stream says gone
                assert r.status_code == 200 and "event: gone" in r.text
            else:
                assert r.status_code == 404 and r.json()["error"].count("\n") == 0
                assert "<script>" not in r.text and r.headers["content-type"] == "application/json"


def test_many_pages_follow_one_room_for_one_store_read_per_refresh(store):
    lead = ld.start_class(store, BASE)[0]
    with served(store, refresh_s=0.05) as (url,):
        pages = [Events(url, lead["code"]) for _ in range(20)]
        try:
            assert all(p.next()[0] == "room" for p in pages)
            ld.publish_run(store, lead, 1, RUN, None)
            assert all(p.next()[1]["room"]["phase"] == "open" for p in pages)
        finally:
            for p in pages:
                p.close()


def test_two_replicas_on_one_redis_one_room(redis_db):
    from components.serving.classroom.redis_store import RedisRoomStore
    a = RedisRoomStore.from_url(redis_db, ClassLimits(students=50))
    b = RedisRoomStore.from_url(redis_db, ClassLimits(students=50))
    lead = ld.start_class(a, BASE)[0]
    with served(a, b) as (url_a, url_b):
        events = Events(url_b, lead["code"])                    # a page on replica B
        try:
            assert events.next()[1]["room"]["phase"] == "waiting"
            ld.publish_run(a, lead, 1, RUN, None)              # the presenter on replica A
            event, run = events.next()
            assert run["room"]["phase"] == "open" and run["figures"]
            with httpx.Client() as c:
                joined = [c.post(f"{u}/class/api/join", json={"code": lead["code"]}).json() for u in (url_a, url_b)]
                for u, j, v in zip((url_b, url_a), joined, (1.5, 2.0)):       # each sends through the other
                    r = c.post(f"{u}/class/api/guess", json={"code": lead["code"], "student": j["student"],
                                                             "chapter": 1, "run_no": 1, "value": v})
                    assert r.json()["guess"] == v
            assert a.lead(lead["code"], lead["secret"]).guesses == 2
        finally:
            events.close()


def test_the_routes_answer_json_with_a_status_that_says_what(store):
    lead = ld.start_class(store, BASE)[0]
    with served(store) as (url,), httpx.Client(base_url=url) as c:
        me = c.post("/class/api/join", json={"code": lead["code"]}).json()
        cases = [
            (c.post("/class/api/join", content=b"{not json"), 400, "Not JSON"),
            (c.post("/class/api/join", json=[1, 2]), 400, "JSON object"),
            (c.post("/class/api/join", content=b"{" + b" " * 5000 + b"}"), 413, "Too large"),
            (c.post("/class/api/join", json={"code": "7KX4MP9A"}), 404, "There is no class 7KX4-MP9A"),
            (c.post("/class/api/guess", json={"code": lead["code"], "student": "x", "chapter": 1, "run_no": 0,
                                              "value": 1}), 403, "not joined"),
            (c.post("/class/api/guess", json={"code": lead["code"], "student": me["student"], "chapter": "1",
                                              "run_no": 0, "value": 1}), 400, "chapter must be a whole number"),
            (c.post("/class/api/guess", json={"code": lead["code"], "student": me["student"], "chapter": 1,
                                              "run_no": 0, "value": 1}), 409, "Wait for the presenter's run"),
            (c.get("/class/api/results", params={"code": lead["code"]}), 403, "Only the presenter"),
            (c.get("/class/api/results", params={"code": lead["code"], "format": "xls"},
                   headers={"Authorization": f"Bearer {lead['secret']}"}), 400, "format is csv or json"),
        ]
        for r, status, words in cases:
            assert r.status_code == status and words in r.json()["error"], (status, r.text)
            assert r.headers["content-type"] == "application/json" and r.headers["cache-control"] == "no-store"
        r = c.get("/class/api/results", params={"code": lead["code"], "format": "json"},
                  headers={"Authorization": f"Bearer {lead['secret']}"})
        assert r.status_code == 200 and json.loads(r.text)["chapters"] == []
