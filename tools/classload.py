"""A class's load on the app, over HTTP as the pages themselves call it: start ``app.py`` on 127.0.0.1, then one
presenter and N students (150 by default) drive a whole chapter.

    python -m tools.classload --students 150          # figures in docs/classroom.md

Every simulated page is a Gradio session of its own (its ``session_hash``) calling the page's own events by their
index in the app's config, exactly what a browser sends: the students' ``class_join`` (the page's load), the poll
of their gr.Timer (every ``POLL_S`` seconds, each student at its own phase: ``GET /class/stage``, and only when the
stage key changed the events a browser then runs, ``class_refresh`` and, as the State keys it sets change,
``class_figures`` and ``class_guess_control``) and ``class_send``; the presenter's ``class_start``, ``class_lead_poll`` (its timer), ``class_follow`` (the class follows the Learn page
to a chapter), the chapter's run ``learn_run_3`` and ``class_reveal`` (both queued, read from the session's event
stream). The chapter: 3 ("Greedy: the baseline's text"), whose guess is a choice, so the class's histogram can be
counted exactly.

The script: everyone joins; the students poll idle for ``--idle`` seconds (what polling alone costs); the
presenter moves the class to chapter 3 and runs it; every student, once its page shows the run, thinks for 2 to
12 s and sends a guess (every fifth changes its mind and sends again, every tenth replays its send); once the presenter's count reads
them all, the presenter reveals and then moves on to chapter 4. Checked: the histogram every student is sent is
one and the same, and counts exactly the last guess of each student (none lost, none twice); the presenter's
count agrees. Reported: for each presenter action, the time from the presenter's click (for the run: from the model's
end, when the room gets it) to each student's page showing it — median, 95th percentile, max —, the server's CPU (idle polling and
the whole chapter) and memory (RSS), the client's own CPU, and the bytes a student's polls cost. Exit status 1 when
a check fails. Loopback only; every wait is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import time
import uuid
from urllib.parse import urlsplit
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from tools.loadtest import AppProcess, rss_mb, start_app

POLL_S = 1.0            # the students' page (components.pages.classroom.student.POLL_S)
STAGE_PATH = "/class/stage"
CHAPTER = 3             # a choice guess: "identical" / "different"
CHOICES = ("identical", "different")
# the outputs of the students' page's events, in their order (components.pages.classroom.student; a test checks)
JOIN = ("status", "chapter", "form", "timer", "me", "ids", "code", "stage")
REFRESH = ("title", "status", "text", "note", "plot1", "slider", "radio", "answer", "histogram", "plot2", "me",
           "touched", "live_key", "gone")
EVENTS = ("next", "run", "reveal", "next2")


class Conn:
    """One keep-alive HTTP/1.1 connection to the app, as a browser holds one, and as light as a client can be (plain
    asyncio streams; httpx costs ≈ 3 ms of CPU a request here): the load generator shares this machine's cores with
    the server it measures. Answers with a Content-Length or chunked."""

    def __init__(self, url: str) -> None:
        where = urlsplit(url)
        self.host, self.port = where.hostname or "127.0.0.1", where.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.lock = asyncio.Lock()              # one request at a time on a connection (HTTP/1.1, no pipelining)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """The answer's status and body. A connection the server closed while idle (its keep-alive timeout: nothing
        of the request was read) is opened again once."""
        async with self.lock:
            return await self._request(method, path, body)

    async def _request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        for attempt in (1, 2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
            try:
                self.writer.write(head.encode("ascii") + body)
                return await self._answer()
            except (ConnectionError, EOFError) as e:
                self.close()
                if attempt == 2:
                    raise OSError(f"the app closed the connection: {e}") from None
            except (OSError, asyncio.IncompleteReadError, ValueError):
                self.close()
                raise
        raise AssertionError("unreachable")

    async def _answer(self) -> tuple[int, bytes]:
        assert self.reader is not None
        line = await self.reader.readline()
        if not line:
            raise EOFError("closed before the answer")
        status = int(line.split()[1])
        length, chunked = None, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, v = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(v)
            elif name.lower() == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
        if not chunked:
            return status, await self.reader.readexactly(length or 0)
        body = b""
        while (size := int((await self.reader.readline()).split(b";")[0], 16)) > 0:
            body += await self.reader.readexactly(size)
            await self.reader.readline()
        await self.reader.readline()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Page:
    """One browser page's session: the page's events called as its browser calls them (direct events over the
    page's own connection; the presenter's queued ones through httpx's event stream)."""

    def __init__(self, http: httpx.AsyncClient, url: str, fns: dict[str, dict]) -> None:
        self.http, self.url, self.fns = http, url, fns
        self.session = uuid.uuid4().hex[:11]
        self.received = 0                       # bytes of the answers this page got
        self.calls = 0
        self.conn = Conn(url)

    def _body(self, name: str, data: list) -> dict:
        fn = self.fns[name]
        if len(data) != len(fn["inputs"]):
            raise ValueError(f"{name} takes {len(fn['inputs'])} inputs, got {len(data)}")
        return {"data": data, "fn_index": fn["id"], "session_hash": self.session, "event_data": None,
                "trigger_id": fn["targets"][0][0] if fn["targets"] else None}

    async def call(self, name: str, data: list) -> list:
        """A direct (not queued) event: its outputs."""
        return (await self.answer(name, data))["data"]

    async def answer(self, name: str, data: list) -> dict:
        """A direct event's whole answer: its outputs (``data``) and the States it changed (``changed_state_ids``,
        whose change events a browser then runs)."""
        status, body = await self.conn.request("POST", "/gradio_api/run/predict", orjson.dumps(self._body(name, data)))
        self.received += len(body)
        self.calls += 1
        if status != 200:
            raise RuntimeError(f"{name}: HTTP {status}: {body[:300]!r}")
        return orjson.loads(body)

    async def get(self, path: str) -> tuple[int, bytes]:
        status, body = await self.conn.request("GET", path)
        self.received += len(body)
        return status, body

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


def value(update: Any) -> Any:
    """An output's value: a plain value, or an update's ``value`` (None for a skip)."""
    if isinstance(update, dict) and update.get("__type__") == "update":
        return update.get("value")
    return update


def text(update: Any) -> str:
    v = value(update)
    return re.sub(r"<[^>]+>", "", v) if isinstance(v, str) else ""


@dataclass
class Student:
    index: int
    page: Page
    seen: dict[str, float] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    histogram: str | None = None
    joined: bool = False
    polls: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class Run:
    students: list[Student]
    done: dict[str, float] = field(default_factory=dict)     # when each presenter action changed the room
    took: dict[str, float] = field(default_factory=dict)     # how long its request took
    presenter_count: str = ""
    stop: asyncio.Event = field(default_factory=asyncio.Event)


THINK_S = (2.0, 12.0)       # a student reads the run and thinks before sending (uniform, seeded per student)


def think_s(i: int) -> float:
    return random.Random(1000 + i).uniform(*THINK_S)


def guesses_of(i: int) -> list[str]:
    """Student ``i``'s sends: a choice; every fifth changes its mind; every tenth replays its last send."""
    first = CHOICES[i % 2]
    sends = [first, CHOICES[(i + 1) % 2]] if i % 5 == 0 else [first]
    return sends + [sends[-1]] if i % 10 == 3 else sends


class Follower:
    """A student's page following the room as the browser does: the timer's script asks for the stage key; a new
    key runs the hidden box's change event, ``class_refresh``, which redraws the page."""

    def __init__(self, s: Student) -> None:
        self.s = s
        self.chapter, self.status, self.slider, self.key = 1, "", None, ""

    async def poll(self, code: str) -> None:
        """The timer's script: the stage key; a new one runs the box's change event."""
        status, body = await self.s.page.get(f"{STAGE_PATH}?code={code}")
        self.s.polls += 1
        if status == 200 and body.decode() != self.key:
            self.key = body.decode()
            await self.refresh()

    async def refresh(self) -> None:
        data = (await self.s.page.answer("class_refresh", [None]))["data"]
        now = time.monotonic()
        title, self.status = text(data[REFRESH.index("title")]), text(data[REFRESH.index("status")])
        if title:
            self.chapter = int(re.search(r"Chapter (\d+)", title).group(1))
        slider = value(data[REFRESH.index("slider")])
        self.slider = slider if slider is not None else self.slider
        hist = value(data[REFRESH.index("histogram")])
        if self.chapter == CHAPTER and isinstance(hist, dict) and "class's guesses:" in hist.get("plot", ""):
            self.s.seen.setdefault("reveal", now)
            self.s.histogram = hist["plot"]
        self.seen(now)

    def seen(self, now: float) -> None:
        if self.chapter == CHAPTER and "wait for your presenter" in self.status:
            self.s.seen.setdefault("next", now)
        if self.chapter == CHAPTER and "guess, then Send" in self.status:
            self.s.seen.setdefault("run", now)
        if self.chapter == CHAPTER + 1:
            self.s.seen.setdefault("next2", now)


async def student_loop(s: Student, run: Run, code: str) -> None:
    f = Follower(s)
    answer = await s.page.answer("class_join", [code, None])
    if "Class " not in text(answer["data"][JOIN.index("status")]):
        s.errors.append(f"join: {text(answer['data'][JOIN.index('status')])}")
        return
    f.key = answer["data"][JOIN.index("stage")]
    await f.refresh()                     # the stage box changed from empty: the page draws the room
    s.joined = True
    await asyncio.sleep(random.Random(s.index).uniform(0, POLL_S))      # each page polls at its own phase
    while not run.stop.is_set():
        t0 = time.monotonic()
        try:
            await f.poll(code.replace("-", ""))
        except (OSError, asyncio.IncompleteReadError, ValueError, RuntimeError) as e:   # a browser tries again
            s.errors.append(f"poll: {type(e).__name__}: {e}"[:200])
        if "run" in s.seen and not s.sent and time.monotonic() >= s.seen["run"] + think_s(s.index):
            for guess in guesses_of(s.index):
                said = text((await s.page.call("class_send", [None, f.slider, guess, True]))[0])
                if not said.startswith("Sent"):
                    s.errors.append(f"send: {said}")
                s.sent.append(guess)
        if "next2" in s.seen:
            return
        await asyncio.sleep(max(0.0, POLL_S - (time.monotonic() - t0)))


async def presenter(page: Page, run: Run, n: int, idle_s: float, cpu: dict, pid: int) -> None:
    async def act(name: str, key: str, call: Any) -> list:
        """The presenter's action; the time the students' latency counts from: its click, except for the run, whose
        model time is its own (the room gets the run when the model is done: the request's end)."""
        t0 = time.monotonic()
        out = await call
        run.done[key], run.took[key] = (time.monotonic() if key == "run" else t0), time.monotonic() - t0
        return out

    async def wait_until(pred: Any, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            await asyncio.sleep(0.2)

    await wait_until(lambda: all(s.polls > 0 for s in run.students), "every student's first poll", 300)
    cpu["joined"] = cpu_s(pid), time.monotonic()
    cpu["idle_start"] = cpu_s(pid), time.monotonic()
    await asyncio.sleep(idle_s)
    cpu["idle_end"] = cpu_s(pid), time.monotonic()
    cpu["chapter_start"] = cpu["idle_end"]
    await act("class_follow", "next", page.call("class_follow", [None, CHAPTER]))
    await wait_until(lambda: all("next" in s.seen for s in run.students), "every student on the chapter", 60)
    await act("learn_run_3", "run", page.queued("learn_run_3", [None, 0.0, 1400, None]))
    await wait_until(lambda: all(len(s.sent) == len(guesses_of(s.index)) for s in run.students), "every guess", 120)
    await wait_until(lambda: f"Guesses in: {n} of {n}" in run.presenter_count, "the presenter's count", 30)
    await act("class_reveal", "reveal", page.queued("class_reveal", [None]))
    await wait_until(lambda: all("reveal" in s.seen for s in run.students), "every student seeing the reveal", 60)
    await act("class_follow", "next2", page.call("class_follow", [None, CHAPTER + 1]))
    await wait_until(lambda: all("next2" in s.seen for s in run.students), "every student on the next chapter", 60)
    cpu["chapter_end"] = cpu_s(pid), time.monotonic()
    run.stop.set()


async def presenter_poll(page: Page, run: Run) -> None:
    """The presenter's page's timer: the count, whenever the room changed."""
    while not run.stop.is_set():
        t0 = time.monotonic()
        count = text((await page.call("class_lead_poll", [None, -1]))[4])
        run.presenter_count = count or run.presenter_count
        await asyncio.sleep(max(0.0, POLL_S - (time.monotonic() - t0)))


def cpu_s(pid: int) -> float:
    """The process's CPU seconds (user + system) so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fn_table(url: str) -> dict[str, dict]:
    """The app's events by name."""
    config = httpx.get(f"{url}config", timeout=30).json()
    return {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}


async def drive(app: AppProcess, n: int, idle_s: float) -> dict:
    fns = fn_table(app.url)
    limits = httpx.Limits(max_connections=n + 20, max_keepalive_connections=n + 20)
    async with httpx.AsyncClient(limits=limits) as http:
        lead = Page(http, app.url, fns)
        out = await lead.call("class_start", [app.url, None])
        code = re.search(r"[A-Z0-9]{4}-[A-Z0-9]{4}", text(out[2])).group(0)
        students = [Student(i, Page(http, app.url, fns)) for i in range(n)]
        run = Run(students)
        cpu: dict[str, tuple[float, float]] = {}
        await asyncio.sleep(2.0)
        quiet = cpu_s(app.proc.pid), time.monotonic()       # the app with a class and nobody in it
        await asyncio.sleep(idle_s / 2)
        cpu["quiet"] = cpu_s(app.proc.pid) - quiet[0], time.monotonic() - quiet[1]
        rss_before = rss_mb(app.proc.pid)
        client0 = time.process_time()
        cpu["join_start"] = cpu_s(app.proc.pid), time.monotonic()
        tasks = [asyncio.create_task(student_loop(s, run, code)) for s in students]
        tasks.append(asyncio.create_task(presenter_poll(lead, run)))
        await presenter(lead, run, n, idle_s, cpu, app.proc.pid)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        for page in [lead, *(s.page for s in students)]:
            page.conn.close()
        return report(run, cpu, rss_before, rss_mb(app.proc.pid), time.process_time() - client0, n)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def report(run: Run, cpu: dict, rss_before: float, rss_after: float, client_cpu_s: float, n: int) -> dict:
    problems = [f"student {s.index}: {e}" for s in run.students for e in s.errors]
    expected = {c: 0 for c in CHOICES}
    for s in run.students:
        expected[guesses_of(s.index)[-1]] += 1
    hists = {s.histogram for s in run.students}
    counted: dict[str, int] = {}
    if len(hists) != 1 or None in hists:
        problems.append(f"the students were sent {len(hists)} different histograms")
    else:
        for trace in json.loads(next(iter(hists)))["data"]:
            if trace.get("type") == "bar":
                for x, y in zip(trace["x"], trace["y"]):
                    key = x.replace(" ✓", "")
                    counted[key] = counted.get(key, 0) + y
    if counted != {k: v for k, v in expected.items() if v}:
        problems.append(f"the histogram counts {counted}, the students sent {expected}")
    if f"Guesses in: {n} of {n}" not in run.presenter_count:
        problems.append(f"the presenter's count reads {run.presenter_count!r}")
    latency = {}
    for key in EVENTS:
        xs = [max(0.0, s.seen[key] - run.done[key]) for s in run.students if key in s.seen]
        latency[key] = {"n": len(xs), "median_s": statistics.median(xs) if xs else None, "p95_s": _pct(xs, 0.95),
                        "max_s": max(xs) if xs else None, "request_s": run.took.get(key)}
    every = [max(0.0, s.seen[k] - run.done[k]) for s in run.students for k in EVENTS if k in s.seen]
    joining = cpu["joined"][0] - cpu["join_start"][0], cpu["joined"][1] - cpu["join_start"][1]
    idle = cpu["idle_end"][0] - cpu["idle_start"][0], cpu["idle_end"][1] - cpu["idle_start"][1]
    chapter = cpu["chapter_end"][0] - cpu["chapter_start"][0], cpu["chapter_end"][1] - cpu["chapter_start"][1]
    polls = sum(s.polls for s in run.students)
    return {"students": n, "poll_s": POLL_S, "problems": problems, "expected": expected, "counted": counted,
            "latency": latency, "all_median_s": statistics.median(every), "all_p95_s": _pct(every, 0.95),
            "join_s": joining[1], "server_cpu_ms_per_join": joining[0] / n * 1000,
            "server_cpu_idle_polling": idle[0] / idle[1], "idle_s": idle[1],
            "server_cpu_quiet": cpu["quiet"][0] / cpu["quiet"][1],
            "server_cpu_ms_per_idle_poll": (idle[0] - cpu["quiet"][0] / cpu["quiet"][1] * idle[1])
            / max(1e-9, idle[1] * n / POLL_S) * 1000,
            "server_cpu_chapter": chapter[0] / chapter[1], "chapter_s": chapter[1],
            "server_rss_mb_before": rss_before, "server_rss_mb_after": rss_after, "client_cpu_s": client_cpu_s,
            "polls": polls, "bytes_per_student": statistics.mean(s.page.received for s in run.students),
            "presenter_count": run.presenter_count}


def summary(r: dict) -> str:
    lines = [f"{r['students']} students, polling every {r['poll_s']:g} s; {r['polls']} polls in all",
             (f"  joining all at once: {r['join_s']:.1f} s, {r['server_cpu_ms_per_join']:.0f} ms of server CPU "
              "per student (its page's first events included)")]
    for key, v in r["latency"].items():
        lines.append(f"  {key:7s} seen by {v['n']:3d}: median {v['median_s']:.2f} s, p95 {v['p95_s']:.2f} s, "
                     f"max {v['max_s']:.2f} s (the presenter's request took {v['request_s']:.2f} s)")
    lines.append("  (from the presenter's click; the run from the model's end)")
    lines += [f"  every action: median {r['all_median_s']:.2f} s, p95 {r['all_p95_s']:.2f} s",
              (f"  server CPU: {r['server_cpu_idle_polling']:.0%} of a core while {r['students']} pages poll idle "
               f"({r['idle_s']:.0f} s; {r['server_cpu_quiet']:.0%} with nobody in the class: ≈ "
               f"{r['server_cpu_ms_per_idle_poll']:.2f} ms per poll, the presenter's page's own timer included), "
               f"{r['server_cpu_chapter']:.0%} over the chapter ({r['chapter_s']:.0f} s, the model's run included)"),
              (f"  server RSS: {r['server_rss_mb_before']:.0f} MB before the class, "
               f"{r['server_rss_mb_after']:.0f} MB after"),
              (f"  client CPU: {r['client_cpu_s']:.1f} s; a student's page received "
               f"{r['bytes_per_student'] / 1024:.0f} KB"),
              f"  histogram {r['counted']} (sent {r['expected']}); presenter: {r['presenter_count'].strip()}"]
    lines += [f"  PROBLEM: {p}" for p in r["problems"]] or ["  checks: all passed"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=150)
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of idle polling measured before the chapter")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "SPECDEC_CLASS_STUDENTS": str(max(200, args.students))}
    with start_app(env) as app:
        result = asyncio.run(drive(app, args.students, args.idle))
    print(summary(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
