"""A class's load on the app, over HTTP as the pages themselves call it: start ``app.py`` on 127.0.0.1 (or several,
sharing their rooms through a redis-server this tool starts), then one presenter and N students (150 by default)
drive a whole chapter.

    python -m tools.classload --students 500                 # one app process
    python -m tools.classload --students 500 --replicas 2    # two, rooms in Redis, students split across them

The presenter is a Gradio page on the first app (its events by name: ``class_start``, its timer
``class_lead_poll``, ``class_follow``, the chapter's run ``learn_run_3`` and ``class_reveal``, both queued). Each
student is what the students' page does: ``POST /class/api/join`` on its replica, then the room's event stream
(``GET /class/api/events``) open for the whole class, and ``POST /class/api/guess``. The chapter: 3 ("Greedy: the
baseline's text"), whose guess is a choice, so the class's histogram can be counted exactly.

The script: everyone joins at once (timed until every page has its first event); ``--idle`` seconds with every
stream open and nothing new (what following costs); the presenter moves the class to chapter 3 and runs it; every
student, once its page shows the run, thinks for 2 to 12 s and sends a guess (every fifth changes its mind and sends
again, every tenth replays its send); once the presenter's count reads them all, the presenter reveals and then
moves on to chapter 4. Checked: the histogram every student is sent is one and the same and counts exactly the last
guess of each student (none lost, none twice); the presenter's count agrees; the results the presenter downloads
(``GET /class/api/results``, CSV) hold exactly those guesses. Reported: the join time and the server CPU per join;
for each presenter action, the time from the presenter's click (the run: from the model's end, when the room gets
it) to each student's page receiving it — median, 95th percentile, max —; the servers' CPU (idle and over the
chapter) and memory (RSS; Redis's own), the client's CPU, the bytes a student received. Exit status 1 when a check
fails. Loopback only; every wait is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import io
import json
import os
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tools.classclient import Conn, EventStream, Presenter, fn_table, value
from tools.loadtest import AppProcess, rss_mb, start_app
from tools.redisproc import RedisServer, redis_server

CHAPTER = 3             # a choice guess: "identical" / "different"
CHOICES = ("identical", "different")
EVENTS = ("next", "run", "reveal", "next2")
THINK_S = (2.0, 12.0)   # a student reads the run and thinks before sending (uniform, seeded per student)
POLL_S = 1.0            # the presenter's page's timer


def think_s(i: int) -> float:
    return random.Random(1000 + i).uniform(*THINK_S)


def guesses_of(i: int) -> list[str]:
    """Student ``i``'s sends: a choice; every fifth changes its mind; every tenth replays its last send."""
    first = CHOICES[i % 2]
    sends = [first, CHOICES[(i + 1) % 2]] if i % 5 == 0 else [first]
    return sends + [sends[-1]] if i % 10 == 3 else sends


@dataclass
class Student:
    index: int
    url: str
    conn: Conn
    stream: EventStream | None = None
    student: str = ""
    run_no: int = 0
    seen: dict[str, float] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    histogram: str | None = None
    errors: list[str] = field(default_factory=list)


@dataclass
class Run:
    students: list[Student]
    done: dict[str, float] = field(default_factory=dict)     # when each presenter action changed the room
    took: dict[str, float] = field(default_factory=dict)     # how long its request took
    presenter_count: str = ""
    stop: asyncio.Event = field(default_factory=asyncio.Event)


def text(update: Any) -> str:
    v = value(update)
    return re.sub(r"<[^>]+>", "", v) if isinstance(v, str) else ""


async def send_guesses(s: Student) -> None:
    await asyncio.sleep(think_s(s.index))
    for guess in guesses_of(s.index):
        status, said = await s.conn.post_json("/class/api/guess", {"code": s.stream.code, "student": s.student,
                                                                   "chapter": CHAPTER, "run_no": s.run_no,
                                                                   "value": guess})
        if status != 200:
            s.errors.append(f"send: {status} {said.get('error')}")
        s.sent.append(guess)


async def student_loop(s: Student, code: str) -> None:
    """Join, then follow the room as the page does, until the class has moved on to the next chapter."""
    status, joined = await s.conn.post_json("/class/api/join", {"code": code})
    if status != 200:
        s.errors.append(f"join: {status} {joined.get('error')}")
        return
    s.student = joined["student"]
    s.stream = EventStream(s.url, joined["code"])
    await s.stream.open()
    sending = None
    figures: dict[str, Any] = {}
    while True:
        event, data = await s.stream.next()
        now = time.monotonic()
        if event != "room":
            s.errors.append(f"stream: {event} {str(data)[:100]}")
            return
        figures.update(data["figures"])
        room = data["room"]
        s.seen.setdefault("joined", now)
        if room["chapter"] == CHAPTER:
            if room["phase"] == "waiting":
                s.seen.setdefault("next", now)
            elif room["phase"] == "open" and room["run"] and all(f in figures for f in room["run"]["figures"]):
                if "run" not in s.seen:
                    s.seen["run"], s.run_no = now, room["run_no"]
                    sending = asyncio.create_task(send_guesses(s))
            elif room["phase"] == "revealed" and room["reveal"] and room["reveal"]["histogram"] in figures:
                s.seen.setdefault("reveal", now)
                s.histogram = json.dumps(figures[room["reveal"]["histogram"]], sort_keys=True)
        elif room["chapter"] == CHAPTER + 1:
            s.seen.setdefault("next2", now)
            if sending is not None:
                await sending
            s.stream.close()
            return


async def presenter_poll(page: Presenter, run: Run) -> None:
    """The presenter's page's timer: the count, whenever the room changed."""
    seen: Any = -1
    while not run.stop.is_set():
        t0 = time.monotonic()
        out = await page.call("class_lead_poll", [None, seen])
        run.presenter_count = text(out[4]) or run.presenter_count
        seen = value(out[10]) if value(out[10]) is not None else seen
        await asyncio.sleep(max(0.0, POLL_S - (time.monotonic() - t0)))


def cpu_s(pids: list[int]) -> float:
    """The processes' CPU seconds (user + system) so far, together."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def wait_until(pred: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def calibrated(apps: list[AppProcess], timeout_s: float = 900) -> None:
    """Until every app's start-up calibration is over (its log says so): its later jobs run whenever the app has been
    idle 30 s, which a class following over the event stream is, and they would be measured with the class."""
    deadline = time.monotonic() + timeout_s
    for app in apps:
        log = os.path.join(app.tmp, "app.log")
        while "calibration: done" not in open(log, encoding="utf-8", errors="replace").read():
            if time.monotonic() > deadline:
                raise RuntimeError("the app's calibration did not finish")
            await asyncio.sleep(2.0)


async def drive(apps: list[AppProcess], redis: RedisServer | None, n: int, idle_s: float,
                measure: bool = True) -> dict:
    """The class on ``apps`` (the presenter on the first, students round-robin); ``measure`` False: the checks only,
    without waiting for the apps' calibration (whose CPU would be counted as the class's)."""
    pids = [a.proc.pid for a in apps] + ([redis.pid] if redis else [])
    app_pids = [a.proc.pid for a in apps]
    if measure:
        await calibrated(apps)
    fns = fn_table(apps[0].url)
    async with httpx.AsyncClient() as http:
        lead = Presenter(http, apps[0].url, fns)
        out = await lead.call("class_start", [apps[0].url, None, False, 1])
        code = re.search(r"[A-Z0-9]{4}-[A-Z0-9]{4}", text(out[2])).group(0).replace("-", "")
        secret = re.search(r"lead=\w+\.([\w-]+)", str(value(out[8]))).group(1)
        run = Run([Student(i, apps[i % len(apps)].url, Conn(apps[i % len(apps)].url)) for i in range(n)])
        cpu: dict[str, tuple[float, float]] = {}
        await asyncio.sleep(2.0)
        quiet = cpu_s(app_pids), time.monotonic()
        await asyncio.sleep(idle_s / 2)
        cpu["quiet"] = cpu_s(app_pids) - quiet[0], time.monotonic() - quiet[1]
        rss_before = [rss_mb(p) for p in app_pids]
        client0 = time.process_time()
        poll = asyncio.create_task(presenter_poll(lead, run))
        cpu["join_start"] = cpu_s(pids), time.monotonic()
        tasks = [asyncio.create_task(student_loop(s, code)) for s in run.students]
        await wait_until(lambda: all("joined" in s.seen or s.errors for s in run.students), "every student's join", 120)
        cpu["joined"] = cpu_s(pids), time.monotonic()
        await asyncio.sleep(2.0)
        cpu["idle_start"] = cpu_s(pids), time.monotonic()
        await asyncio.sleep(idle_s)
        cpu["idle_end"] = cpu_s(pids), time.monotonic()

        async def act(key: str, call: Any) -> list:
            t0 = time.monotonic()
            result = await call
            run.done[key], run.took[key] = (time.monotonic() if key == "run" else t0), time.monotonic() - t0
            return result
        cpu["chapter_start"] = cpu["idle_end"]
        await act("next", lead.call("class_follow", [None, CHAPTER]))
        await wait_until(lambda: all("next" in s.seen for s in run.students), "every student on the chapter", 60)
        await act("run", lead.queued("learn_run_3", [None, 0.0, 1400, None]))
        await wait_until(lambda: all(len(s.sent) == len(guesses_of(s.index)) or s.errors for s in run.students),
                         "every guess", 120)
        await wait_until(lambda: f"Guesses in: {n} of {n}" in run.presenter_count, "the presenter's count", 30)
        await act("reveal", lead.queued("class_reveal", [None]))
        await wait_until(lambda: all("reveal" in s.seen for s in run.students), "every student seeing the reveal", 60)
        await act("next2", lead.call("class_follow", [None, CHAPTER + 1]))
        await wait_until(lambda: all("next2" in s.seen for s in run.students), "every student on the next chapter", 60)
        cpu["chapter_end"] = cpu_s(pids), time.monotonic()
        client_cpu = time.process_time() - client0
        run.stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, poll), 60)
        r = await http.get(f"{apps[-1].url}class/api/results", params={"code": code, "format": "csv"},
                           headers={"Authorization": f"Bearer {secret}"})
        exported = list(csv.DictReader(io.StringIO(r.text))) if r.status_code == 200 else []
        redis_mb = None
        if redis is not None:
            import redis as redis_client
            redis_mb = redis_client.Redis.from_url(redis.url).info("memory")["used_memory"] / 2**20
        for s in run.students:
            s.conn.close()
        lead.conn.close()
        return report(run, cpu, rss_before, [rss_mb(p) for p in app_pids], client_cpu, n, exported, len(apps),
                      redis_mb)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def _rate(cpu: dict, a: str, b: str) -> tuple[float, float]:
    return cpu[b][0] - cpu[a][0], cpu[b][1] - cpu[a][1]


def report(run: Run, cpu: dict, rss_before: list[float], rss_after: list[float], client_cpu_s: float, n: int,
           exported: list[dict], replicas: int, redis_mb: float | None) -> dict:
    problems = [f"student {s.index}: {e}" for s in run.students for e in s.errors]
    expected = {c: 0 for c in CHOICES}
    for s in run.students:
        expected[guesses_of(s.index)[-1]] += 1
    want = {k: v for k, v in expected.items() if v}
    hists = {s.histogram for s in run.students}
    counted: dict[str, int] = {}
    if len(hists) != 1 or None in hists:
        problems.append(f"the students were sent {len(hists)} different histograms")
    else:
        for trace in json.loads(next(iter(hists)))["data"]:
            if trace.get("type") == "bar":
                for x, y in zip(trace["x"], trace["y"]):
                    counted[x.replace(" ✓", "")] = counted.get(x.replace(" ✓", ""), 0) + y
    if counted != want:
        problems.append(f"the histogram counts {counted}, the students sent {expected}")
    if f"Guesses in: {n} of {n}" not in run.presenter_count:
        problems.append(f"the presenter's count reads {run.presenter_count!r}")
    in_csv = {c: sum(1 for row in exported if row["guess"] == c and row["chapter"] == str(CHAPTER)) for c in CHOICES}
    if {k: v for k, v in in_csv.items() if v} != want:
        problems.append(f"the exported results hold {in_csv}, the students sent {expected}")
    latency = {}
    for key in EVENTS:
        xs = [max(0.0, s.seen[key] - run.done[key]) for s in run.students if key in s.seen]
        latency[key] = {"n": len(xs), "median_s": statistics.median(xs) if xs else None, "p95_s": _pct(xs, 0.95),
                        "max_s": max(xs) if xs else None, "request_s": run.took.get(key)}
    every = [max(0.0, s.seen[k] - run.done[k]) for s in run.students for k in EVENTS if k in s.seen]
    joining, idle, chapter = _rate(cpu, "join_start", "joined"), _rate(cpu, "idle_start", "idle_end"), \
        _rate(cpu, "chapter_start", "chapter_end")
    return {"students": n, "replicas": replicas, "problems": problems, "expected": expected, "counted": counted,
            "exported": in_csv, "latency": latency, "all_median_s": statistics.median(every) if every else None,
            "all_p95_s": _pct(every, 0.95), "join_s": joining[1], "server_cpu_ms_per_join": joining[0] / n * 1000,
            "server_cpu_idle": idle[0] / idle[1], "idle_s": idle[1],
            "server_cpu_quiet": cpu["quiet"][0] / cpu["quiet"][1],
            "server_cpu_chapter": chapter[0] / chapter[1], "chapter_s": chapter[1],
            "server_rss_mb_before": rss_before, "server_rss_mb_after": rss_after, "redis_used_mb": redis_mb,
            "client_cpu_s": client_cpu_s,
            "bytes_per_student": statistics.mean(s.conn.received + (s.stream.received if s.stream else 0)
                                                 for s in run.students),
            "presenter_count": run.presenter_count}


def summary(r: dict) -> str:
    where = f"{r['replicas']} app processes sharing a redis-server" if r["replicas"] > 1 else "one app process"
    lines = [f"{r['students']} students on {where}",
             (f"  joining all at once: {r['join_s']:.2f} s until every page had the room, "
              f"{r['server_cpu_ms_per_join']:.1f} ms of server CPU per student")]
    for key, v in r["latency"].items():
        lines.append(f"  {key:7s} seen by {v['n']:3d}: median {v['median_s']:.2f} s, p95 {v['p95_s']:.2f} s, "
                     f"max {v['max_s']:.2f} s (the presenter's request took {v['request_s']:.2f} s)")
    lines += ["  (from the presenter's click; the run from the model's end)",
              f"  every action: median {r['all_median_s']:.2f} s, p95 {r['all_p95_s']:.2f} s",
              (f"  server CPU: {r['server_cpu_idle']:.1%} of a core while {r['students']} pages follow with nothing "
               f"new ({r['idle_s']:.0f} s; {r['server_cpu_quiet']:.1%} with nobody in the class), "
               f"{r['server_cpu_chapter']:.0%} over the chapter ({r['chapter_s']:.0f} s, the model's run included)"),
              (f"  server RSS: {', '.join(f'{x:.0f}' for x in r['server_rss_mb_before'])} MB before the class, "
               f"{', '.join(f'{x:.0f}' for x in r['server_rss_mb_after'])} MB after"
               + (f"; Redis used {r['redis_used_mb']:.1f} MB" if r["redis_used_mb"] is not None else "")),
              (f"  client CPU: {r['client_cpu_s']:.1f} s; a student's page received "
               f"{r['bytes_per_student'] / 1024:.0f} KB"),
              (f"  histogram {r['counted']}, exported {r['exported']} (sent {r['expected']}); presenter: "
               f"{r['presenter_count'].strip()}")]
    lines += [f"  PROBLEM: {p}" for p in r["problems"]] or ["  checks: all passed"]
    return "\n".join(lines)


def run_class(students: int, replicas: int = 1, idle_s: float = 20.0, measure: bool = True) -> dict:
    """Start the app(s) (and Redis for several), drive the class, stop them all; the report."""
    env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "SPECDEC_CLASS_STUDENTS": str(max(500, students))}
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(redis_server()) if replicas > 1 else None
        if redis is not None:
            env["SPECDEC_CLASS_STORE"] = redis.url
        apps = [stack.enter_context(start_app(env)) for _ in range(replicas)]
        return asyncio.run(drive(apps, redis, students, idle_s, measure))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=150)
    ap.add_argument("--replicas", type=int, default=1, help="app processes; 2 or more share a redis-server")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of idle following measured before the chapter")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if not 1 <= args.students <= 5000 or not 1 <= args.replicas <= 8:
        ap.error("--students is 1 to 5000 and --replicas 1 to 8")
    result = run_class(args.students, args.replicas, args.idle)
    print(summary(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
