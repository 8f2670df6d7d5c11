"""A class's routes and a student's page without a browser, for the classroom tests.

- ``served(*stores)``: the class's routes and the students' page (``class_routes``, ``student_page_routes``) on each
  store, each served by uvicorn in a thread on a free loopback port (a real HTTP server, so the event stream is
  real); their base URLs.
- ``Events``: a page's event stream read in a thread, parsed into (event, data) as ``EventSource`` does.
- ``Page``: a student's page through the routes: join, the room's document (the one the stream sends), Send;
  everything it was sent is kept, for the secret checks.
"""
from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette

from components.pages.classroom.student_page import student_page_routes
from components.serving.classroom.api import ClassApi
from components.serving.classroom.feed import class_doc, sse_event
from tools.procs import free_port


def class_app(store: Any, **feed: float) -> Starlette:
    return Starlette(routes=[*student_page_routes(), *ClassApi(store, **feed).routes()])


@contextlib.contextmanager
def served(*stores: Any, refresh_s: float = 0.05, keepalive_s: float = 15.0) -> Iterator[list[str]]:
    """Each store's routes on a uvicorn server of its own (a replica each); their base URLs."""
    servers, threads, urls = [], [], []
    for store in stores:
        port = free_port()
        config = uvicorn.Config(class_app(store, refresh_s=refresh_s, keepalive_s=keepalive_s), host="127.0.0.1",
                                port=port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append(server)
        threads.append(thread)
        urls.append(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 10
        for server in servers:
            while not server.started:
                if time.monotonic() > deadline:
                    raise RuntimeError("uvicorn did not start")
                time.sleep(0.01)
        yield urls
    finally:
        for server in servers:
            server.should_exit = True
            server.force_exit = True
        for thread in threads:
            thread.join(10)


class Events:
    """A page's event stream (``GET /class/api/events``), read in a thread: ``next()`` the next (event, data)."""

    def __init__(self, url: str, code: str) -> None:
        self.got: queue.Queue = queue.Queue()
        self.raw: list[bytes] = []
        self._client = httpx.Client(timeout=httpx.Timeout(5.0, read=60.0))
        self._stop = threading.Event()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self._thread = threading.Thread(target=self._read, args=(f"{url}/class/api/events", code), daemon=True)
        self._thread.start()

    def _read(self, url: str, code: str) -> None:
        try:
            with self._client.stream("GET", url, params={"code": code}) as r:
                self.status, self.headers = r.status_code, dict(r.headers)
                event, data = "message", []
                for line in r.iter_lines():
                    if self._stop.is_set():
                        return
                    self.raw.append(line.encode())
                    if line == "":
                        if data:
                            self.got.put((event, "\n".join(data)))
                        event, data = "message", []
                    elif line.startswith(":"):
                        self.got.put(("comment", line[1:].strip()))
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip())
        except (httpx.HTTPError, RuntimeError):
            pass
        finally:
            self.got.put(("closed", ""))

    def next(self, timeout: float = 5.0, skip_comments: bool = True) -> tuple[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            event, data = self.got.get(timeout=max(0.01, deadline - time.monotonic()))
            if event == "comment" and skip_comments:
                continue
            return event, (json.loads(data) if data.startswith("{") else data)

    def close(self) -> None:
        self._stop.set()
        self._client.close()


class Page:
    """A student's page through the class's routes (``client``: an httpx client on a served app, or a Starlette
    TestClient): it joins on creation; ``room()`` is the document its stream would send now; ``send()`` sends."""

    def __init__(self, client: Any, store: Any, code: Any, student: str | None = None, nickname: str | None = None):
        self.client, self.store, self.sent = client, store, []
        body = {"code": code, "student": student, **({"nickname": nickname} if nickname is not None else {})}
        self.joined = self._post("/class/api/join", body)
        self.student = self.joined.get("student")
        self.code = self.joined.get("code")
        self.figures: dict[str, Any] = {}

    def _post(self, path: str, body: Any) -> dict:
        r = self.client.post(path, json=body)
        self.sent.append(r.text)
        data = r.json()
        data["_status"] = r.status_code
        return data

    def room(self) -> dict:
        """The room's document as this page's stream would send it, its figures kept by id."""
        event = sse_event(class_doc(self.store.class_view(self.code)), set(), time.time()).decode()
        self.sent.append(event)
        data = json.loads(event.split("data: ", 1)[1])
        self.figures.update(data["figures"])
        return data["room"]

    def figure(self, fid: str | None) -> dict | None:
        return self.figures.get(fid) if fid else None

    def send(self, value: Any, chapter: int | None = None, run_no: int | None = None) -> dict:
        room = self.room()
        return self._post("/class/api/guess", {"code": self.code, "student": self.student,
                                               "chapter": room["chapter"] if chapter is None else chapter,
                                               "run_no": room["run_no"] if run_no is None else run_no,
                                               "value": value})

    def everything_sent(self) -> str:
        return "\n".join(self.sent)


__all__ = ["served", "class_app", "Events", "Page"]


def at_once(n: int, student: Any) -> list[BaseException]:
    """Run student(i) for i in 0 … n − 1 on n threads released together; the exceptions they raised."""
    start, errors = threading.Barrier(n), []

    def run(i: int) -> None:
        try:
            start.wait()
            student(i)
        except BaseException as e:       # noqa: BLE001 - collected for the caller's assertion
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
