"""The app's one-time calibration of this machine's costs, in the background from start-up (``app.main`` calls
``start_calibration`` once the bundled model is loaded; never at import, never in ``build_demo``).

The cost-aware K policy (the default) prices every run with costs fixed before the run starts
(``specdec_core/decoding/prices.py``), measured once per process. Measured here, in order, each job holding the
target's lock (no run or experiment times the model meanwhile):

  1. the bundled target's verify curve, 1 … the recommended K cap + 1 tokens fed;
  2. the trained feature draft's costs (the default pair: a draft step, a catch-up forward per token, the host
     time per iteration greedy and sampling, a tree level and a tree iteration's host time);
  -- start-up proper ends here: ``app.main`` opens the page only after it (``wait_first``), so the first run of
     the default settings starts at once --
  3. prompt lookup's costs, 4. the token-only draft's; 5. the verify curve's larger sizes, up to what the page
     allows (K 16, trees of 32 nodes), appended to the stored sizes (which keep their prices); 6. the
     self-draft's costs (every draft step a target forward). These give way to runs: they start, and go on
     after each timed round, only once no run has been going for ``IDLE_S`` (``run_going`` around every run).

``wait_for_calibration`` is the session's side: while jobs 1-2 run (where a page is served meanwhile) every run
waits, showing "Calibrating this machine's costs (one-time, ~N s)…"; after that a run waits only while its own
prices are still to come (another pair, a K above the cap, a tree). So no run is priced with a half-finished
calibration, and no run measures anything while the start-up does.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specdec_core import SpecConfig, limits
from specdec_core.config import RECOMMENDED_K_CAP
from specdec_core.decoding import prices
from specdec_core.decoding.engine import speculative_generate
from specdec_core.policy import calibration

from components.serving.pairs import PAIR_FEATURE, PAIR_NGRAM, PAIR_SELF, PAIR_TRAINED, Pair, Pool, resolve_pair
from components.serving.run_limits import POLL_S

NOTE = "Calibrating this machine's costs (one-time, ~{eta} s)…"
IDLE_S = 30.0          # the later jobs measure once the app has been idle this long (from its page opening or a
                       # run's end), or at once for a run that waits for them
FIRST_SIZES = RECOMMENDED_K_CAP + 1                             # what the recommended settings can feed
ALL_SIZES = max(limits.MAX_K, limits.MAX_TREE_NODES) + 1        # what the page allows


@dataclass(frozen=True)
class Job:
    """One measurement: the verify curve of ``pair``'s target up to ``sizes`` tokens fed, or (``sizes`` 0) the
    costs of ``pair``'s drafter. ``weight``: its expected length in one-token forwards (for the estimate);
    ``first``: part of start-up proper, which every run waits for."""
    name: str
    pair: str
    sizes: int
    weight: float
    first: bool


def _verify_weight(lo: int, hi: int, repeats: int) -> float:
    """Forwards of lo … hi tokens in ``repeats`` rounds, in one-token forwards (n tokens ≈ 1 + 0.1 (n - 1))."""
    return 3 + repeats * sum(1 + 0.1 * (n - 1) for n in range(lo, hi + 1))


def default_jobs() -> list[Job]:
    return [Job("the target's verify curve", PAIR_FEATURE, FIRST_SIZES,
                _verify_weight(1, FIRST_SIZES, calibration.DEFAULT_REPEATS), True),
            Job("the feature draft's costs", PAIR_FEATURE, 0, 65, True),     # weights: as measured here (a
            Job("prompt lookup's costs", PAIR_NGRAM, 0, 55, False),          # loaded day, t(1) ≈ 200 ms)
            Job("the token-only draft's costs", PAIR_TRAINED, 0, 65, False),
            Job("the verify curve's larger sizes", PAIR_FEATURE, ALL_SIZES,
                _verify_weight(FIRST_SIZES - calibration.EXTEND_OVERLAP + 1, ALL_SIZES, calibration.EXTEND_REPEATS),
                False),
            Job("the self-draft's costs", PAIR_SELF, 0, 160, False)]


class StartupCalibration:
    """The jobs above, run once in a thread of their own (``start``) or in the caller's (``run``)."""

    def __init__(self, pool: Pool, jobs: list[Job] | None = None) -> None:
        self.pool = pool
        self.jobs = default_jobs() if jobs is None else list(jobs)
        self.done = 0                                   # jobs finished (or failed)
        self.first_done = not any(j.first for j in self.jobs)
        self.finished = threading.Event()
        self.errors: list[str] = []
        self._changed = threading.Condition()
        self._unit_s: float | None = None               # seconds per one-token forward, as measured
        self._job_start = 0.0
        self._spent = 0.0                               # seconds of the finished jobs
        self._runs = 0                                  # runs going now (``run_going``)
        self._wanted = 0                                # runs waiting for a later job's prices
        self._last_run = -float("inf")                  # when the last one ended
        self.started = False

    # -- running --
    def start(self) -> threading.Thread:
        self.started = True
        thread = threading.Thread(target=self.run, name="startup-calibration", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        self.started = True
        t_all = time.monotonic()
        try:
            for job in self.jobs:
                self._job_start = time.monotonic()
                try:
                    self._run_job(job)
                except Exception as e:  # noqa: BLE001 - a pair that cannot load is priced at its first run instead
                    self.errors.append(f"{job.name}: {e}")
                    print(f"calibration: {job.name} failed ({e}); its runs will measure it themselves",
                          file=sys.stderr, flush=True)
                with self._changed:
                    self._spent += time.monotonic() - self._job_start
                    self.done += 1
                    if not self.first_done and not any(j.first for j in self.jobs[self.done:]):
                        self.first_done = True
                        self._last_run = time.monotonic()     # the page opens now: its first run comes first
                    self._changed.notify_all()
        finally:
            with self._changed:
                self.first_done = True
                self.done = len(self.jobs)
                self.finished.set()
                self._changed.notify_all()
            print(f"calibration: done in {time.monotonic() - t_all:.1f} s", file=sys.stderr, flush=True)

    def _run_job(self, job: Job) -> None:
        pair = resolve_pair(self.pool, job.pair)
        target = pair.target
        if self._unit_s is None:
            self._unit_s = _one_forward_s(target.model)
        lock = target.lock
        if not job.first:
            self.wait_idle()
        lock.acquire()
        held = [True]

        def pause() -> None:                           # let the runs waiting for the model through, and wait
            lock.release()                             # until the app has been idle a while
            held[0] = False
            self.wait_idle()
            lock.acquire()
            held[0] = True
        try:
            let_through = None if job.first else pause
            if job.sizes:
                calibration.calibrate(target.model, job.sizes, pause=let_through)
            else:
                curve = calibration.calibrate(target.model, max(prices.CAL_K, prices.CAL_TREE_NODES) + 1)
                prices.drafter_costs(target.model, pair.drafter(), curve, speculative_generate, pause=let_through)
        finally:
            if held[0]:
                lock.release()

    @contextlib.contextmanager
    def run_going(self) -> Iterator[None]:
        """A run waiting for its models or running: the later jobs hold back until none has been going for
        ``IDLE_S`` (a run that comes while a timed round goes waits for that round only)."""
        with self._changed:
            self._runs += 1
        try:
            yield
        finally:
            with self._changed:
                self._runs -= 1
                self._last_run = time.monotonic()

    def page_opens(self) -> None:
        """The app serves its page from now: the later jobs wait ``IDLE_S`` for its first run."""
        with self._changed:
            self._last_run = time.monotonic()

    @contextlib.contextmanager
    def wanted(self) -> Iterator[None]:
        """A run waiting for prices a later job measures: the jobs go on without waiting for the app to be idle."""
        with self._changed:
            self._wanted += 1
        try:
            yield
        finally:
            with self._changed:
                self._wanted -= 1

    def wait_idle(self) -> None:
        """Until no run is going and none has for ``IDLE_S`` (at once while a run waits for a later job's prices);
        the background measurements elsewhere (``batch_prices``) give way to runs through it too."""
        while self._runs or (not self._wanted and time.monotonic() < self._last_run + IDLE_S):
            time.sleep(0.25)

    # -- what a waiting run is told --
    @property
    def running(self) -> bool:
        return self.started and not self.finished.is_set()

    def remaining_s(self) -> float:
        """Seconds until the last job ends (an estimate: the jobs' weights at the speed measured so far)."""
        with self._changed:
            done, spent, job_start = self.done, self._spent, self._job_start
        if done >= len(self.jobs):
            return 0.0
        done_weight = sum(j.weight for j in self.jobs[:done])
        unit = spent / done_weight if done and done_weight > 0 else (self._unit_s or 0.05)
        current = self.jobs[done]
        into = (time.monotonic() - job_start) / unit if job_start else 0.0
        left = max(0.1 * current.weight, current.weight - into) + sum(j.weight for j in self.jobs[done + 1:]
                                                                      if j.first or not current.first)
        return left * unit

    def message(self) -> str:
        return NOTE.format(eta=max(1, round(self.remaining_s())))

    def wait_first(self) -> None:
        """Until start-up proper has ended (the app opens its page after it: the first run starts at once)."""
        with self._changed:
            self._changed.wait_for(lambda: self.first_done)

    def wait_change(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)


def _one_forward_s(model: Any) -> float:
    """A one-token forward, timed (the quickest of three: a first guess at the speed, before any job has ended)."""
    import torch
    x = torch.zeros((1, 1), dtype=torch.long, device=next(model.parameters()).device)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(3):
            t0 = time.monotonic()
            model(input_ids=x)
            best = min(best, time.monotonic() - t0)
    return best


_current: StartupCalibration | None = None


def start_calibration(pool: Pool, jobs: list[Job] | None = None) -> StartupCalibration:
    """Start the app's one-time calibration in a background thread; sessions wait for it from now on."""
    global _current
    _current = StartupCalibration(pool, jobs)
    _current.start()
    return _current


def current() -> StartupCalibration | None:
    """The app's start-up calibration, if one was started in this process."""
    return _current


def set_current(cal: StartupCalibration | None) -> None:
    """Install (or, with None, remove) the calibration sessions wait for (tests)."""
    global _current
    _current = cal


def wait_for_calibration(pair: Pair, cfg: SpecConfig, frame: Callable[[str], Any],
                         poll_s: float = POLL_S) -> Iterator[Any]:
    """A session's wait (``yield from``) for the start-up calibration: every run while its first jobs go, then a
    cost-aware run whose prices this process has not measured yet, until they are there or the calibration
    ends. Yields ``frame(note)`` with the estimated time left; ends at once when no calibration is going."""
    cal = _current
    drafter = None
    while cal is not None and cal.running:
        if cal.first_done:
            if cfg.k_policy != "cost":
                return
            drafter = drafter if drafter is not None else pair.drafter()
            if prices.cached_prices(cfg, pair.target.model, drafter) is not None:
                return
            with cal.wanted():
                yield frame(cal.message())
                cal.wait_change(poll_s)
        else:
            yield frame(cal.message())
            cal.wait_change(poll_s)


def run_going() -> contextlib.AbstractContextManager:
    """Around a run's wait for its models and the run: the start-up calibration's later jobs give way to it."""
    return _current.run_going() if _current is not None else contextlib.nullcontext()




def run_reference(pool: Pool, pair_key: Any, cfg: SpecConfig) -> str | None:
    """What a run of ``cfg`` on ``pair_key`` depends on here besides its settings and seed
    (``decoding.prices.run_fingerprint``: the models, their numerics, the prices), or None where that cannot be
    told without loading a model or measuring (a Hub pair not loaded yet, prices not measured yet)."""
    if not isinstance(pair_key, str):
        return None
    if not pair_key.startswith("bundled|"):
        from specdec_core import PRESETS
        loaded = set(getattr(pool, "loaded", list)())
        index = pair_key[7:] if pair_key.startswith("preset:") else ""
        if not (index.isdigit() and int(index) < len(PRESETS)
                and {PRESETS[int(index)].target, PRESETS[int(index)].draft} <= loaded):
            return None
    try:
        pair = resolve_pair(pool, pair_key)
    except (ValueError, RuntimeError):
        return None
    return prices.run_fingerprint(cfg, pair.target.model, pair.drafter())


__all__ = ["StartupCalibration", "Job", "default_jobs", "start_calibration", "current", "set_current",
           "wait_for_calibration", "run_going", "run_reference", "NOTE"]
