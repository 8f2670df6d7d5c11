"""Models for the teaching tabs' experiments (Exactness lab, Draft comparison, K sweep, Learn): getting one from
the pool with a message for the page, holding the locks for a whole experiment, binding the pool to a handler,
progress reporting. Their settings are checked by ``inputs``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from specdec_core import LoadedModel

from components.serving.messages import page_error
from components.serving.run_limits import LOCK_WAIT_S


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
