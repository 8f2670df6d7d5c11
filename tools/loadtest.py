"""A class's load on the app, as an outside tester would apply it: start ``app.py`` on 127.0.0.1, drive N
simultaneous ``gradio_client`` sessions through the named endpoints ``/generate`` and ``/validate_trace``,
and report what a teacher would ask of a shared Space.

    python -m tools.loadtest --sessions 32 --runs 6 --tokens 12

Each session, after a common start signal, repeats ``--runs`` times: a Live run (``/generate``, one of a
few fixed settings, greedy and sampled, n-gram and self-drafting), the replay check of the trace it got
(``/validate_trace``) and of a broken copy (must be refused); every third session also asks for a hub
preset (fails to load here: no network — must be refused with a message, quickly) and every fourth
submits a longer run and cancels it. Before that, every setting is run once alone ("solo"): the solo
traces are the reference (same seed ⇒ same trace: tokens and every accept/reject decision must match)
and the solo time gives the serialized lower bound (requests × solo time, as if served one at a time).

Printed: sessions, requests, errors (unexpected), expected refusals, cancelled jobs, p50/p95/max latency
of the Live runs next to the serialized lower bound, cross-talk (outputs differing from solo), the app
process's RSS before (after the solo phase, warm) and after, the files the load added to the export and
Gradio cache folders (an app that served others before keeps theirs). Exit status 1 when anything unexpected
happened. Loopback only; every loop is bounded.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.procs import free_port, stop

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ("Repeat exactly: red green blue, red green blue, red green blue, red green blue.",
           "Count from 1 to 20, separated by commas.",
           "Write one sentence about the sea.")
# (pair, k, temperature, top_p, seed, prompt index): fixed K only (an adaptive policy could read timings)
SETTINGS = (("bundled|ngram", 4, 0.0, 1.0, 0, 0), ("bundled|ngram", 3, 0.8, 0.95, 1, 1),
            ("bundled|self", 2, 1.0, 1.0, 2, 2), ("bundled|ngram", 2, 0.7, 1.0, 3, 2))
FAILING_PAIR = "preset:0"                 # a hub preset: cannot load without network


@dataclass
class Report:
    sessions: int = 0
    requests: int = 0
    generate_requests: int = 0
    errors: list[str] = field(default_factory=list)        # unexpected: any is a failure
    refusals: int = 0                                      # expected refusals, each with a clear message
    cancelled: int = 0
    mismatches: list[str] = field(default_factory=list)    # outputs differing from the solo run
    latencies_s: list[float] = field(default_factory=list)  # /generate, concurrent phase
    solo_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    rss_before_mb: float = 0.0
    rss_after_mb: float = 0.0
    rss_waves_mb: list[float] = field(default_factory=list)   # after each wave of the load
    export_files: int = 0                                  # new files since the load began
    cache_files: int = 0
    sessions_served: int = 0

    @property
    def serialized_lower_bound_s(self) -> float:
        solo = statistics.fmean(self.solo_s.values()) if self.solo_s else 0.0
        return self.generate_requests * solo

    def summary(self) -> str:
        lat = sorted(self.latencies_s) or [0.0]
        p = lambda q: lat[min(len(lat) - 1, int(round(q * (len(lat) - 1))))]  # noqa: E731
        growth = (self.rss_after_mb / self.rss_before_mb - 1) * 100 if self.rss_before_mb else 0.0
        solo = statistics.fmean(self.solo_s.values()) if self.solo_s else 0.0
        waves = self.rss_waves_mb
        later = (f"; after each wave: {', '.join(f'{x:.0f}' for x in waves)} MB (growth from the first wave's end: "
                 f"{(waves[-1] / waves[0] - 1) * 100:+.1f} %)" if len(waves) > 1 else "")
        lines = [
            f"sessions: {self.sessions} (served: {self.sessions_served})",
            f"requests: {self.requests} ({self.generate_requests} Live runs via /generate), wall {self.wall_s:.1f} s",
            f"errors (unexpected): {len(self.errors)}; expected refusals: {self.refusals}; cancelled jobs: {self.cancelled}",
            f"/generate latency: p50 {p(0.5):.2f} s, p95 {p(0.95):.2f} s, max {lat[-1]:.2f} s; solo {solo:.2f} s, "
            f"so with every session asking at once the serialized lower bound is sessions × solo = "
            f"{self.sessions * solo:.1f} s",
            f"all {self.generate_requests} Live runs one after another would take ≥ {self.serialized_lower_bound_s:.1f} s; "
            f"the load took {self.wall_s:.1f} s",
            f"cross-talk (traces differing from the solo run, same seed): {len(self.mismatches)}",
            f"app RSS: {self.rss_before_mb:.0f} MB before (warm, after the solo runs), {self.rss_after_mb:.0f} MB "
            f"after ({growth:+.1f} %){later}",
            f"files the load left: {self.export_files} in the export folder, {self.cache_files} in Gradio's cache",
        ]
        lines += [f"  error: {e}" for e in self.errors[:10]] + [f"  mismatch: {m}" for m in self.mismatches[:10]]
        return "\n".join(lines)

    def ok(self) -> bool:
        return not self.errors and not self.mismatches and self.sessions_served == self.sessions


# --- the app process ------------------------------------------------------------------------------------

def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class AppProcess:
    url: str
    proc: subprocess.Popen
    tmp: str                          # TMPDIR of the app: its export folder lives here

    @property
    def export_dir(self) -> str:
        return os.path.join(self.tmp, "specdec-exports")

    @property
    def cache_dir(self) -> str:
        return os.path.join(self.tmp, "gradio")


@contextmanager
def start_app(env_extra: dict[str, str] | None = None, start_timeout_s: float = 300.0) -> Iterator[AppProcess]:
    """``python app.py`` on 127.0.0.1 and a free port, with its own temporary folder; stopped on exit."""
    import urllib.request
    tmp = tempfile.mkdtemp(prefix="specdec-loadtest-")
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "TMPDIR": tmp,
           "GRADIO_TEMP_DIR": os.path.join(tmp, "gradio"), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0"), **(env_extra or {})}
    log = open(os.path.join(tmp, "app.log"), "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=str(ROOT), env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                log.flush()
                raise RuntimeError(f"the app exited with {proc.returncode}: "
                                   + Path(tmp, "app.log").read_text(errors="replace")[-2000:])
            try:
                with urllib.request.urlopen(url + "config", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the app did not answer on {url} within {start_timeout_s:.0f} s")
            time.sleep(1.0)
        yield AppProcess(url, proc, tmp)
    finally:
        stop(proc, 30)
        log.close()


def files_in(folder: str) -> set[str]:
    """Every file under ``folder`` (none when it does not exist)."""
    return {os.path.join(top, name) for top, _, names in os.walk(folder) for name in names}


# --- what a session does ----------------------------------------------------------------------------------

def client(url: str) -> Any:
    from gradio_client import Client
    return Client(url, verbose=False, download_files=False)


class ApiError(Exception):
    """The app refused an API call; the message is the one the page would show."""


class HttpApi:
    """The app's named endpoints over plain HTTP, as curl would call them (Gradio's REST API: POST the inputs to
    ``/gradio_api/call/<name>``, then read the result from that call's event stream). Inputs left out take the
    endpoint's defaults, read once from its API description. A call costs the client almost no CPU (gradio_client
    polls in threads of its own: about 40 ms of CPU and 70 ms per call here, against 20 ms), so checks that make
    many calls use this."""

    def __init__(self, url: str) -> None:
        c = client(url)
        try:
            api = c.view_api(print_info=False, return_format="dict")["named_endpoints"]
        finally:
            c.close()
        self.url = url
        self.inputs = {name: [(p["parameter_name"], p.get("parameter_default")) for p in ep["parameters"]]
                       for name, ep in api.items()}

    def call(self, api_name: str, **inputs: Any) -> list:
        """The endpoint's outputs. Raises ApiError when the app refuses, ValueError or TypeError for inputs
        that are not strict JSON."""
        import urllib.request
        names = self.inputs[api_name]
        unknown = set(inputs) - {n for n, _ in names}
        if unknown:
            raise TypeError(f"{api_name} has no input(s) {sorted(unknown)}")
        body = json.dumps({"data": [inputs.get(n, default) for n, default in names]}, allow_nan=False)
        request = urllib.request.Request(f"{self.url}gradio_api/call{api_name}", data=body.encode("utf-8"),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            event_id = json.loads(r.read())["event_id"]
        with urllib.request.urlopen(f"{self.url}gradio_api/call{api_name}/{event_id}", timeout=600) as r:
            stream = r.read().decode("utf-8")
        events = [dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
                  for block in stream.split("\n\n") if block.strip()]
        last = next((e for e in reversed(events) if e.get("event") in ("complete", "error")), {})
        data = json.loads(last["data"]) if last.get("data") else None
        if last.get("event") == "complete":
            return data
        if last.get("event") == "error":
            raise ApiError(str(data.get("error") or "") if isinstance(data, dict) else str(data or ""))
        raise RuntimeError(f"{api_name}: no result in the event stream: {stream[-300:]!r}")


def generate_args(setting: tuple, tokens: int) -> dict[str, Any]:
    pair, k, temperature, top_p, seed, prompt = setting
    return dict(prompt=PROMPTS[prompt], pair=pair, k=k, adaptive_k=False, temperature=temperature, top_k=0,
                top_p=top_p, max_new_tokens=tokens, seed=seed, chat=True, baseline=False)


def fingerprint(trace: dict) -> tuple:
    """What must not differ between two runs of the same setting: tokens and every decision (no timings)."""
    its = [(it["k"], [(d["token_id"], d["accepted"], d.get("u")) for d in it["drafts"]], it["emitted"])
           for it in trace["iterations"]]
    return tuple(trace["new_token_ids"]), repr(its), trace["text"]


def broken(trace: dict) -> dict:
    bad = json.loads(json.dumps(trace))
    bad["iterations"][0]["drafts"] = "not a list" if bad["iterations"][0]["drafts"] else [{"token_id": -1}]
    return bad


def _refusal_message(exc: BaseException) -> str:
    return str(exc).strip()


def run_session(url: str, index: int, runs: int, tokens: int, start: threading.Barrier,
                reference: dict[int, tuple], report: Report, lock: threading.Lock) -> None:
    """One simulated student. Everything it sees goes into ``report`` (under ``lock``)."""
    from gradio_client.exceptions import AppError

    def note(**kw: Any) -> None:
        with lock:
            for key, value in kw.items():
                current = getattr(report, key)
                if isinstance(current, list):
                    current.append(value)
                else:
                    setattr(report, key, current + value)

    try:
        c = client(url)
    except Exception as e:  # noqa: BLE001
        note(errors=f"session {index}: could not connect: {e}")
        return
    start.wait(timeout=600)
    served = False
    for r in range(runs):
        s = (index + r) % len(SETTINGS)
        t0 = time.monotonic()
        try:
            trace, summary = c.predict(**generate_args(SETTINGS[s], tokens), api_name="/generate")
            note(latencies_s=time.monotonic() - t0, requests=1, generate_requests=1)
            served = True
            if fingerprint(trace) != reference[s]:
                note(mismatches=f"session {index} run {r} setting {s}: {trace['new_token_ids'][:12]}…")
        except Exception as e:  # noqa: BLE001
            note(errors=f"session {index} /generate setting {s}: {type(e).__name__}: {str(e)[:200]}", requests=1)
            continue
        try:
            line = c.predict(trace=trace, api_name="/validate_trace")
            note(requests=1)
            if line != summary:
                note(errors=f"session {index}: /validate_trace summary differs from /generate's")
        except Exception as e:  # noqa: BLE001
            note(errors=f"session {index} /validate_trace: {type(e).__name__}: {str(e)[:200]}", requests=1)
        try:
            c.predict(trace=broken(trace), api_name="/validate_trace")
            note(errors=f"session {index}: a broken trace was accepted", requests=1)
        except AppError as e:
            msg = _refusal_message(e)
            note(requests=1, refusals=1)
            if "drafts" not in msg or "Traceback" in msg:
                note(errors=f"session {index}: unclear refusal of a broken trace: {msg[:200]}")
        except Exception as e:  # noqa: BLE001
            note(errors=f"session {index} broken /validate_trace: {type(e).__name__}: {str(e)[:200]}", requests=1)
        if index % 3 == 2 and r == 0:
            t1 = time.monotonic()
            try:
                c.predict(**{**generate_args(SETTINGS[0], tokens), "pair": FAILING_PAIR}, api_name="/generate")
                note(requests=1)       # loadable where the Hub is reachable: not an error either way
            except AppError as e:
                note(requests=1, refusals=1)
                msg = _refusal_message(e)
                if "Could not load the model pair" not in msg or time.monotonic() - t1 > 60:
                    note(errors=f"session {index}: preset refusal unclear or slow: {msg[:200]}")
            except Exception as e:  # noqa: BLE001
                note(errors=f"session {index} preset: {type(e).__name__}: {str(e)[:200]}", requests=1)
        if index % 4 == 3 and r == 0:
            job = c.submit(**generate_args(SETTINGS[1], min(4 * tokens, 512)), api_name="/generate")
            time.sleep(0.3)
            job.cancel()
            note(requests=1, cancelled=1)
    if served:
        note(sessions_served=1)
    try:
        c.close()
    except Exception:  # noqa: BLE001
        pass


def solo_runs(url: str, tokens: int, report: Report, warm_up: bool = True) -> dict[int, tuple]:
    """Each setting once, alone (after an untimed run of it, if ``warm_up``): the reference traces and the
    solo times."""
    c = client(url)
    reference = {}
    for s, setting in enumerate(SETTINGS):
        if warm_up:
            c.predict(**generate_args(setting, tokens), api_name="/generate")
        t0 = time.monotonic()
        trace, _ = c.predict(**generate_args(setting, tokens), api_name="/generate")
        report.solo_s[str(s)] = time.monotonic() - t0
        reference[s] = fingerprint(trace)
    c.close()
    return reference


def run_load(app: AppProcess, sessions: int, runs: int, tokens: int, waves: int = 1, warm_up: bool = True) -> Report:
    """Solo reference runs, then ``waves`` times: ``sessions`` simultaneous sessions of ``runs`` runs each
    (sessions_served counts the last wave's sessions), then one more solo run to compare. Without ``warm_up``
    the solo times include each setting's first run (a check that reads no timing need not pay for it)."""
    report = Report(sessions=sessions)
    before = files_in(app.export_dir), files_in(app.cache_dir)
    reference = solo_runs(app.url, tokens, report, warm_up)
    report.rss_before_mb = rss_mb(app.proc.pid)
    lock = threading.Lock()
    for _ in range(waves):
        report.sessions_served = 0
        start = threading.Barrier(sessions + 1)
        threads = [threading.Thread(target=run_session, args=(app.url, i, runs, tokens, start, reference, report,
                                                              lock), daemon=True) for i in range(sessions)]
        for t in threads:
            t.start()
        start.wait(timeout=600)
        t0 = time.monotonic()
        for t in threads:
            t.join(timeout=3600)
        report.wall_s += time.monotonic() - t0
        if any(t.is_alive() for t in threads):
            report.errors.append("some sessions did not finish within an hour")
        report.rss_waves_mb.append(rss_mb(app.proc.pid))
    # after the load: the app still serves a solo run identical to the reference
    c = client(app.url)
    trace, _ = c.predict(**generate_args(SETTINGS[0], tokens), api_name="/generate")
    if fingerprint(trace) != reference[0]:
        report.mismatches.append("the run after the load differs from the solo run")
    c.close()
    report.rss_after_mb = rss_mb(app.proc.pid)
    report.export_files = len(files_in(app.export_dir) - before[0])
    report.cache_files = len(files_in(app.cache_dir) - before[1])
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.loadtest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=6, help="simultaneous sessions (default 6)")
    ap.add_argument("--runs", type=int, default=1, help="Live runs per session (default 1)")
    ap.add_argument("--tokens", type=int, default=8, help="max new tokens per Live run (default 8)")
    ap.add_argument("--waves", type=int, default=1, help="repeat the whole load this many times (default 1): "
                    "RSS after each wave tells warm-up from a leak")
    ap.add_argument("--json", help="also write the report here as JSON")
    args = ap.parse_args(argv)
    for name in ("sessions", "runs", "tokens", "waves"):
        if not 1 <= getattr(args, name) <= (512 if name == "tokens" else 256):
            print(f"--{name} must be between 1 and {512 if name == 'tokens' else 256}", file=sys.stderr)
            return 2
    print(f"starting the app on 127.0.0.1 (bundled model), then {args.waves} wave(s) of {args.sessions} sessions × "
          f"{args.runs} runs of ≤ {args.tokens} tokens; machine: {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    with start_app() as app:
        report = run_load(app, args.sessions, args.runs, args.tokens, args.waves)
    print(report.summary())
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**asdict(report), "serialized_lower_bound_s": report.serialized_lower_bound_s}, f, indent=1)
    return 0 if report.ok() else 1


if __name__ == "__main__":
    raise SystemExit(main())
