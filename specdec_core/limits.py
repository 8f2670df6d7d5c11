"""The input limits: what one request may ask for, the same at every entrance — the app's Live tab, a link,
/generate, the Exactness lab, the Simulator, Draft comparison, K sweep, the Learn tab, the CLI and advise —
so that the same value gets the same refusal everywhere.

Each check returns the clean value or raises ``InputError`` (a ValueError) whose text the app shows as a
toast (escaped) and the CLI as one line. The numbers are what a public demo can serve; ``SpecConfig``
(``config``) keeps the engine's own, wider ceilings for the library's long statistical runs, so an entrance
checks here first and builds its settings after.
"""
from __future__ import annotations

import math
from typing import Any

MAX_PROMPT_CHARS = 20_000
MAX_SEED = 2**53 - 1          # a JavaScript number (the page's seed box, a link) holds every integer up to here
MAX_K = 16                    # drafts per iteration (the cap under an adaptive K policy)
MAX_NEW_TOKENS = 512
MAX_TEMPERATURE = 2.0
MAX_TOP_K = 1_000_000
MAX_CONFIDENCE_STOP = 0.95
MAX_TREE_NODES = 32           # drafted nodes of a token tree per iteration
MAX_TREE_TOP_K = 8            # a tree's children per node
MAX_BATCH = 16                # sequences decoded together (a batched run's rows)
MAX_TRACE_BYTES = 5 * 1024 * 1024   # an uploaded or posted trace
SHOWN_CHARS = 80              # a refused value is quoted up to this many characters
K_POLICIES = ("fixed", "heuristic", "cost")   # how K is chosen each iteration (``policy.kpolicy``)
SAMPLERS = ("standard", "coupled")          # how sampled tokens are drawn and drafts verified (``coupling``)


class InputError(ValueError):
    """A value an entrance refuses; the message names the setting, the limit and what was given."""


def shown(value: Any) -> str:
    """A refused value as the message quotes it: its repr, cut to SHOWN_CHARS."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _bound(x: float, means: dict[float, str]) -> str:
    text = str(x) if isinstance(x, int) else f"{x:g}"
    return f"{text} ({means[x]})" if x in means else text


def whole(name: str, value: Any, lo: int, hi: int, means: dict[float, str] | None = None) -> int:
    """``value`` as an int in [lo, hi]: an int, or a float with no fraction (a UI number box sends 7.0).
    ``means`` names what a bound stands for in the message ({0: "off"})."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
        raise InputError(f"{name} must be a whole number, got {shown(value)}")
    if not lo <= value <= hi:
        means = means or {}
        raise InputError(f"{name} must be between {_bound(lo, means)} and {_bound(hi, means)}, got {shown(int(value))}")
    return int(value)


def number(name: str, value: Any, lo: float, hi: float, means: dict[float, str] | None = None, *,
           above_lo: bool = False) -> float:
    """``value`` as a float in [lo, hi] (``above_lo``: in (lo, hi]); ``means`` as in ``whole``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name} must be a number, got {shown(value)}")
    if not (lo < value if above_lo else lo <= value) or value > hi:
        means = means or {}
        if above_lo:
            bounds = f"in ({lo:g}, {hi:g}]" + (f" ({hi:g} = {means[hi]})" if hi in means else "")
        else:
            bounds = f"between {_bound(lo, means)} and {_bound(hi, means)}"
        raise InputError(f"{name} must be {bounds}, got {value:g}")
    return float(value)


def check_k(value: Any) -> int:
    return whole("K", value, 1, MAX_K)


def check_temperature(value: Any) -> float:
    return number("temperature", value, 0.0, MAX_TEMPERATURE, {0: "greedy"})


def check_top_k(value: Any) -> int:
    return whole("top-k", value, 0, MAX_TOP_K, {0: "off"})


def check_top_p(value: Any) -> float:
    return number("top-p", value, 0.0, 1.0, {1: "off"}, above_lo=True)


def check_max_new_tokens(value: Any) -> int:
    return whole("max new tokens", value, 1, MAX_NEW_TOKENS)


def check_seed(value: Any) -> int:
    return whole("seed", value, 0, MAX_SEED)


def check_confidence_stop(value: Any) -> float:
    return number("the confidence stop", value, 0.0, MAX_CONFIDENCE_STOP, {0: "off"})


def check_tree_nodes(value: Any) -> int:
    return whole("tree nodes", value, 0, MAX_TREE_NODES, {0: "a chain"})


def check_tree_top_k(value: Any) -> int:
    return whole("tree top-k (children per node)", value, 1, MAX_TREE_TOP_K)


def check_batch(value: Any) -> int:
    return whole("batch size", value, 1, MAX_BATCH, {1: "one sequence"})


def check_batch_trees(batch: int, tree_nodes: int) -> None:
    """Token trees run one sequence at a time (``decoding``): a batch of more than one row drafts chains."""
    if batch > 1 and tree_nodes:
        raise InputError(f"token trees run one sequence at a time: with a batch size of {batch}, set tree nodes "
                         f"to 0 (a chain), got {tree_nodes}")


def check_sampler(value: Any) -> str:
    if not isinstance(value, str) or value not in SAMPLERS:
        raise InputError(f"sampler must be one of {', '.join(SAMPLERS)}, got {shown(value)}")
    return value


def check_prompt(value: Any) -> str:
    """The prompt as given, if it is non-empty text of at most MAX_PROMPT_CHARS characters."""
    if value is not None and not isinstance(value, str):
        raise InputError(f"The prompt must be text, got {type(value).__name__}.")
    if not value or not value.strip():
        raise InputError("The prompt is empty: type something.")
    if len(value) > MAX_PROMPT_CHARS:
        raise InputError(f"The prompt is {len(value)} characters long; the limit is {MAX_PROMPT_CHARS}.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"The prompt is not valid text: character {e.start} is a lone surrogate.") from e
    return value


def context_length(model: Any) -> int | None:
    """The most positions ``model`` (a transformers model, or anything with a ``config``) can attend to;
    None when its config does not say."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_context(prompt_tokens: int, max_new_tokens: int, context: int | None) -> None:
    """Refuse a prompt that, with the new tokens asked for, does not fit the target's context."""
    if context is None or prompt_tokens + max_new_tokens <= context:
        return
    if prompt_tokens >= context:
        raise InputError(f"The prompt is {prompt_tokens} tokens; the model's context is {context} tokens.")
    raise InputError(f"The prompt is {prompt_tokens} tokens; with {max_new_tokens} new tokens that exceeds the "
                     f"model's context of {context} tokens.")     # (more than one: the prompt alone fits)


def check_batch_context(prompt_tokens: list[int], max_new_tokens: int, context: int | None) -> None:
    """Refuse a batch any of whose rows (prompt tokens given per row), with the new tokens asked for, does not
    fit the target's context; the message names the row (1-based) when there is more than one."""
    for i, n in enumerate(prompt_tokens, 1):
        try:
            check_context(n, max_new_tokens, context)
        except InputError as e:
            if len(prompt_tokens) == 1:
                raise
            raise InputError(f"Row {i} of the batch: {e}") from None


def check_run(*, k: Any, temperature: Any, top_k: Any, top_p: Any, max_new_tokens: Any, seed: Any,
              confidence_stop: Any, tree_nodes: Any, tree_top_k: Any, sampler: Any = "standard") -> dict[str, Any]:
    """A run's numeric settings, checked in one order everywhere; returns them as clean Python values (the
    keyword names of ``SpecConfig``)."""
    return {"k": check_k(k), "temperature": check_temperature(temperature), "top_k": check_top_k(top_k),
            "top_p": check_top_p(top_p), "max_new_tokens": check_max_new_tokens(max_new_tokens),
            "seed": check_seed(seed), "confidence_stop": check_confidence_stop(confidence_stop),
            "tree_nodes": check_tree_nodes(tree_nodes), "tree_top_k": check_tree_top_k(tree_top_k),
            "sampler": check_sampler(sampler)}


__all__ = ["InputError", "MAX_PROMPT_CHARS", "MAX_SEED", "MAX_K", "MAX_NEW_TOKENS", "MAX_TEMPERATURE", "MAX_TOP_K",
           "MAX_CONFIDENCE_STOP", "MAX_TREE_NODES", "MAX_TREE_TOP_K", "MAX_TRACE_BYTES", "shown", "whole",
           "number", "check_k", "check_temperature", "check_top_k", "check_top_p",
           "check_max_new_tokens", "check_seed", "check_confidence_stop", "check_tree_nodes", "check_tree_top_k",
           "check_sampler", "K_POLICIES", "SAMPLERS", "MAX_BATCH", "check_batch", "check_batch_context",
           "check_batch_trees",
           "check_prompt", "check_run", "context_length", "check_context"]
