"""The scripting API: two named, documented endpoints for ``gradio_client`` (and the "Use via API" page).

    /generate        prompt + settings -> (the trace as a ``specdec-trace/1`` dict, or ``/2`` for a batch, a one-line
                     summary)
    /validate_trace  a trace (JSON text or an already-parsed dict) -> its one-line summary

``generate`` and ``validate_trace`` are plain module-level functions (``generate`` takes the model pool
first), so tests call them without a server. ``add_api(pool)`` registers them with ``gr.api`` inside the
app's Blocks; ``finish_api(demo)`` then makes every other event private, so the API page lists these
two endpoints and nothing auto-named.

API values arrive as raw JSON (no component converts them), so every one is checked here with the same
messages the Live tab gives (``inputs.make_config``, the one set of input limits), and a wrong value becomes a ``gr.Error`` naming it:
``gradio_client`` raises it as an ``AppError`` carrying that message.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

import gradio as gr
from gradio import utils as gr_utils

from specdec_core import Trace
from specdec_core.config import recommended_config
from specdec_core.limits import MAX_TRACE_BYTES

from components.render.batch import batch_summary_line
from components.render.summary import summary_line
from components.serving.gpu import gpu_task
from components.serving.inputs import check_batch, make_config
from components.serving.messages import page_error
from components.serving.pairs import DEFAULT_PAIR, Pool, pair_keys
from components.serving.session import run_session

API_NAMES = ("generate", "validate_trace")
DEFAULTS = recommended_config()   # /generate's defaults: the Live tab's first values and the CLI's defaults


def _flag(name: str, value: Any, unset_ok: bool = False) -> bool | None:
    """A yes/no setting: only true/false (a string such as "false" would otherwise count as yes); None
    where ``unset_ok`` (not given)."""
    if value is None and unset_ok:
        return None
    if not isinstance(value, bool):
        raise page_error(f"{name} must be true or false, got {value!r}")
    return value


def generate(pool: Pool, prompt: str, pair: str = DEFAULT_PAIR, k: int = DEFAULTS.k, adaptive_k: bool | None = None,
             temperature: float = DEFAULTS.temperature, top_k: int = DEFAULTS.top_k, top_p: float = DEFAULTS.top_p,
             max_new_tokens: int = DEFAULTS.max_new_tokens, seed: int = DEFAULTS.seed, chat: bool = True,
             baseline: bool = False, k_policy: str = "", confidence_stop: float = DEFAULTS.confidence_stop,
             tree_nodes: int = DEFAULTS.tree_nodes, tree_top_k: int = DEFAULTS.tree_top_k,
             sampler: str = DEFAULTS.sampler, batch_size: int = 1) -> tuple[dict, str]:
    """Run speculative decoding on one prompt and return its full trace (schema specdec-trace/1: every
    iteration's drafts with p, q, alpha, u and accept/reject, the resampled or bonus token, timings, stats)
    and a one-line summary. With batch_size above 1 the prompt is decoded in a batch with other users' requests
    (schema specdec-trace/2: the prompt's row as above, the other rows, the batch's forwards and pooled figures in
    "batch"). The defaults are the recommended settings (specdec_core.config.recommended_config,
    the same as the Live tab's first values and the CLI's defaults); a value passed explicitly is used as given.

    Parameters:
        prompt: the text to continue (as one chat turn when chat is true)
        pair: target <- draft pair, a key of the Live tab's selector, e.g. "bundled|ngram" (SmolLM2-135M + prompt lookup) or "bundled|self"
        k: drafts per iteration, 1-16 (the cap unless the K policy is fixed)
        adaptive_k: shorthand for k_policy: false = fixed K; true = "heuristic" (+2 after a clean sweep, -1 otherwise); null (default) = as k_policy says
        temperature: 0 = greedy, up to 2
        top_k: keep the k most likely tokens, 0 = off
        top_p: nucleus mass in (0, 1], 1 = off
        max_new_tokens: 1-512
        seed: same seed, same trace
        chat: wrap the prompt in the model's chat template
        baseline: also run target-only generation, for the measured speedup (in the trace's "baseline")
        k_policy: "fixed", "heuristic" or "cost" (K chosen each iteration to maximise the predicted tokens/s from the measured acceptance and calibrated costs); "" (default) = as adaptive_k says, or the recommended policy when neither is given
        confidence_stop: 0 = off (K drafts per iteration); up to 0.95: a model draft stops drafting after a draft that takes its own confidence that all its drafts so far will be accepted (the product of its top probabilities) below this; that draft is still offered
        tree_nodes: 0 = a chain of drafts; 1-32: a token tree of up to this many drafted nodes per iteration (depth <= k), every node verified in one target forward (the trace's iterations then carry a "tree")
        tree_top_k: the most children per tree node, 1-8
        sampler: "standard" (speculative sampling: accept iff u < min(1, p/q), the residual on a rejection) or "coupled" (drafter-invariant: noise keyed by seed and position; the text equals the coupled target-only sample for the same seed whatever the draft, K or tree; the baseline is coupled too)
        batch_size: 1 (default) = the prompt alone; 2-16: the prompt in row 1 and other users' requests in the other rows, decoded together (one draft pass and one target verify per iteration for every row; row b uses seed + b - 1); tree_nodes must be 0; with baseline, the batched target-only run and the pooled speedup
    Returns:
        trace: the trace as a dict (specdec_core.Trace.from_dict reads it back)
        summary: the run in one line (tokens, iterations, acceptance, tokens/s, measured speedup with a baseline; a batch: pooled and per row, the per-draft acceptance rate and the mean acceptance length)
    """
    if not isinstance(pair, str) or pair not in pair_keys():
        raise page_error(f"pair must be one of {', '.join(pair_keys())}; got {pair!r}")
    if not isinstance(prompt, str):
        raise page_error(f"prompt must be text, got {prompt!r}")
    adaptive = _flag("adaptive_k", adaptive_k, unset_ok=True)
    if k_policy not in ("", None) and adaptive and k_policy != "heuristic":
        raise page_error(f"adaptive_k=true means k_policy='heuristic'; it cannot be combined with k_policy={k_policy!r:.40}")
    if k_policy not in ("", None):
        policy: Any = k_policy
    elif adaptive is None:
        policy = DEFAULTS.k_policy             # neither given: the recommended policy
    else:
        policy = adaptive                      # false = fixed K, true = the heuristic (make_config)
    cfg = make_config(k, temperature, top_k, top_p, max_new_tokens, seed, policy, confidence_stop, tree_nodes,
                      tree_top_k, sampler=sampler)
    batch = check_batch(batch_size, cfg)
    chat_, baseline_ = _flag("chat", chat), _flag("baseline", baseline)
    session = run_session(pool, pair, prompt, cfg, chat=chat_, with_baseline=bool(baseline_), batch_size=batch)
    with contextlib.closing(session):
        for event in session:              # waits in turn; a run past a limit is cut, its trace kept
            trace = event.trace            # the last event ("done") carries the finished trace
    return trace.to_dict(), _summary(trace)


def _summary(trace: Trace) -> str:
    return summary_line(trace) if trace.batch is None else batch_summary_line(trace)


def validate_trace(trace: str | dict) -> str:
    """Check a trace (an export of the Live tab or of /generate) and return its one-line summary; an
    invalid trace is refused with the validation error (which field, what is wrong).

    Parameters:
        trace: the trace as JSON text, or as an already-parsed JSON object (at most 5 MB)
    Returns:
        summary: the trace in one line (tokens, iterations, acceptance, tokens/s, measured speedup with a baseline)
    """
    if isinstance(trace, str):
        if len(trace.encode("utf-8", "surrogatepass")) > MAX_TRACE_BYTES:
            raise page_error(f"trace is larger than {MAX_TRACE_BYTES / 1e6:.0f} MB")
        try:
            data = json.loads(trace)
        except json.JSONDecodeError as e:
            raise page_error(f"trace is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from e
        except RecursionError as e:
            raise page_error("trace is not a trace: JSON nested too deeply") from e
    elif isinstance(trace, dict):
        data = trace
        try:
            size = len(json.dumps(data, ensure_ascii=False))
        except (TypeError, ValueError, RecursionError) as e:
            raise page_error(f"trace is not plain JSON: {e}") from e
        if size > MAX_TRACE_BYTES:
            raise page_error(f"trace is larger than {MAX_TRACE_BYTES / 1e6:.0f} MB")
    else:
        raise page_error(f"trace must be JSON text or a JSON object, got {type(trace).__name__}")
    try:
        return _summary(Trace.from_dict(data))
    except (ValueError, RecursionError) as e:
        raise page_error(str(e) if isinstance(e, ValueError) else "trace is not a trace: nested too deeply") from e


def _for_api(fn: Callable, pool: Pool | None = None) -> Callable:
    """``fn`` as ``gr.api`` wants it: the pool bound as its first argument (when given), the signature with
    its annotations evaluated (``gr.api`` reads the parameter names, types, defaults and the number of
    outputs from it), and the docstring kept (the endpoint's description)."""
    sig = inspect.signature(fn, eval_str=True)
    params = list(sig.parameters.values())

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(pool, *args, **kwargs) if pool is not None else fn(*args, **kwargs)
    del call.__wrapped__                 # gr.api must see the signature below, not the original's
    call.__signature__ = sig.replace(parameters=params[1:] if pool is not None else params)  # type: ignore[attr-defined]
    return call


def add_api(pool: Pool) -> None:
    """Register /generate and /validate_trace (call inside the app's Blocks); then call ``finish_api``."""
    gr.api(gpu_task(_for_api(generate, pool)), api_name="generate", concurrency_limit=4,
           concurrency_id="live-run")
    gr.api(_for_api(validate_trace), api_name="validate_trace", concurrency_limit=8)


def finish_api(demo: gr.Blocks, keep: tuple[str, ...] = API_NAMES) -> None:
    """Call on the finished app (after its ``with gr.Blocks()``, which adds the load events of callable
    initial values on leaving): every event except the named API endpoints becomes private (the
    browser still calls them, by index, but they are left out of the API page and of what
    ``gradio_client`` offers); the endpoints' inputs and outputs are labelled with their parameter names
    and the descriptions from the handler's docstring (gr.api would label them "1st", "2nd", ...)."""
    for fn in demo.fns.values():
        if fn.api_name not in keep:
            fn.api_visibility = "private"
            continue
        _, params, returns = gr_utils.get_function_description(fn.fn)
        names = list(inspect.signature(fn.fn).parameters)
        for name, block in zip(names, fn.inputs):      # gr.Api blocks: their schema is the constructor's dict
            block.label = name
            block._api_info = {**block.api_info(), "additional_description": params.get(name, "")}
        for line, block in zip(returns, fn.outputs):
            name, _, desc = line.partition(":")
            block.label = name.strip()
            block._api_info = {**block.api_info(), "description": desc.strip()}
    demo.config = demo.get_config_file()       # launch() recomputes it too; get_api_info() reads this one


__all__ = ["generate", "validate_trace", "add_api", "finish_api", "pair_keys", "API_NAMES", "DEFAULTS"]
