"""Shared pieces of the teaching tabs: validated conversions of UI values (a gr.Error naming the
setting), model loading and locking, binding the model pool to a handler, progress reporting.

Used by ``tab_lab``, ``tab_simulator``, ``tab_theory``, ``tab_compare`` and ``tab_ksweep``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from specdec_core import LoadedModel, SpecConfig, encode_prompt

from .messages import page_error

LOCK_WAIT_S = 300.0
MAX_PROMPT_CHARS = 5_000
UI_MAX_NEW = 256           # max new tokens on the Draft comparison and K sweep tabs
# prompts shared by the Draft comparison and K sweep tabs
COMPARE_PROMPTS = (
    "Repeat this sentence exactly, twice: The quick brown fox jumps over the lazy dog near the old stone bridge.",
    "Count from 1 to 30, separated by commas.",
    "Copy this list exactly: apples, bananas, cherries, dates, elderberries, figs, grapes, honeydew.",
)


# --- small validated conversions (UI values -> Python, or a gr.Error naming the setting) -------------

def as_int(name: str, value: Any, lo: int, hi: int) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise page_error(f"{name} must be a whole number, got {value!r}")
    if value in (float("inf"), float("-inf")) or value != int(value):
        raise page_error(f"{name} must be a whole number, got {value!r}")
    if not lo <= int(value) <= hi:
        raise page_error(f"{name} must be between {lo} and {hi}, got {int(value)}")
    return int(value)


def as_float(name: str, value: Any, lo: float, hi: float) -> float:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise page_error(f"{name} must be a number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise page_error(f"{name} must be between {lo:g} and {hi:g}, got {value:g}")
    return float(value)


def check_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise page_error("The prompt is empty: type something.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise page_error(f"The prompt is {len(prompt)} characters long; the limit here is {MAX_PROMPT_CHARS}.")
    return prompt


def encode_for_model(lm: LoadedModel, prompt: str, chat: bool) -> list[int]:
    try:
        return encode_prompt(lm.tokenizer, prompt, chat=bool(chat))
    except ValueError as e:
        raise page_error(f"Could not encode the prompt: {e}") from e


def get_model(pool: Any, key: str) -> LoadedModel:
    try:
        return pool.get(key)
    except (RuntimeError, ValueError, OSError) as e:
        raise page_error(f"Could not load the model {key!r}: {e}") from e


@contextmanager
def locked(*models: LoadedModel) -> Iterator[None]:
    """Hold each model's lock (each once, in key order) for a whole experiment, so timings are not
    shared with another viewer's run."""
    unique = sorted({m.key: m for m in models}.values(), key=lambda m: m.key)
    held: list[LoadedModel] = []
    try:
        for m in unique:
            if not m.lock.acquire(timeout=LOCK_WAIT_S):
                raise page_error(f"{m.label} is busy with other viewers' runs; try again in a minute.")
            held.append(m)
        yield
    finally:
        for m in reversed(held):
            m.lock.release()


def bind_pool(fn: Callable, pool: Any) -> Callable:
    """``fn`` with the pool bound as its first argument. A plain ``functools.partial`` keeps the rest of the
    signature (Gradio finds the ``gr.Progress`` parameter in it); the name is copied for wrappers such as
    ZeroGPU's that expect one (no ``__wrapped__``: the signature must stay the partial's)."""
    bound = functools.partial(fn, pool)
    bound.__name__ = bound.__qualname__ = fn.__name__
    bound.__module__, bound.__doc__ = fn.__module__, fn.__doc__
    return bound


def reporter(progress: Any, what: str, unit: str = "steps") -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if progress is not None:
            progress((done, total), desc=what, unit=unit)
    return report


def target_choices(pool: Any) -> list[str]:
    """Targets to compare drafts for: the bundled model and every other model already loaded."""
    keys = ["bundled"] + [k for k in pool.loaded() if k != "bundled"]
    return keys


def spec_config(k: Any, temperature: Any, max_new_tokens: Any, seed: Any) -> SpecConfig:
    try:
        return SpecConfig(k=as_int("K", k, 1, 16), temperature=as_float("temperature", temperature, 0.0, 5.0),
                          max_new_tokens=as_int("max new tokens", max_new_tokens, 1, UI_MAX_NEW),
                          seed=as_int("seed", seed, 0, 2**31), full_trace=False)
    except ValueError as e:
        raise page_error(f"Bad setting: {e}") from e
