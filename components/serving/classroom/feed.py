"""What every student's page is sent as its room changes: one document per room and stage, made once per process and
pushed to every page that follows the room (server-sent events, ``api``).

``RoomFeed`` keeps, for each room some page follows, the room's latest ``Doc`` — the ``ClassView`` as JSON, its figures
(Plotly JSON, by a content id) apart — and one background task per process asks the store for the stages of those
rooms every ``REFRESH_S`` (one dictionary lookup, or one pipelined round trip to Redis, whatever the number of pages),
so a change made on any replica reaches this one's pages within that. Between changes a page costs nothing but a
keep-alive comment every ``KEEPALIVE_S``. A page's stream sends a figure once (later documents name it by its id), so
a lock or a timer sends a few hundred bytes, a run its figures once.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool

from components.serving.classroom.room import REVEALED, ClassView, RoomError

REFRESH_S = 0.2          # how often a replica asks its store whether a followed room changed
KEEPALIVE_S = 15.0       # a comment on an idle stream, so that proxies keep it open


@dataclass(frozen=True)
class Doc:
    """A room at one stage as the students' pages get it: ``meta`` (JSON; figures named by id) and the figures by id.
    ``stage`` None: the room is gone (ended, expired)."""
    stage: int | None
    meta: bytes
    figures: dict[str, bytes] = field(default_factory=dict)


GONE = Doc(None, b'{"gone":true}')


def _figure(text: str | None, figures: dict[str, bytes]) -> str | None:
    """The id of a figure (its content's hash), kept in ``figures``; None stays None."""
    if text is None:
        return None
    raw = text.encode()
    if b"\n" in raw:                                   # an SSE data line holds no newline: JSON does not need one
        raw = orjson.dumps(orjson.loads(raw))
    fid = hashlib.blake2b(raw, digest_size=8).hexdigest()
    figures[fid] = raw
    return fid


def class_doc(view: ClassView) -> Doc:
    """The document every student's page of ``view``'s room is sent (nothing in it names a student)."""
    figures: dict[str, bytes] = {}
    q, s, r = view.question, view.shown, view.revealed
    revealed = view.phase == REVEALED and r is not None
    meta: dict[str, Any] = {
        "code": view.code, "chapter": view.chapter, "stage": view.stage, "phase": view.phase, "run_no": view.run_no,
        "deadline": view.deadline, "nicknames": view.nicknames, "removed": list(view.removed),
        "of": q.of if q else None, "title": q.title if q else "", "text": q.text if q else "",
        "guess": None if q is None else {"label": q.guess.label, "min": q.guess.minimum, "max": q.guess.maximum,
                                         "step": q.guess.step, "choices": list(q.guess.choices)},
        "run": None if s is None else {
            "note": s.note, "setting": s.setting, "figures": [_figure(f, figures) for f in s.figures],
            "tokens": s.tokens if (revealed or not s.tokens_at_reveal) else ""},
        "reveal": None if not revealed else {
            "figures": [_figure(f, figures) for f in r.figures], "histogram": _figure(r.histogram, figures),
            "summary": r.summary, "median": r.median, "right": r.right, "total": r.total,
            "truth": {"value": r.truth.value, "low": r.truth.low, "high": r.truth.high, "right": list(r.truth.right),
                      "label": r.truth.label},
            "verdicts": [list(v) for v in r.verdicts]},
        "live": None if view.live is None else {"no": view.live_no, "html": view.live.html,
                                                "figure": _figure(view.live.figure, figures)},
    }
    return Doc(view.stage, orjson.dumps(meta), figures)


def sse_event(doc: Doc, sent: set[str], now: float) -> bytes:
    """``doc`` as one server-sent event for a stream that was already sent the figures in ``sent`` (updated): the
    server's clock (ms, for the timer's countdown), the room, and the figures new to this stream."""
    if doc.stage is None:
        return b"event: gone\ndata: " + doc.meta + b"\n\n"
    new = [(fid, raw) for fid, raw in doc.figures.items() if fid not in sent]
    sent.update(fid for fid, _ in new)
    figures = b",".join(b'"' + fid.encode() + b'":' + raw for fid, raw in new)
    return (b"id: %d\nevent: room\ndata: {\"now\":%d,\"room\":" % (doc.stage, int(now * 1000)) + doc.meta
            + b',"figures":{' + figures + b"}}\n\n")


@dataclass
class _Watch:
    doc: Doc | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    followers: int = 0


class RoomFeed:
    """The rooms this process's pages follow, refreshed from ``store`` (any ``RoomStore``)."""

    def __init__(self, store: Any, refresh_s: float = REFRESH_S, keepalive_s: float = KEEPALIVE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.refresh_s, self.keepalive_s, self.clock = store, refresh_s, keepalive_s, clock
        self._watches: dict[str, _Watch] = {}
        self._task: asyncio.Task | None = None

    def _build(self, code: str) -> Doc:
        try:
            return class_doc(self.store.class_view(code))
        except RoomError as e:
            if e.gone:
                return GONE
            raise

    async def _refresh(self) -> None:
        while self._watches:
            await asyncio.sleep(self.refresh_s)
            codes = list(self._watches)
            try:
                stages = await run_in_threadpool(self.store.stages, codes)
            except Exception as e:                       # noqa: BLE001 - Redis away (a RoomError) or a fault: the
                if not isinstance(e, RoomError):         # pages keep what they have, and we try again
                    print(f"class feed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                continue
            for code in codes:
                watch = self._watches.get(code)
                if watch is None or watch.doc is None or stages.get(code, -1) == watch.doc.stage:
                    continue
                try:
                    doc = GONE if stages.get(code) is None else await run_in_threadpool(self._build, code)
                except Exception as e:                   # noqa: BLE001 - as above: this room is asked again next time
                    if not isinstance(e, RoomError):
                        print(f"class feed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                    continue
                self._publish(watch, doc)

    @staticmethod
    def _publish(watch: _Watch, doc: Doc) -> None:
        watch.doc = doc
        watch.changed.set()
        watch.changed = asyncio.Event()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._refresh())

    async def follow(self, code: str) -> AsyncIterator[Doc | None]:
        """The room's document now, then each new one as the room changes; None after ``keepalive_s`` with nothing
        new; ends after the document of a room that is gone."""
        watch = self._watches.setdefault(code, _Watch())
        watch.followers += 1
        try:
            if watch.doc is None:
                self._publish(watch, await run_in_threadpool(self._build, code))
            self._start()
            last = None
            while True:
                if watch.doc is not last:
                    last = watch.doc
                    yield last
                    if last.stage is None:
                        return
                    continue
                changed = watch.changed
                try:
                    await asyncio.wait_for(changed.wait(), self.keepalive_s)
                except asyncio.TimeoutError:
                    yield None
        finally:
            watch.followers -= 1
            if watch.followers <= 0 and self._watches.get(code) is watch:
                del self._watches[code]


    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


__all__ = ["RoomFeed", "Doc", "GONE", "class_doc", "sse_event", "REFRESH_S", "KEEPALIVE_S"]
