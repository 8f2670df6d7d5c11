"""Limits that keep a public Space usable under a class's load: how long one run may take, waiting for a
model in turn (first come, first served, with the place in line shown and a cancel honoured within a
poll interval), and a bounded export folder.

Settings come from the environment, read when used (never at import):
  SPECDEC_MAX_RUN_S       seconds one Live run may generate, baseline included (default 120)
  SPECDEC_MAX_RUN_TOKENS  tokens one Live run may generate (default 512)
  SPECDEC_EXPORT_MAX_MB   the export folder's total size (default 100 MB); files older than an hour go too
A run that reaches a limit is cut after its current iteration, its trace is kept (finish reason "limit")
and the page says "stopped at the limit".
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from components.serving.messages import page_error

MAX_RUN_S_ENV = "SPECDEC_MAX_RUN_S"
MAX_RUN_TOKENS_ENV = "SPECDEC_MAX_RUN_TOKENS"
EXPORT_MAX_MB_ENV = "SPECDEC_EXPORT_MAX_MB"
DEFAULT_MAX_RUN_S = 120.0
DEFAULT_MAX_RUN_TOKENS = 512
DEFAULT_EXPORT_MAX_MB = 100.0
EXPORT_MAX_AGE_S = 3600.0
EXPORT_MAX_FILES = 1000
LOCK_WAIT_S = 300.0  # the longest a run or an experiment waits for a model before it is refused
POLL_S = 0.5        # a run waiting for a model wakes this often: to show its place and to notice a cancel


def env_number(env: Mapping[str, str], name: str, default: float, integer: bool = False) -> float:
    """A positive (whole) number from the environment variable ``name``, ``default`` when unset; a ValueError
    naming the variable otherwise (the app's start-up stops with it)."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a {'whole ' if integer else ''}number, got {raw[:40]!r}") from None
    if not 0 < value < 1e9:
        raise ValueError(f"{name} must be a positive number below 10⁹, got {raw[:40]!r}")
    return value


@dataclass(frozen=True)
class RunLimits:
    max_seconds: float = DEFAULT_MAX_RUN_S   # wall-clock seconds from getting the model to the last token
    max_tokens: int = DEFAULT_MAX_RUN_TOKENS  # tokens of the speculative run (the baseline repeats them)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunLimits:
        """The limits from the environment; ValueError naming the variable when one is malformed."""
        env = os.environ if env is None else env
        return cls(env_number(env, MAX_RUN_S_ENV, DEFAULT_MAX_RUN_S),
                   int(env_number(env, MAX_RUN_TOKENS_ENV, DEFAULT_MAX_RUN_TOKENS, integer=True)))


class RunClock:
    """Started when a run gets its model; says when the run has reached a limit."""

    def __init__(self, limits: RunLimits, now: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.now = limits, now
        self.start = now()

    def elapsed(self) -> float:
        return self.now() - self.start

    def exceeded(self, tokens: int) -> str:
        """"" while within the limits, else what was reached (for the page)."""
        if tokens >= self.limits.max_tokens:
            return f"this Space's limit of {self.limits.max_tokens} tokens per run"
        if self.elapsed() >= self.limits.max_seconds:
            return f"this Space's limit of {self.limits.max_seconds:g} s per run"
        return ""


def acquire_in_turn(models: Sequence[Any], timeout: float, frame: Callable[[str], tuple],
                    poll_s: float = POLL_S) -> Generator[tuple, None, list]:
    """Take each model's lock (in the given order), first come first served, yielding ``frame(message)``
    with the place in line while waiting; returns the models held. Used as ``held = yield from ...`` in a
    streaming handler: the wait wakes every ``poll_s`` seconds, so a cancelled or closed session leaves the
    line (and releases what it held) within that time instead of holding a place for minutes.
    A model whose lock lacks ``join`` (a plain threading.Lock) is polled the same way, without order."""
    held: list[Any] = []
    ticket = None
    try:
        for m in models:
            lock = m.lock
            deadline = time.monotonic() + timeout
            ticket = lock.join() if hasattr(lock, "join") else None
            while True:
                got = lock.take(ticket, poll_s) if ticket is not None else lock.acquire(timeout=poll_s)
                if got:
                    ticket = None
                    held.append(m)
                    break
                if time.monotonic() >= deadline:
                    raise page_error(f"{m.label} is busy with other viewers' runs; try again in a minute.")
                ahead = lock.position(ticket) + 1 if ticket is not None else None
                yield frame(f"Waiting for {m.label}: {ahead} run{'s' if ahead != 1 else ''} ahead of yours "
                            "(one run at a time per model)…" if ahead is not None
                            else f"Waiting for another viewer's run on {m.label} to finish…")
        return held
    except BaseException:      # a gr.Error, a timeout, or GeneratorExit when the session is cancelled/closed
        if ticket is not None:
            models[len(held)].lock.leave(ticket)
        for m in reversed(held):
            m.lock.release()
        raise


@contextlib.contextmanager
def run_on(held: Sequence[Any]) -> Iterator[None]:
    """The body of one run on the models in ``held`` (locked, in order): a drafter or forward that fails
    ends the run with a "Generation failed" message for the page (a ``gr.Error`` passes as it is), and
    the locks are released in reverse order whatever happens."""
    try:
        yield
    except gr.Error:
        raise
    except Exception as e:  # noqa: BLE001 - a drafter or forward that fails ends this run, with a message
        raise page_error(f"Generation failed: {e}" if isinstance(e, (RuntimeError, ValueError))
                       else f"Generation failed: {type(e).__name__}: {e}") from e
    finally:
        for m in reversed(held):
            m.lock.release()


def prune_exports(folder: str, max_age_s: float = EXPORT_MAX_AGE_S, max_bytes: int | None = None,
                  max_files: int = EXPORT_MAX_FILES, prefix: str = "specdec-trace-") -> int:
    """Delete exported traces older than ``max_age_s``, then the oldest ones until the folder holds at
    most ``max_files`` files and ``max_bytes`` bytes (default from SPECDEC_EXPORT_MAX_MB). Returns how
    many were removed. Safe against another session pruning at the same time."""
    if max_bytes is None:
        max_bytes = int(env_number(os.environ, EXPORT_MAX_MB_ENV, DEFAULT_EXPORT_MAX_MB) * 1e6)
    cutoff = time.time() - max_age_s
    files: list[tuple[float, int, str]] = []
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            st = entry.stat()
            if st.st_mtime < cutoff:
                os.remove(entry.path)
                removed += 1
            else:
                files.append((st.st_mtime, st.st_size, entry.path))
        except OSError:
            pass        # another session removed it first
    files.sort()        # oldest first
    total = sum(size for _, size, _ in files)
    while files and (len(files) > max_files or total > max_bytes):
        _, size, path = files.pop(0)
        try:
            os.remove(path)
            removed += 1
        except OSError:
            pass
        total -= size
    return removed
