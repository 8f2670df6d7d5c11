"""One run of the app, the same for the Live tab and for /generate:

    resolve the pair -> encode the prompt (a batch: every row's) -> wait for the start-up calibration where it
    prices this run (``calibrate``) -> wait for its models in turn -> what the run needs measured first (a batch's
    prices) -> stream the speculative run under the run limits -> the target-only baseline (if asked for, not
    stopped and within the time limit) -> release the models

``run_session`` is a generator of plain ``Event``s (no Gradio components): the Live tab turns them into page
frames (``live.run_live``), /generate keeps the last trace (``api.generate``). The settings come in as a
``SpecConfig`` that ``inputs.make_config`` built from the raw values of the page or the API, checked against
the one set of input limits; every refusal is a ``gr.Error`` naming the setting. A batch size of 1 runs the
single-sequence engine (``SingleRun``); above 1 the batched one (``batch_run.BatchRun``: your prompt and other
users' requests), whose trace is row 1's with the batch in ``trace.batch`` (every row in ``trace.rows()``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from specdec_core import SpecConfig, Trace, stream_baseline, stream_speculative
from specdec_core.stats.intervals import fill_stats

from components.serving.batch_run import BatchRun
from components.serving.calibrate import run_going, wait_for_calibration
from components.serving.inputs import prompt_ids
from components.serving.messages import page_error
from components.serving.pairs import Pair, Pool, resolve_pair
from components.serving.run_limits import LOCK_WAIT_S, RunClock, RunLimits, acquire_in_turn, run_on

# --- the run ----------------------------------------------------------------------------------------

EventKind = Literal["wait", "iteration", "baseline_start", "baseline", "done"]


@dataclass(frozen=True)
class Event:
    """One step of a run, as the session reports it:
    wait            still waiting for the start-up calibration, a model or a batch's prices; ``message`` says
                    which (the calibration's time left, the place in line)
    iteration       a speculative iteration arrived and the run goes on (the last one comes with "done")
    baseline_start  the speculative run is over; the baseline starts now
    baseline        a baseline token arrived (``trace.baseline`` is the baseline so far)
    done            the run is over and its models are free; ``message`` says how it ended
    ``trace`` is the run's trace (the same object, updated in place) for every kind but "wait"."""
    kind: EventKind
    trace: Trace | None = None
    message: str = ""


def _never() -> bool:
    return False


class SingleRun:
    """One sequence (``decoding``): the prompt's ids (checked when made), nothing to measure first, the speculative
    and baseline streams, the baseline so far into the trace (None drops it), the intervals at the end."""

    def __init__(self, pair: Pair, prompt: Any, cfg: SpecConfig, chat: bool) -> None:
        self.pair, self.prompt, self.cfg = pair, prompt, cfg
        self.ids = prompt_ids(pair.target, prompt, chat, cfg.max_new_tokens)
        self.calibration_cfg = cfg

    def prepare(self) -> Iterator[str]:
        return iter(())

    def speculative(self) -> Iterator[Trace]:
        lm = self.pair.target
        return stream_speculative(lm.model, self.pair.drafter(), self.ids, self.cfg, lm.tokenizer, prompt=self.prompt,
                                  meta=self.pair.meta)

    def baseline(self) -> Iterator[Any]:
        lm = self.pair.target
        return stream_baseline(lm.model, self.ids, self.cfg, lm.tokenizer)

    @staticmethod
    def attach(trace: Trace, base: Any) -> None:
        trace.baseline = base

    @staticmethod
    def finish(trace: Trace) -> None:
        fill_stats(trace)


def _finished(trace: Trace) -> bool:
    """Every row has ended (a single run: the run has)."""
    return all(row.finish_reason for row in trace.rows())


def _cut(trace: Trace, reason: str) -> None:
    """Every row still running ends with ``reason`` ("stopped", "limit")."""
    for row in trace.rows():
        row.finish_reason = row.finish_reason or reason


def run_session(pool: Pool, pair_key: Any, prompt: Any, cfg: SpecConfig, *, chat: bool, with_baseline: bool,
                should_stop: Callable[[], bool] = _never, batch_size: int = 1) -> Iterator[Event]:
    """One run, as events (see ``Event``); ``batch_size`` (checked by the caller: ``inputs.check_batch``) rows
    decoded together, row 1 the ``prompt``. The run limits (``RunLimits.from_env``) count from the moment the
    models are held and measured what the run needs (a batch's prices): a speculative run that reaches one is cut
    after its current iteration (finish reason "limit", no baseline; a batch's tokens counted by its longest
    row); a baseline that reaches the time limit, or is stopped, is dropped (an incomplete baseline would skew
    the comparison). ``should_stop`` is asked after every step (the Stop button). Closing the generator ends the
    run at once and frees its models. Refusals and failures are ``gr.Error``s with a message for the page."""
    try:
        pair = resolve_pair(pool, pair_key)
    except (ValueError, RuntimeError) as e:
        raise page_error(f"Could not load the model pair: {e}") from e
    run = SingleRun(pair, prompt, cfg, chat) if batch_size == 1 else BatchRun(pair, prompt, cfg, chat, batch_size)
    limits = RunLimits.from_env()
    yield from wait_for_calibration(pair, run.calibration_cfg, lambda msg: Event("wait", message=msg))
    with run_going():                        # the calibration's later jobs give way to a run
        held = yield from acquire_in_turn(pair.locks(), LOCK_WAIT_S, lambda msg: Event("wait", message=msg))
        trace: Trace | None = None
        cut = ""                                 # the limit this run reached, if any
        dropped = False                          # a baseline was begun and dropped
        with run_on(held):
            for note in run.prepare():
                yield Event("wait", message=note)
            clock = RunClock(limits)             # the run's time limit counts from here, not from the wait
            stream = run.speculative()
            try:
                for trace in stream:
                    if _finished(trace):
                        continue                 # the last iteration: reported with "done"
                    if should_stop():
                        _cut(trace, "stopped")
                        break
                    if cut := clock.exceeded(max(row.stats.new_tokens for row in trace.rows())):
                        _cut(trace, "limit")     # cut here; the trace so far is kept
                        break
                    yield Event("iteration", trace)
            finally:
                stream.close()
            if trace is None:
                raise page_error("Generation failed: the engine produced nothing.")
            if with_baseline and not should_stop() and not cut:
                yield Event("baseline_start", trace)
                base_stream = run.baseline()
                try:
                    for base in base_stream:
                        stopped = should_stop()
                        if stopped or clock.elapsed() >= limits.max_seconds:
                            run.attach(trace, None)
                            dropped = True
                            cut = "" if stopped else clock.exceeded(0)
                            break
                        run.attach(trace, base)
                        yield Event("baseline", trace)
                finally:
                    base_stream.close()
    run.finish(trace)                        # the intervals (and a batch's pooled speedup), now the baseline is in
    yield Event("done", trace, ending(trace, cut, dropped, with_baseline))


def ending(trace: Trace, cut: str, baseline_dropped: bool, with_baseline: bool) -> str:
    """How a run ended, in one sentence for the page."""
    reasons = {row.finish_reason for row in trace.rows()}
    if "limit" in reasons:
        return f"Stopped at the limit ({cut}): kept what was produced."
    if cut:
        return f"Stopped at the limit during the baseline ({cut}): kept the speculative run, dropped the baseline."
    if "stopped" in reasons:
        return "Stopped: kept what was produced."
    if baseline_dropped:
        return "Stopped during the baseline: kept the speculative run, dropped the incomplete baseline."
    if with_baseline and trace.baseline is None:
        return "Done (stopped before the baseline, so there is none)."
    return "Done."


__all__ = ["Event", "run_session", "ending", "SingleRun"]
