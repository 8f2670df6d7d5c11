"""One run of the app, the same for the Live tab and for /generate:

    resolve the pair -> encode the prompt -> wait for the start-up calibration where it prices this run
    (``calibrate``) -> wait for its models in turn -> stream the speculative run under
    the run limits -> the target-only baseline (if asked for, not stopped and within the time limit)
    -> release the models

``run_session`` is a generator of plain ``Event``s (no Gradio components): the Live tab turns them into page
frames (``live.run_live``), /generate keeps the last trace (``api.generate``). The settings come in as a
``SpecConfig`` that ``inputs.make_config`` built from the raw values of the page or the API, checked against
the one set of input limits; every refusal is a ``gr.Error`` naming the setting.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from specdec_core import SpecConfig, Trace, stream_baseline, stream_speculative
from specdec_core.stats.intervals import fill_stats

from components.serving.calibrate import run_going, wait_for_calibration
from components.serving.inputs import prompt_ids
from components.serving.messages import page_error
from components.serving.pairs import Pool, resolve_pair
from components.serving.run_limits import LOCK_WAIT_S, RunClock, RunLimits, acquire_in_turn, run_on

# --- the run ----------------------------------------------------------------------------------------

EventKind = Literal["wait", "iteration", "baseline_start", "baseline", "done"]


@dataclass(frozen=True)
class Event:
    """One step of a run, as the session reports it:
    wait            still waiting for the start-up calibration or a model; ``message`` says which (the
                    calibration's time left, the place in line)
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


def run_session(pool: Pool, pair_key: Any, prompt: Any, cfg: SpecConfig, *, chat: bool, with_baseline: bool,
                should_stop: Callable[[], bool] = _never) -> Iterator[Event]:
    """One run, as events (see ``Event``). The run limits (``RunLimits.from_env``) count from the moment
    the models are held: a speculative run that reaches one is cut after its current iteration (finish
    reason "limit", no baseline); a baseline that reaches the time limit, or is stopped, is dropped (an
    incomplete baseline would skew the comparison). ``should_stop`` is asked after every step (the Stop
    button). Closing the generator ends the run at once and frees its models. Refusals and failures are
    ``gr.Error``s with a message for the page."""
    try:
        pair = resolve_pair(pool, pair_key)
    except (ValueError, RuntimeError) as e:
        raise page_error(f"Could not load the model pair: {e}") from e
    ids = prompt_ids(pair.target, prompt, chat, cfg.max_new_tokens)
    limits = RunLimits.from_env()
    yield from wait_for_calibration(pair, cfg, lambda msg: Event("wait", message=msg))
    with run_going():                        # the calibration's later jobs give way to a run
        held = yield from acquire_in_turn(pair.locks(), LOCK_WAIT_S, lambda msg: Event("wait", message=msg))
        clock = RunClock(limits)                 # the run's time limit counts from here, not from the wait
        tok = pair.target.tokenizer
        trace: Trace | None = None
        cut = ""                                 # the limit this run reached, if any
        dropped = False                          # a baseline was begun and dropped
        with run_on(held):
            stream = stream_speculative(pair.target.model, pair.drafter(), ids, cfg, tok, prompt=prompt, meta=pair.meta)
            try:
                for trace in stream:
                    if trace.finish_reason:
                        continue                 # the last iteration: reported with "done"
                    if should_stop():
                        trace.finish_reason = "stopped"
                        break
                    if cut := clock.exceeded(trace.stats.new_tokens):
                        trace.finish_reason = "limit"     # cut here; the trace so far is kept
                        break
                    yield Event("iteration", trace)
            finally:
                stream.close()
            if trace is None:
                raise page_error("Generation failed: the engine produced nothing.")
            if with_baseline and not should_stop() and not cut:
                yield Event("baseline_start", trace)
                base_stream = stream_baseline(pair.target.model, ids, cfg, tok)
                try:
                    for base in base_stream:
                        stopped = should_stop()
                        if stopped or clock.elapsed() >= limits.max_seconds:
                            trace.baseline, dropped = None, True
                            cut = "" if stopped else clock.exceeded(0)
                            break
                        trace.baseline = base
                        yield Event("baseline", trace)
                finally:
                    base_stream.close()
    fill_stats(trace)                        # the speedup's interval and verdict, now that the baseline is in
    yield Event("done", trace, ending(trace, cut, dropped, with_baseline))


def ending(trace: Trace, cut: str, baseline_dropped: bool, with_baseline: bool) -> str:
    """How a run ended, in one sentence for the page."""
    if trace.finish_reason == "limit":
        return f"Stopped at the limit ({cut}): kept what was produced."
    if cut:
        return f"Stopped at the limit during the baseline ({cut}): kept the speculative run, dropped the baseline."
    if trace.finish_reason == "stopped":
        return "Stopped: kept what was produced."
    if baseline_dropped:
        return "Stopped during the baseline: kept the speculative run, dropped the incomplete baseline."
    if with_baseline and trace.baseline is None:
        return "Done (stopped before the baseline, so there is none)."
    return "Done."


__all__ = ["Event", "run_session", "ending"]
