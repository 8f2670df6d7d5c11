"""The class's JSON routes, which the students' page (``/class``, no Gradio session) speaks, and the presenter's results:

- ``POST /class/api/join`` ``{"code", "student"?, "nickname"?}`` → ``{"code", "student", "handle", "nickname",
  "guess"}``: a new student, or the one this browser was (its stored id) with the guess it sent on the current run;
- ``POST /class/api/guess`` ``{"code", "student", "chapter", "run_no", "value"}`` → ``{"guess", "said"}``;
- ``GET /class/api/events?code=CODE``: server-sent events — ``room`` (the room's document, ``feed``: at once, then
  on every change; ``id`` is the stage), ``gone`` (the class ended or expired); a keep-alive comment when idle;
- ``GET /class/api/results?code=CODE&format=csv|json`` with ``Authorization: Bearer SECRET``: what the presenter
  keeps of the class (``results``).

Every refusal is one line, ``{"error": "..."}``, with a status saying what kind (400 bad input, 403 not yours, 404 no
such class, 409 not now, 413 too large, 429 too fast, 503 the store away); nothing is ever answered as HTML, and no
answer carries the presenter's secret or another student's id. Store calls run in a worker thread, so a slow store
never holds the server's event loop.

Why server-sent events: one long-lived response per page that the server writes only when the room changes, a
few bytes of keep-alive otherwise; it is plain HTTP, so it goes through a Space's proxy as gradio's own queue
stream does (``Cache-Control: no-cache``, ``X-Accel-Buffering: no`` so no proxy holds it back), and the
browser's ``EventSource`` reconnects by itself.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from components.serving.classroom.codes import (SECRET_BYTES, STUDENT_BYTES, check_token, parse_code, quoted,
                                                shown_code)
from components.serving.classroom.feed import KEEPALIVE_S, REFRESH_S, RoomFeed, sse_event
from components.serving.classroom.results import FORMATS, results_csv, results_json
from components.serving.classroom.room import NOT_JOINED, RoomError

API = "/class/api"
MAX_BODY = 4096                  # a join or a guess is a few dozen bytes
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
STREAM_HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
RETRY_MS = 2000                  # an EventSource that lost its stream asks again after this


class SafeJSON(JSONResponse):
    """JSON with ``<``, ``>`` and ``&`` written as ``\\u003c`` …: whatever a caller sent and an answer quotes, no
    byte of it reads as markup, even to a browser that sniffs."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def refusal(message: str, status: int, reason: str = "") -> JSONResponse:
    """One line, as JSON (never HTML); ``reason``: what the page should ask for again ("nickname")."""
    return SafeJSON({"error": message, **({"reason": reason} if reason else {})}, status_code=status,
                    headers=NO_STORE)


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


async def read_body(request: Request) -> dict:
    """The request's JSON object, read up to ``MAX_BODY`` bytes; BadRequest otherwise."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise BadRequest(f"Too large: a request to the class is at most {MAX_BODY} bytes.", 413)
    raw = b""
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY:
                raise BadRequest(f"Too large: a request to the class is at most {MAX_BODY} bytes.", 413)
    except ClientDisconnect:
        raise BadRequest("The request was cut off.") from None
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("Not JSON: send a JSON object.") from None
    if not isinstance(body, dict):
        raise BadRequest("Send a JSON object.")
    return body


def code_of(raw: Any) -> str:
    try:
        return parse_code(raw)
    except ValueError as e:
        raise BadRequest(f"{str(e)[:1].upper()}{str(e)[1:]}.", 404) from None


def student_of(raw: Any) -> str:
    try:
        return check_token(raw, "student id", STUDENT_BYTES)
    except ValueError:
        raise BadRequest(NOT_JOINED, 403) from None


def whole(raw: Any, what: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < 2**31:
        raise BadRequest(f"{what} must be a whole number, got {quoted(raw)}.")
    return raw


def sent_words(value: Any) -> str:
    return f"Sent: {value}. You can change it until your presenter locks guesses."


class ClassApi:
    """The routes on one store (``store``: a ``RoomStore``, or a function that makes it on first use)."""

    def __init__(self, store: Any, clock: Callable[[], float] = time.time, refresh_s: float = REFRESH_S,
                 keepalive_s: float = KEEPALIVE_S) -> None:
        self._store, self._feed, self.clock = store, None, clock
        self.refresh_s, self.keepalive_s = refresh_s, keepalive_s

    @property
    def store(self) -> Any:
        if callable(self._store):                        # made on first use
            self._store = self._store()
        return self._store

    @property
    def feed(self) -> RoomFeed:
        if self._feed is None:
            self._feed = RoomFeed(self.store, self.refresh_s, self.keepalive_s, self.clock)
        return self._feed

    async def _answer(self, work: Callable[[], Any]) -> Response:
        try:
            return await work()
        except BadRequest as e:
            return refusal(str(e), e.status)
        except RoomError as e:
            return refusal(str(e), e.status, e.reason)

    async def join(self, request: Request) -> Response:
        async def work() -> Response:
            body = await read_body(request)
            code = code_of(body.get("code"))
            stored = body.get("student")
            student = stored if isinstance(stored, str) and len(stored) < 64 else None
            joined = await run_in_threadpool(self.store.join, code, student, body.get("nickname"))
            return SafeJSON({"code": code, "shown": shown_code(code), "student": joined.student,
                             "handle": joined.handle, "nickname": joined.nickname, "guess": joined.guess},
                            headers=NO_STORE)
        return await self._answer(work)

    async def guess(self, request: Request) -> Response:
        async def work() -> Response:
            body = await read_body(request)
            code, student = code_of(body.get("code")), student_of(body.get("student"))
            chapter, run_no = whole(body.get("chapter"), "chapter"), whole(body.get("run_no"), "run_no")
            kept = await run_in_threadpool(self.store.guess, code, student, chapter, run_no, body.get("value"))
            return SafeJSON({"guess": kept, "said": sent_words(kept)}, headers=NO_STORE)
        return await self._answer(work)

    async def events(self, request: Request) -> Response:
        try:
            code = code_of(request.query_params.get("code"))
        except BadRequest as e:
            return refusal(str(e), e.status)

        async def stream() -> Any:
            yield b"retry: %d\n\n" % RETRY_MS
            sent: set[str] = set()
            try:
                async for doc in self.feed.follow(code):
                    yield b": keep-alive\n\n" if doc is None else sse_event(doc, sent, self.clock())
            except RoomError as e:                        # the store away: the browser asks again after RETRY_MS
                yield b"event: problem\ndata: " + SafeJSON({"error": str(e)}).body + b"\n\n"
            except asyncio.CancelledError:
                raise
        return StreamingResponse(stream(), media_type="text/event-stream", headers=STREAM_HEADERS)

    async def results(self, request: Request) -> Response:
        async def work() -> Response:
            code = code_of(request.query_params.get("code"))
            fmt = request.query_params.get("format", "csv")
            if fmt not in FORMATS:
                raise BadRequest("format is csv or json.")
            auth = request.headers.get("authorization", "")
            scheme, _, secret = auth.partition(" ")
            try:
                secret = check_token(secret.strip(), "presenter secret", SECRET_BYTES) \
                    if scheme.lower() == "bearer" else None
            except ValueError:
                secret = None
            if secret is None:
                raise BadRequest("Only the presenter can download the results: send Authorization: Bearer SECRET "
                                 "(the secret in the presenter link).", 403)
            kept = await run_in_threadpool(self.store.results, code, secret)
            text = results_csv(code, kept) if fmt == "csv" else results_json(code, kept, self.clock())
            name = f"class-{shown_code(code)}-results.{fmt}"
            return Response(text, media_type=FORMATS[fmt],
                            headers={**NO_STORE, "Content-Disposition": f'attachment; filename="{name}"'})
        return await self._answer(work)

    def routes(self) -> list[Route]:
        return [Route(f"{API}/join", self.join, methods=["POST"]), Route(f"{API}/guess", self.guess, methods=["POST"]),
                Route(f"{API}/events", self.events, methods=["GET"]),
                Route(f"{API}/results", self.results, methods=["GET"])]


def class_routes(store: Any, clock: Callable[[], float] = time.time) -> list[Route]:
    """The class's routes, for the app's ``routes`` (``launch(app_kwargs={"routes": [...]})``)."""
    return ClassApi(store, clock).routes()


__all__ = ["API", "ClassApi", "class_routes", "refusal", "read_body", "MAX_BODY", "STREAM_HEADERS", "sent_words"]
