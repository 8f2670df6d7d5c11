"""The clients of the class load test (``tools.classload``), as light as a client can be: the load generator shares
this machine's two cores with the servers it measures.

- ``Conn``: one keep-alive HTTP/1.1 connection on plain asyncio streams (httpx costs ≈ 3 ms of CPU a request here),
  for a student's JSON requests;
- ``EventStream``: a page's server-sent event stream (``GET /class/api/events``) on its own connection, parsed as
  ``EventSource`` does (chunked body, events split on blank lines);
- ``Presenter``: the presenter's Gradio page, calling its events by name as its browser does (direct events over a
  ``Conn``; queued ones — the chapter's run, the Reveal — through the session's event stream with httpx).
"""
from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson


class Conn:
    """One keep-alive HTTP/1.1 connection, one request at a time. Answers with a Content-Length or chunked."""

    def __init__(self, url: str) -> None:
        where = urlsplit(url)
        self.host, self.port = where.hostname or "127.0.0.1", where.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.lock = asyncio.Lock()
        self.received = 0

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """The answer's status and body. A connection the server closed while idle (its keep-alive timeout) is
        opened again once."""
        async with self.lock:
            for attempt in (1, 2):
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
                try:
                    self.writer.write(head.encode("ascii") + body)
                    status, _, data = await read_answer(self.reader)
                    self.received += len(data)
                    return status, data
                except (ConnectionError, EOFError, asyncio.IncompleteReadError) as e:
                    self.close()
                    if attempt == 2:
                        raise OSError(f"the app closed the connection: {e}") from None
        raise AssertionError("unreachable")

    async def post_json(self, path: str, body: dict) -> tuple[int, dict]:
        status, data = await self.request("POST", path, orjson.dumps(body))
        return status, orjson.loads(data)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await reader.readline()
    if not line:
        raise EOFError("closed before the answer")
    status = int(line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, v = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = v.strip()
    return status, headers


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status, headers = await read_head(reader)
    if "chunked" not in headers.get("transfer-encoding", "").lower():
        return status, headers, await reader.readexactly(int(headers.get("content-length", "0")))
    body = b""
    while (chunk := await read_chunk(reader)) is not None:
        body += chunk
    return status, headers, body


async def read_chunk(reader: asyncio.StreamReader) -> bytes | None:
    """One chunk of a chunked body; None after the last."""
    size = int((await reader.readline()).split(b";")[0], 16)
    if size == 0:
        await reader.readline()
        return None
    data = await reader.readexactly(size)
    await reader.readline()
    return data


class EventStream:
    """A page's event stream: ``next()`` the next (event, data as parsed JSON), comments skipped."""

    def __init__(self, url: str, code: str) -> None:
        self.url, self.code = url, code
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.buffer = b""
        self.received = 0

    async def open(self) -> None:
        where = urlsplit(self.url)
        self.reader, self.writer = await asyncio.open_connection(where.hostname, where.port)
        self.writer.write(f"GET /class/api/events?code={self.code} HTTP/1.1\r\nHost: {where.hostname}\r\n"
                          "Accept: text/event-stream\r\n\r\n".encode("ascii"))
        status, headers = await read_head(self.reader)
        if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
            raise RuntimeError(f"the event stream answered {status} {headers.get('content-type')}")

    async def next(self) -> tuple[str, Any]:
        assert self.reader is not None
        while b"\n\n" not in self.buffer:
            chunk = await read_chunk(self.reader)
            if chunk is None:
                raise EOFError("the event stream ended")
            self.received += len(chunk)
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\n\n", 1)
        event, data = "message", b""
        for line in raw.split(b"\n"):
            if line.startswith(b"event:"):
                event = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data += line[5:].lstrip()
        if not data:
            return await self.next()                 # a comment (keep-alive) or the retry hint
        return event, orjson.loads(data)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Presenter:
    """The presenter's Gradio page: its events by their api names, as its browser calls them."""

    def __init__(self, http: httpx.AsyncClient, url: str, fns: dict[str, dict]) -> None:
        self.http, self.url, self.fns = http, url, fns
        self.session = uuid.uuid4().hex[:11]
        self.conn = Conn(url)

    def _body(self, name: str, data: list) -> dict:
        fn = self.fns[name]
        if len(data) != len(fn["inputs"]):
            raise ValueError(f"{name} takes {len(fn['inputs'])} inputs, got {len(data)}")
        return {"data": data, "fn_index": fn["id"], "session_hash": self.session, "event_data": None,
                "trigger_id": fn["targets"][0][0] if fn["targets"] else None}

    async def call(self, name: str, data: list) -> list:
        """A direct (not queued) event: its outputs."""
        status, body = await self.conn.request("POST", "/gradio_api/run/predict", orjson.dumps(self._body(name, data)))
        if status != 200:
            raise RuntimeError(f"{name}: HTTP {status}: {body[:300]!r}")
        return orjson.loads(body)["data"]

    async def queued(self, name: str, data: list, timeout_s: float = 600) -> list:
        """A queued event: join the queue, then read the session's event stream until this event completes."""
        r = await self.http.post(f"{self.url}gradio_api/queue/join", json=self._body(name, data), timeout=60)
        r.raise_for_status()
        event = r.json()["event_id"]
        async with self.http.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": self.session},
                                    timeout=timeout_s) as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") == event and msg.get("msg") == "process_completed":
                    if not msg.get("success"):
                        raise RuntimeError(f"{name} failed: {str(msg.get('output'))[:300]}")
                    return msg["output"]["data"]
        raise RuntimeError(f"{name}: the event stream ended before the event completed")


def fn_table(url: str) -> dict[str, dict]:
    """The app's events by name."""
    config = httpx.get(f"{url}config", timeout=30).json()
    return {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}


def value(update: Any) -> Any:
    """An output's value: a plain value, or an update's ``value`` (None for a skip)."""
    if isinstance(update, dict) and update.get("__type__") == "update":
        return update.get("value")
    return update


__all__ = ["Conn", "EventStream", "Presenter", "fn_table", "value", "read_answer", "read_chunk"]
