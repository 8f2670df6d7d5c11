"""A sweep over batch sizes: where speculation stops paying on a busy server.

For each batch size B the same requests (the first B of ``prompts``, repeated when B is larger) are decoded by the
batched speculative loop (``batch.engine``) and by the batched target-only baseline (``batch.baseline``), the two
advanced in lockstep (``decoding.lockstep``: they share the machine's slow and fast moments). Each B gets the
pooled speedup (all rows' tokens/s over the baseline's) with its 95 % interval, a bootstrap over the batch's
forwards (``stats.intervals.batch_speedup_interval``), and what one iteration fed and cost: at B rows the target
verifies B × (K + 1) tokens where the baseline's step feeds B. The Learn tab's "A busy server" chapter runs it.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .. import limits
from ..batch.baseline import attach_batch_baseline, stream_batch_baseline
from ..batch.engine import stream_batch
from ..config import SpecConfig
from ..decoding.lockstep import run_lockstep
from ..stats.intervals import Interval, batch_speedup_interval
from ..trace import Trace


@dataclass(frozen=True)
class SizePoint:
    """One batch size's side-by-side runs: the speculative batch (row 0's trace, its ``batch`` with the baseline
    attached) and the figures read off it."""
    size: int
    trace: Trace
    interval: Interval | None          # the pooled speedup's 95 % interval (None: no baseline or no forward)

    @property
    def speedup(self) -> float:
        return self.trace.batch.stats.speedup

    @property
    def tokens_per_row(self) -> float:
        """Tokens each row emitted per target verify (the accepted drafts and the one every iteration adds)."""
        return self.trace.batch.stats.mean_acceptance_length

    @property
    def fed_per_verify(self) -> float:
        """Tokens one verify forward fed, all rows together (B × (drafts + 1) while every row drafts)."""
        return statistics.fmean(f.fed for f in self.trace.batch.forwards)

    @property
    def verify_ms(self) -> float:
        return statistics.fmean(f.verify_ms for f in self.trace.batch.forwards)

    @property
    def iteration_ms(self) -> float:
        """One speculative iteration: the batched draft steps, the verify and the host time."""
        return statistics.fmean(sum(f.draft_ms) + f.verify_ms + f.other_ms for f in self.trace.batch.forwards)

    @property
    def baseline_step_ms(self) -> float:
        """One baseline step over the batch (the first, which holds the prefill, left out)."""
        steps = self.trace.batch.baseline.step_ms
        return statistics.fmean(steps[1:] or steps)


@dataclass(frozen=True)
class BatchSweep:
    k: int
    drafter: str
    max_new_tokens: int
    points: tuple[SizePoint, ...]


class _Clocked:
    """A stream's latest result with the batch's generation time, as ``run_lockstep`` reads it."""

    def __init__(self, value: Any, wall_ms: float) -> None:
        self.value, self.wall_ms = value, wall_ms


def _speculative(target: torch.nn.Module, drafter: Any, rows: list[list[int]], cfg: SpecConfig, tokenizer: Any,
                 texts: list[str] | None) -> Iterator[_Clocked]:
    for trace in stream_batch(target, drafter, rows, cfg, tokenizer, texts=texts):
        yield _Clocked(trace, trace.batch.stats.wall_ms)


def _baseline(target: torch.nn.Module, rows: list[list[int]], cfg: SpecConfig, tokenizer: Any) -> Iterator[_Clocked]:
    for results, batch in stream_batch_baseline(target, rows, cfg, tokenizer):
        yield _Clocked((results, batch), batch.wall_ms)


def batch_size_sweep(target: torch.nn.Module, drafter: Any, prompts: Sequence[Sequence[int]], sizes: Sequence[int],
                     cfg: SpecConfig, tokenizer: Any = None, texts: Sequence[str] | None = None) -> BatchSweep:
    """Every size of ``sizes`` (each checked against ``limits.MAX_BATCH``), speculative and baseline side by side
    on the first B of ``prompts`` (token ids; cycled past their number), with ``cfg`` (a fixed K is what the sweep
    is about: the cost-aware policy would lower K as B grows). ``texts``: the prompts in words, for the traces."""
    if not prompts or not sizes:
        raise ValueError("the sweep needs at least one prompt and one batch size")
    if cfg.tree_nodes:
        raise ValueError("a batch drafts chains: tree nodes must be 0")
    points = []
    for b in sizes:
        b = limits.check_batch(b)
        rows = [list(prompts[i % len(prompts)]) for i in range(b)]
        words = [texts[i % len(texts)] for i in range(b)] if texts else None
        last = run_lockstep({"speculative": _speculative(target, drafter, rows, cfg, tokenizer, words),
                             "baseline": _baseline(target, rows, cfg, tokenizer)})
        trace = last["speculative"].value
        attach_batch_baseline(trace, *last["baseline"].value)
        points.append(SizePoint(b, trace, batch_speedup_interval(trace)))
    return BatchSweep(cfg.k, str(trace.config.get("drafter", "")), cfg.max_new_tokens, tuple(points))


__all__ = ["SizePoint", "BatchSweep", "batch_size_sweep"]
