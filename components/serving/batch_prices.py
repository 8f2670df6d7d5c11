"""This machine's batch prices (``policy.batch_cost.BatchPrices``: the verify over B rows × w tokens, a draft step
over B rows, the host times, at B = 1, 2, 4, 8, 16) for the Theory tab's (B, K) chart, measured once per process in
the background: ``app.main`` starts it (never at import); it waits for the start-up calibration to end and for the
app to be idle (``calibrate.StartupCalibration.wait_idle``), then measures the default pair's prices (the feature
draft, the recommended K cap, greedy: the key a batched run with the recommended settings is priced by) holding the
target's lock, and between batch sizes gives the lock back to any run that wants it. The tab shows "measuring…"
until they are there (measured in a script on this busy machine: 150 s).
"""
from __future__ import annotations

import sys
import threading
import time

from specdec_core.batch.engine import batch_generate
from specdec_core.batch.prices import measured_batch_prices
from specdec_core.config import SpecConfig, recommended_config
from specdec_core.policy.batch_cost import BatchPrices

from components.serving import calibrate
from components.serving.pairs import PAIR_FEATURE, Pool, resolve_pair

MEASURING = ("Measuring this machine's batch prices in the background (once, while the app is idle): open this tab "
             "again in a few minutes.")
NOT_STARTED = "This machine's batch prices are measured when the app starts (app.py); none here yet."


class BatchPriceJob:
    """One background measurement of ``pair``'s batch prices (``start``: in a thread of its own)."""

    def __init__(self, pool: Pool | None, pair: str = PAIR_FEATURE, cfg: SpecConfig | None = None) -> None:
        self.pool, self.pair = pool, pair
        self.cfg = cfg if cfg is not None else recommended_config()
        self.prices: BatchPrices | None = None
        self.error = ""
        self.done = threading.Event()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="batch-prices", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            cal = calibrate.current()
            if cal is not None:
                cal.finished.wait()
                cal.wait_idle()
            pair = resolve_pair(self.pool, self.pair)
            lock = pair.target.lock

            def pause() -> None:               # between batch sizes: runs first
                lock.release()
                if cal is not None:
                    cal.wait_idle()
                lock.acquire()
            lock.acquire()
            try:
                self.prices = measured_batch_prices(pair.target.model, pair.drafter(), self.cfg, batch_generate,
                                                    pause=pause)
            finally:
                lock.release()
            print(f"batch prices: measured in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - the chart says it has no prices; nothing else depends on them
            self.error = f"{type(e).__name__}: {e}"[:300]
            print(f"batch prices: failed ({self.error})", file=sys.stderr, flush=True)
        finally:
            self.done.set()

    def status(self) -> str:
        """What the chart says while it has no prices ("" once it has them)."""
        if self.prices is not None:
            return ""
        if self.error:
            return f"This machine's batch prices could not be measured ({self.error})."
        return MEASURING


_current: BatchPriceJob | None = None


def start_batch_prices(pool: Pool) -> BatchPriceJob:
    """Start the background measurement (``app.main``, after the start-up calibration has started)."""
    global _current
    _current = BatchPriceJob(pool)
    _current.start()
    return _current


def current() -> BatchPriceJob | None:
    return _current


def set_current(job: BatchPriceJob | None) -> None:
    """Install (or remove) the job the Theory tab reads (tests: one holding hand-built prices)."""
    global _current
    _current = job


def prices_now() -> tuple[BatchPrices | None, str]:
    """(this machine's batch prices or None, what the chart says meanwhile)."""
    job = _current
    if job is None:
        return None, NOT_STARTED
    return job.prices, job.status()


__all__ = ["BatchPriceJob", "start_batch_prices", "current", "set_current", "prices_now", "MEASURING"]
