"""The model pool of the app and the CLI: models loaded per key, one generation at a time per model (a fair
queue), and a memory budget checked before anything is downloaded; ``make_drafter`` turns a drafter name
into a drafter for a loaded target. Loading itself is ``models``'."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import loading as models
from .loading import (BUNDLED_NAME, load_bundled_model, load_model, pick_device,
    pick_dtype)

@dataclass
class LoadedModel:
    key: str                 # "bundled" or the hub id / folder it was loaded from
    label: str
    model: torch.nn.Module
    tokenizer: Any
    lock: Any                # FairLock (or threading.Lock): one generation at a time per loaded model
    nbytes: int = 0          # weights + buffers in memory, measured after loading

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


# --- the pool: per-key loading, a memory budget ------------------------------------------------------
# The pool lock is held only to look up / register a key, never during a download or a load, so one
# session's first use of a hub preset does not block sessions on other models. A second request for a
# key that is still loading waits for that load (``on_wait`` is told) instead of starting another.
# Before anything is downloaded the model's size is estimated (presets state theirs; hub ids from the
# Hub's safetensors metadata; local folders from their safetensors headers) and a model that would not
# fit the budget (``SPECDEC_MAX_MODEL_GB``) is refused; models idle in the pool are evicted, least
# recently used first, to make room (the bundled model is never evicted).

MAX_MODEL_GB_ENV = "SPECDEC_MAX_MODEL_GB"
DEFAULT_MAX_MODEL_GB = 10.0   # a 16 GB CPU Space: weights ≤ 10 GB leaves room for Python, Gradio, activations
LOAD_WAIT_S = 900.0           # the longest a request waits for another session's load of the same model

# parameter counts (millions), for the size estimate before download
PARAMS_M: dict[str, float] = {
    "bundled": 134.5,
    "distilbert/distilgpt2": 81.9, "openai-community/gpt2-large": 774.0,
    "HuggingFaceTB/SmolLM2-360M-Instruct": 361.8, "HuggingFaceTB/SmolLM2-1.7B-Instruct": 1711.4,
    "Qwen/Qwen2.5-0.5B-Instruct": 494.0, "Qwen/Qwen2.5-1.5B-Instruct": 1543.7,
}


def max_model_bytes(env: dict[str, str] | None = None) -> int:
    """The weight budget in bytes from ``SPECDEC_MAX_MODEL_GB`` (default 10). A bad value is refused."""
    raw = (os.environ if env is None else env).get(MAX_MODEL_GB_ENV, "")
    if not raw.strip():
        return int(DEFAULT_MAX_MODEL_GB * 1e9)
    try:
        gb = float(raw)
    except ValueError:
        raise ValueError(f"{MAX_MODEL_GB_ENV} must be a number of GB, got {raw!r}") from None
    if not gb > 0 or gb != gb or gb == float("inf"):
        raise ValueError(f"{MAX_MODEL_GB_ENV} must be a positive number of GB, got {raw!r}")
    return int(gb * 1e9)


def estimate_params(key: str, allow_local: bool = False) -> int | None:
    """Parameter count of a model before loading it: the table above, a local folder's safetensors
    headers, or the Hub's safetensors metadata where the Hub is reachable. None when unknown."""
    if key in PARAMS_M:
        return int(PARAMS_M[key] * 1e6)
    if allow_local and os.path.isdir(key):
        total = 0
        for name in os.listdir(key):
            if name.endswith(".safetensors"):
                total += _safetensors_params(os.path.join(key, name))
        return total or None
    try:
        if not models._hub_reachable():
            return None
        from huggingface_hub import HfApi
        info = HfApi().model_info(key, timeout=10)
    except Exception:   # noqa: BLE001 - metadata is best effort; the load itself reports real errors
        return None
    st = getattr(info, "safetensors", None)
    return int(st.total) if st is not None and getattr(st, "total", None) else None


def _safetensors_params(path: str) -> int:
    """Number of elements in a safetensors file, from its JSON header (nothing else is read)."""
    import json
    import struct
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100_000_000:
            return 0
        header = json.loads(f.read(n))
    total = 0
    for name, meta in header.items():
        if name != "__metadata__":
            count = 1
            for d in meta.get("shape", []):
                count *= int(d)
            total += count
    return total


def model_nbytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


class FairLock:
    """A first-come, first-served lock (``threading.Lock`` wakes waiters in no particular order), with the
    number of waiters for a queue-position message. ``acquire(timeout=...)``, ``release()``, ``locked()``."""

    def __init__(self) -> None:
        import threading
        self._cond = threading.Condition(threading.Lock())
        self._held = False
        self._queue: list[object] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        ticket = self.join()
        ok = False
        try:
            ok = self.take(ticket, timeout if blocking else 0)
            return ok
        finally:
            if not ok:
                self.leave(ticket)

    def join(self) -> object:
        """Take a place at the end of the line; then ``take`` (repeatedly, with a timeout) or ``leave``."""
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
        return ticket

    def take(self, ticket: object, timeout: float | None = None) -> bool:
        """Acquire once ``ticket`` is first in line and the lock is free; False after ``timeout`` seconds
        (the ticket keeps its place). None or a negative timeout waits for as long as it takes."""
        import time
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._cond:
            while self._held or self._queue[0] is not ticket:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            self._held = True
            self._queue.pop(0)
            self._cond.notify_all()
            return True

    def leave(self, ticket: object) -> None:
        """Give up a place in line (a cancelled wait)."""
        with self._cond:
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def position(self, ticket: object) -> int:
        """0 = next in line."""
        with self._cond:
            return self._queue.index(ticket) if ticket in self._queue else 0

    def release(self) -> None:
        with self._cond:
            if not self._held:
                raise RuntimeError("release of an unlocked FairLock")
            self._held = False
            self._cond.notify_all()

    def locked(self) -> bool:
        return self._held

    def waiting(self) -> int:
        """How many callers are queued for the lock."""
        return len(self._queue)

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Loading:
    """A load in progress: waiters block on ``done``; ``error`` is set if it failed."""

    def __init__(self) -> None:
        import threading
        self.done = threading.Event()
        self.error: BaseException | None = None


Loader = Callable[[str], tuple[torch.nn.Module, Any, str]]


class ModelPool:
    """Loads each model once and hands out (model, tokenizer, lock). Thread-safe; meant to live for the
    lifetime of an app process (created in ``main``, never at import time).

    ``loader(key) -> (model, tokenizer, label)`` and ``size_of(key) -> parameter count | None`` default to
    the real ones (bundled model, Hub, local folders); tests pass fakes. ``max_bytes`` is the weight budget
    (default from ``SPECDEC_MAX_MODEL_GB``). ``on_wait(message)`` is told when a request waits for another
    request's load of the same model (the app shows it as a notice)."""

    PINNED = ("bundled",)

    def __init__(self, allow_local: bool = False, device: str | None = None, *, max_bytes: int | None = None,
                 loader: Loader | None = None, size_of: Callable[[str], int | None] | None = None,
                 on_wait: Callable[[str], None] | None = None) -> None:
        import threading
        self.allow_local = allow_local
        self.device = device
        self.max_bytes = max_model_bytes() if max_bytes is None else int(max_bytes)
        self.on_wait = on_wait
        self._loader = loader or self._load
        self._size_of = size_of or (lambda key: estimate_params(key, self.allow_local))
        self._models: dict[str, LoadedModel] = {}
        self._loading: dict[str, _Loading] = {}
        self._used: dict[str, int] = {}
        self._reserved: dict[str, int] = {}       # bytes promised to loads in progress
        self._clock = 0
        self._guard = threading.Lock()

    # -- public ------------------------------------------------------------------------------------------
    def get(self, key: str, on_wait: Callable[[str], None] | None = None, timeout: float = LOAD_WAIT_S) -> LoadedModel:
        """The loaded model for ``key``, loading it first if needed (the pool lock is not held meanwhile)."""
        with self._guard:
            if key in self._models:
                return self._touch(key)
            pending = self._loading.get(key)
            owner = pending is None
            if owner:
                pending = self._loading[key] = _Loading()
        if not owner:
            return self._wait_for(key, pending, on_wait or self.on_wait, timeout)
        try:
            lm = self._load_checked(key)
        except BaseException as e:
            with self._guard:
                self._loading.pop(key, None)       # nothing half-registered: the next request tries again
                self._reserved.pop(key, None)
            pending.error = e
            pending.done.set()
            raise
        with self._guard:
            self._models[key] = lm
            self._loading.pop(key, None)
            self._reserved.pop(key, None)
            self._touch(key)
        pending.done.set()
        return lm

    def loaded(self) -> list[str]:
        with self._guard:
            return list(self._models)

    def loading(self) -> list[str]:
        with self._guard:
            return list(self._loading)

    # -- internals ---------------------------------------------------------------------------------------
    def _touch(self, key: str) -> LoadedModel:
        self._clock += 1
        self._used[key] = self._clock
        return self._models[key]

    def _wait_for(self, key: str, pending: _Loading, on_wait: Callable[[str], None] | None,
                  timeout: float) -> LoadedModel:
        if on_wait is not None:
            on_wait(f"{_short(key)} is being loaded for another viewer; waiting for that load to finish…")
        if not pending.done.wait(timeout):
            raise RuntimeError(f"{_short(key)} is still loading after {timeout:.0f} s; try again later")
        if pending.error is not None:
            raise RuntimeError(f"loading {_short(key)} failed: {_first_line(pending.error)}") from pending.error
        with self._guard:
            if key in self._models:
                return self._touch(key)
        return self.get(key, on_wait, timeout)     # evicted in the meantime: load it again

    def _bytes_per_param(self) -> int:
        dev = pick_device(self.device)
        return torch.empty((), dtype=pick_dtype(dev)).element_size()

    def _load_checked(self, key: str) -> LoadedModel:
        params = self._size_of(key)
        if params is not None:
            self._make_room(key, params * self._bytes_per_param())
        model, tok, label = self._loader(key)
        nbytes = model_nbytes(model)
        try:
            self._make_room(key, nbytes)
        except RuntimeError:
            del model, tok                          # over budget once measured: drop it again
            raise
        return LoadedModel(key, label, model, tok, FairLock(), nbytes)

    def _make_room(self, key: str, need: int) -> None:
        """Refuse (RuntimeError) when ``need`` bytes cannot fit the budget even after evicting every idle
        model; otherwise evict idle models, least recently used first, until it fits."""
        gb = lambda b: f"{b / 1e9:.1f} GB"  # noqa: E731
        if need > self.max_bytes:
            raise RuntimeError(f"{_short(key)} needs about {gb(need)} of memory for its weights, more than this "
                               f"server's budget of {gb(self.max_bytes)} ({MAX_MODEL_GB_ENV}); pick a smaller model")
        with self._guard:
            used = (sum(m.nbytes for m in self._models.values())
                    + sum(b for k, b in self._reserved.items() if k != key))
            idle = sorted((k for k, m in self._models.items() if k not in self.PINNED and not m.lock.locked()),
                          key=lambda k: self._used.get(k, 0))
            freeable = sum(self._models[k].nbytes for k in idle)
            if used - freeable + need > self.max_bytes:
                raise RuntimeError(f"{_short(key)} needs about {gb(need)}, and the models in use leave "
                                   f"{gb(max(0, self.max_bytes - used + freeable))} of this server's budget of "
                                   f"{gb(self.max_bytes)} ({MAX_MODEL_GB_ENV}); try again when other runs finish")
            for k in idle:
                if used + need <= self.max_bytes:
                    break
                used -= self._models.pop(k).nbytes
                self._used.pop(k, None)
            self._reserved[key] = need

    def _load(self, key: str) -> tuple[torch.nn.Module, Any, str]:
        if key == "bundled":
            model, tok = load_bundled_model(self.device)
            return model, tok, BUNDLED_NAME
        model, tok = load_model(key, self.device, allow_local=self.allow_local)
        return model, tok, key


def _short(key: str) -> str:
    return BUNDLED_NAME if key == "bundled" else f"'{key}'"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
