"""The app's raw values (a page's controls, an API call, a link) checked against the one set of input limits
(``specdec_core.limits``) and turned into settings; a refusal becomes a ``gr.Error`` whose text is the limit's
own message, so the same value is refused in the same words on every tab, in /generate and on the command line.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import gradio as gr

from specdec_core import SpecConfig, encode_prompt, limits
from specdec_core.config import K_POLICIES

from components.serving.messages import page_error

T = TypeVar("T")


def checked(check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``check(*args, **kwargs)``, with a ValueError (an ``InputError`` or SpecConfig's own) as a gr.Error
    (a gr.Error, itself a ValueError, passes as it is)."""
    try:
        return check(*args, **kwargs)
    except gr.Error:
        raise
    except ValueError as e:
        raise page_error(str(e)) from e


def as_int(name: str, value: Any, lo: int, hi: int) -> int:
    return checked(limits.whole, name, value, lo, hi)


def as_float(name: str, value: Any, lo: float, hi: float) -> float:
    return checked(limits.number, name, value, lo, hi)


def check_prompt(prompt: Any) -> str:
    return checked(limits.check_prompt, prompt)


def check_seed(seed: Any) -> int:
    return checked(limits.check_seed, seed)


def k_policy_of(value: Any) -> str:
    """The K policy from the UI or the API: a policy name, None (a cleared field: fixed), or a bool (the
    older "adaptive K" switch: true = the +2/−1 heuristic, false = fixed K)."""
    if value is None:
        return "fixed"
    if isinstance(value, bool):
        return "heuristic" if value else "fixed"
    if isinstance(value, str) and value in K_POLICIES:
        return value
    raise page_error(f"K policy must be one of {', '.join(K_POLICIES)}, got {limits.shown(value)}")


def make_config(k: Any, temperature: Any, top_k: Any, top_p: Any, max_new_tokens: Any, seed: Any,
                k_policy: Any = "fixed", confidence_stop: Any = 0.0, tree_nodes: Any = 0,
                tree_top_k: Any = SpecConfig.tree_top_k, full_trace: bool = True, sampler: Any = "standard") -> SpecConfig:
    """A run's settings from raw values, checked against the input limits (``limits.check_run``).
    ``k_policy``: "fixed", "heuristic" or "cost" (K is the cap for the last two), or a bool as in
    ``k_policy_of``. ``confidence_stop``: a model draft stops once its chained confidence falls below it
    (0 = off). ``tree_nodes`` > 0: a token tree of up to that many drafted nodes per iteration (depth <= K, at
    most ``tree_top_k`` children per node); 0 = a chain. ``sampler``: "standard" or "coupled" (drafter-invariant:
    the text equals the coupled baseline's for the same seed)."""
    policy = k_policy_of(k_policy)
    values = checked(limits.check_run, k=k, temperature=temperature, top_k=top_k, top_p=top_p,
                     max_new_tokens=max_new_tokens, seed=seed, confidence_stop=confidence_stop,
                     tree_nodes=tree_nodes, tree_top_k=tree_top_k, sampler=sampler)
    return checked(SpecConfig, **values, k_policy=policy, full_trace=full_trace)


def check_batch(batch_size: Any, cfg: SpecConfig) -> int:
    """The batch size (``limits.check_batch``), refused with token trees above 1 (``limits.check_batch_trees``)."""
    size = checked(limits.check_batch, batch_size)
    checked(limits.check_batch_trees, size, cfg.tree_nodes)
    return size


def _encode(lm: Any, prompt: str, chat: bool) -> list[int]:
    try:
        return encode_prompt(lm.tokenizer, prompt, chat=bool(chat))
    except ValueError as e:
        raise page_error(f"Could not encode the prompt: {e}") from e


def prompt_ids(lm: Any, prompt: Any, chat: bool, max_new_tokens: int) -> list[int]:
    """The prompt's token ids for ``lm`` (a pool's LoadedModel: ``tokenizer`` and ``model``), refused when the
    prompt breaks a limit or does not fit the model's context with ``max_new_tokens`` more."""
    ids = _encode(lm, check_prompt(prompt), chat)
    checked(limits.check_context, len(ids), max_new_tokens, limits.context_length(lm.model))
    return ids


def batch_prompt_ids(lm: Any, prompts: list[str], chat: bool, max_new_tokens: int) -> list[list[int]]:
    """Every row's token ids (``prompts``: your checked prompt, then other users' requests), refused when a row
    does not fit the model's context with ``max_new_tokens`` more (the message names the row)."""
    ids = [_encode(lm, p, chat) for p in prompts]
    checked(limits.check_batch_context, [len(i) for i in ids], max_new_tokens, limits.context_length(lm.model))
    return ids


__all__ = ["checked", "as_int", "as_float", "check_prompt", "check_seed", "k_policy_of", "make_config",
           "check_batch", "prompt_ids", "batch_prompt_ids"]
