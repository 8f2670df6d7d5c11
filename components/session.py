"""One run of the app, the same for the Live tab and for /generate:

    resolve the pair -> encode the prompt -> wait for its models in turn -> stream the speculative run under
    the run limits -> the target-only baseline (if asked for, not stopped and within the time limit)
    -> release the models

``run_session`` is a generator of plain ``Event``s (no Gradio components): the Live tab turns them into page
frames (``live.run_live``), /generate keeps the last trace (``api.generate``). The settings come in as a
``SpecConfig`` that ``make_config`` built from the raw values of the page or the API, with the same checks
and messages for both; every refusal is a ``gr.Error`` naming the setting.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from specdec_core import MAX_K, SpecConfig, Trace, encode_prompt, stream_baseline, stream_speculative
from specdec_core.config import DEFAULT_TREE_TOP_K, K_POLICIES, MAX_TREE_TOP_K
from specdec_core.intervals import fill_stats

from .limits import RunClock, RunLimits, acquire_in_turn, run_on
from .messages import page_error
from .pairs import Pair, Pool, resolve_pair

UI_MAX_K = 16
UI_MAX_NEW_TOKENS = 512
UI_MAX_TEMPERATURE = 5.0
UI_MAX_CONFIDENCE_STOP = 0.95
UI_MAX_TREE_NODES = 32
MAX_PROMPT_CHARS = 20_000
LOCK_WAIT_S = 300.0


# --- settings ---------------------------------------------------------------------------------------

def _as_int(name: str, value: Any) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise page_error(f"{name} must be a whole number, got {value!r:.80}")
    if isinstance(value, float) and not math.isfinite(value) or value != int(value):
        raise page_error(f"{name} must be a whole number, got {value!r:.80}")
    return int(value)


def k_policy_of(value: Any) -> str:
    """The K policy from the UI or the API: a policy name, None (a cleared field: fixed), or a bool (the
    older "adaptive K" switch: true = the +2/−1 heuristic, false = fixed K)."""
    if value is None:
        return "fixed"
    if isinstance(value, bool):
        return "heuristic" if value else "fixed"
    if isinstance(value, str) and value in K_POLICIES:
        return value
    raise page_error(f"K policy must be one of {', '.join(K_POLICIES)}, got {value!r:.80}")


def make_config(k: Any, temperature: Any, top_k: Any, top_p: Any, max_new_tokens: Any, seed: Any,
                k_policy: Any, confidence_stop: Any = 0.0, tree_nodes: Any = 0,
                tree_top_k: Any = DEFAULT_TREE_TOP_K) -> SpecConfig:
    """The page's or the API's values as a validated SpecConfig; any problem becomes a gr.Error naming the
    setting. ``k_policy``: "fixed", "heuristic" or "cost" (K is the cap for the last two), or a bool as in
    ``k_policy_of``. ``confidence_stop``: a model draft stops once its chained confidence falls below it (0 = off).
    ``tree_nodes`` > 0: a token tree of up to that many drafted nodes per iteration (depth <= K, at most
    ``tree_top_k`` children per node); 0 = a chain."""
    policy = k_policy_of(k_policy)
    if (isinstance(confidence_stop, bool) or not isinstance(confidence_stop, (int, float))
            or not 0 <= confidence_stop <= UI_MAX_CONFIDENCE_STOP):
        raise page_error(f"the confidence stop must be a number from 0 (off) to {UI_MAX_CONFIDENCE_STOP:g}, "
                       f"got {confidence_stop!r:.80}")
    k_, top_k_, max_new_, seed_ = (_as_int("K", k), _as_int("top-k", top_k),
                                   _as_int("max new tokens", max_new_tokens), _as_int("seed", seed))
    nodes_, tree_top_k_ = _as_int("tree nodes", tree_nodes), _as_int("tree top-k", tree_top_k)
    if not 0 <= nodes_ <= UI_MAX_TREE_NODES:
        raise page_error(f"tree nodes must be between 0 (a chain) and {UI_MAX_TREE_NODES} here, got {nodes_!r:.80}")
    if not 1 <= tree_top_k_ <= MAX_TREE_TOP_K:
        raise page_error(f"tree top-k (children per node) must be between 1 and {MAX_TREE_TOP_K}, "
                         f"got {tree_top_k_!r:.80}")
    if not 1 <= k_ <= min(UI_MAX_K, MAX_K):
        raise page_error(f"K must be between 1 and {UI_MAX_K}, got {k_!r:.80}")
    if not 1 <= max_new_ <= UI_MAX_NEW_TOKENS:
        raise page_error(f"max new tokens must be between 1 and {UI_MAX_NEW_TOKENS} here, got {max_new_!r:.80}")
    if (temperature is None or isinstance(temperature, bool) or not isinstance(temperature, (int, float))
            or temperature != temperature):
        raise page_error(f"temperature must be a number, got {temperature!r:.80}")
    if not 0 <= temperature <= UI_MAX_TEMPERATURE:
        raise page_error(f"temperature must be between 0 (greedy) and {UI_MAX_TEMPERATURE:g}, got {temperature!r:.80}")
    if top_p is None or isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or top_p != top_p:
        raise page_error(f"top-p must be a number, got {top_p!r:.80}")
    if not 0 < top_p <= 1:
        raise page_error(f"top-p must be in (0, 1] (1 = off), got {top_p!r:.80}")
    if top_k_ < 0:
        raise page_error(f"top-k must be 0 (off) or more, got {top_k_!r:.80}")
    if seed_ < 0 or seed_ >= 2**63:
        raise page_error(f"seed must be a non-negative integer below 2**63, got {seed_!r:.80}")
    try:
        return SpecConfig(k=k_, temperature=float(temperature), top_k=top_k_, top_p=float(top_p),
                          max_new_tokens=max_new_, seed=seed_, k_policy=policy, full_trace=True,
                          confidence_stop=float(confidence_stop), tree_nodes=nodes_, tree_top_k=tree_top_k_)
    except ValueError as e:
        raise page_error(f"Bad setting: {e}") from e


def encode_for(pair: Pair, prompt: Any, chat: bool, max_new_tokens: int) -> list[int]:
    """The prompt's token ids for the pair's target, or a gr.Error saying what is wrong with the prompt."""
    if prompt is not None and not isinstance(prompt, str):
        raise page_error(f"The prompt must be text, got {type(prompt).__name__}.")
    if not isinstance(prompt, str) or not prompt.strip():
        raise page_error("The prompt is empty: type something (or pick an example).")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raise page_error(f"The prompt is not valid text: character {e.start} is a lone surrogate.") from e
    if len(prompt) > MAX_PROMPT_CHARS:
        raise page_error(f"The prompt is {len(prompt)} characters long; the limit here is {MAX_PROMPT_CHARS}.")
    try:
        ids = encode_prompt(pair.target.tokenizer, prompt, chat=bool(chat))
    except ValueError as e:
        raise page_error(f"Could not encode the prompt: {e}") from e
    limit = getattr(pair.target.model.config, "max_position_embeddings", None)
    if limit and len(ids) + max_new_tokens > limit:
        raise page_error(f"The prompt is {len(ids)} tokens; with {max_new_tokens} new tokens that exceeds the "
                       f"model's context of {limit} tokens.")
    return ids


# --- the run ----------------------------------------------------------------------------------------

EventKind = Literal["wait", "iteration", "baseline_start", "baseline", "done"]


@dataclass(frozen=True)
class Event:
    """One step of a run, as the session reports it:
    wait            still waiting for a model; ``message`` gives the place in line
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
    ids = encode_for(pair, prompt, chat, cfg.max_new_tokens)
    limits = RunLimits.from_env()
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


__all__ = ["Event", "run_session", "ending", "make_config", "k_policy_of", "encode_for", "UI_MAX_K",
           "UI_MAX_NEW_TOKENS", "UI_MAX_TEMPERATURE", "UI_MAX_CONFIDENCE_STOP", "UI_MAX_TREE_NODES", "MAX_PROMPT_CHARS",
           "LOCK_WAIT_S"]
