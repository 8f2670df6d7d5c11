"""Lockstep: several generation streams advanced side by side, so that they share the machine's speed.

A shared CPU's speed wanders on a scale of half a second, so runs of a few seconds made one after the other
differ by more than the few per cent that separate two K policies; advanced in lockstep they share the
machine's slow and fast moments (the figures: docs/cost-model.md, "The theory part of the benchmark").

``run_lockstep`` drives the streams of ``engine.stream_speculative`` and ``engine.stream_baseline``, one
step (an iteration, or a baseline token) at a time, always advancing the stream that has used the least
time so far. Each stream's clock already leaves out the time its consumer holds it, so every run's
tokens/s is its own work's; and since the streams move through the same stretch of wall-clock time
together, a slow second hits them alike, however many steps each takes. The steps are sequential: only
one forward runs at a time, as in a run alone.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def elapsed_ms(result: Any) -> float:
    """The generation time a stream's latest result has used: a Trace's ``stats.wall_ms`` or a
    BaselineResult's ``wall_ms``."""
    stats = getattr(result, "stats", None)
    return float(stats.wall_ms if stats is not None else result.wall_ms)


def run_lockstep(streams: Mapping[str, Iterator[T]],
                 on_step: Callable[[Mapping[str, T]], None] | None = None) -> dict[str, T]:
    """Advance every stream to its end, the one that has used the least time first (the name breaks ties);
    returns each stream's last result. ``on_step`` sees the latest results after every step (progress
    reports: the streams' clocks are stopped meanwhile). If a stream raises, the others are closed and the
    error goes on."""
    live = dict(streams)
    last: dict[str, T] = {}
    used = {name: 0.0 for name in live}
    try:
        while live:
            name = min(live, key=lambda n: (used[n], n))
            try:
                last[name] = next(live[name])
            except StopIteration:
                del live[name]
                if name not in last:
                    raise RuntimeError(f"stream {name!r} ended without a result") from None
                continue
            used[name] = elapsed_ms(last[name])
            if on_step is not None:
                on_step(last)
    finally:
        for stream in live.values():
            close = getattr(stream, "close", None)
            if close is not None:
                close()
    return last
