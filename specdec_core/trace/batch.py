"""A batched run in the Trace ("specdec-trace/2"): its rows, the forwards they shared, and the pooled figures.

A batched run's Trace is its first row's trace (every single-run view reads it unchanged) with a ``batch`` record:
the other rows as traces of their own (each row's iterations, stats and baseline row), one ``BatchForward`` per
iteration of the batch (which rows took part, the K asked of them, the tokens the verify fed, the batch's draft,
verify and host times), the pooled stats and the batched target-only baseline. A trace with a batch is written
as "specdec-trace/2"; one without is written exactly as before ("specdec-trace/1"), and both load.

The two acceptance figures engines report, per row and pooled: the **per-draft acceptance rate** (accepted ÷
drafted) and the **mean acceptance length** (tokens emitted per target forward, the bonus or resampled token
counted: a row's tokens ÷ its iterations).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .checks import _dict, _fail, _get, _nonneg
from .records import MAX_ITERATIONS, MAX_REASON

SCHEMA_BATCH = "specdec-trace/2"
MAX_BATCH_ROWS = 64            # a trace file's bound (the app's entrances allow ``limits.MAX_BATCH``)


@dataclass
class BatchForward:
    """One iteration of the batch: the draft steps and the ONE verify forward its active rows shared."""
    index: int
    rows: list[int]              # the rows (0-based, as in the trace) that took part, in batch order
    k: int                       # drafts asked of every row (each clipped to the tokens it has left)
    fed: int                     # tokens the verify forward fed, all rows together (padding not counted)
    draft_ms: list[float]        # one entry per batched draft step (prompt lookup: all rows' lookups)
    verify_ms: float             # the one target forward over every row's last token + drafts
    other_ms: float              # per-row verification, records, the caches' rollback
    t_start_ms: float = 0.0      # since the run started (prefill included)
    k_reason: str = ""           # why this K (the batch's K policy)
    tokens: int = 0              # tokens the iteration emitted, all rows together


@dataclass
class BatchStats:
    """The batch pooled (every row together)."""
    new_tokens: int = 0
    iterations: int = 0                    # batch iterations (= target verify forwards after the prefill)
    row_iterations: int = 0                # the rows' iterations summed
    drafted: int = 0
    accepted: int = 0
    acceptance_rate: float = 0.0           # per-draft acceptance rate: accepted ÷ drafted
    mean_acceptance_length: float = 0.0    # tokens per row per target forward: new_tokens ÷ row_iterations
    target_forwards: int = 0               # prefill included
    draft_forwards: int = 0                # batched draft forwards, prefill included; 0 for prompt lookup
    wall_ms: float = 0.0
    tokens_per_s: float = 0.0              # all rows' tokens ÷ the batch's wall time
    prefill_ms: float = 0.0
    speedup: float = 0.0                   # tokens/s over the batched baseline's (0: no baseline)


@dataclass
class BatchBaseline:
    """The batched target-only run: one forward per step for every active row."""
    new_tokens: int
    wall_ms: float
    tokens_per_s: float
    target_forwards: int
    step_ms: list[float] = field(default_factory=list)   # one entry per batched step (the first with the prefill)
    step_rows: list[int] = field(default_factory=list)   # rows that took part in each step


@dataclass
class BatchRecord:
    size: int                                            # rows in the batch, row 0 (the trace itself) included
    rows: list = field(default_factory=list)             # rows 1 … size − 1, each a ``Trace`` without a batch
    forwards: list[BatchForward] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    baseline: BatchBaseline | None = None
    prices: dict | None = None       # the cost-aware K policy's prices at each batch size (``BatchPrices.to_dict``)

    def to_dict(self) -> dict:
        d = {"size": self.size, "rows": [row.to_dict() for row in self.rows],
             "forwards": [asdict(f) for f in self.forwards], "stats": asdict(self.stats)}
        if self.baseline is not None:
            d["baseline"] = asdict(self.baseline)
        if self.prices is not None:
            d["prices"] = self.prices
        return d


def _numbers(v: Any, where: str) -> list[float]:
    if not isinstance(v, list) or len(v) > MAX_ITERATIONS or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0 for x in v):
        _fail(where, "expected a list of non-negative numbers")
    return [float(x) for x in v]


def parse_batch(d: Any, parse_row: Callable[[Any], Any]) -> BatchRecord:
    """A trace's ``batch`` from an untrusted dict; ``parse_row`` reads one row's trace (``Trace.from_dict``'s
    reader, refusing a nested batch). Raises ValueError naming the first problem."""
    d = _dict(d, "batch")
    size = _get(d, "size", "batch", int)
    if not 1 <= size <= MAX_BATCH_ROWS:
        _fail("batch.size", f"must be between 1 and {MAX_BATCH_ROWS}, got {size}")
    rows_raw = _get(d, "rows", "batch", list)
    if len(rows_raw) != size - 1:
        _fail("batch.rows", f"a batch of {size} holds {size - 1} rows besides the first, got {len(rows_raw)}")
    rows = []
    for i, r in enumerate(rows_raw, 1):
        if isinstance(r, dict) and "batch" in r:
            _fail(f"batch.rows[{i - 1}]", "a row cannot hold a batch of its own")
        try:
            rows.append(parse_row(r))
        except ValueError as e:
            raise ValueError(f"batch.rows[{i - 1}]: {e}") from None
    forwards_raw = _get(d, "forwards", "batch", list)
    if len(forwards_raw) > MAX_ITERATIONS:
        _fail("batch.forwards", f"more than {MAX_ITERATIONS} forwards")
    forwards = [_parse_forward(f, f"batch.forwards[{i}]", size) for i, f in enumerate(forwards_raw)]
    st = _dict(_get(d, "stats", "batch", dict), "batch.stats")
    defaults = BatchStats()
    stats = BatchStats(**{f: _get(st, f, "batch.stats", (int, float) if isinstance(getattr(defaults, f), float)
                                  else int, optional=True, default=getattr(defaults, f))
                          for f in BatchStats.__dataclass_fields__})
    for f in BatchStats.__dataclass_fields__:
        v = getattr(stats, f)
        if isinstance(v, bool) or not math.isfinite(v) or v < 0:
            _fail(f"batch.stats.{f}", "must be a non-negative number")
        if isinstance(getattr(defaults, f), float):
            setattr(stats, f, float(v))
    if stats.accepted > stats.drafted:
        _fail("batch.stats", f"accepted ({stats.accepted}) must be at most drafted ({stats.drafted})")
    baseline = None
    bd = _get(d, "baseline", "batch", dict, optional=True)
    if bd is not None:
        baseline = BatchBaseline(new_tokens=_get(bd, "new_tokens", "batch.baseline", int),
                                 wall_ms=_nonneg(bd, "wall_ms", "batch.baseline"),
                                 tokens_per_s=_nonneg(bd, "tokens_per_s", "batch.baseline"),
                                 target_forwards=_get(bd, "target_forwards", "batch.baseline", int),
                                 step_ms=_numbers(_get(bd, "step_ms", "batch.baseline", list, True, []),
                                                  "batch.baseline.step_ms"),
                                 step_rows=[int(x) for x in _numbers(_get(bd, "step_rows", "batch.baseline", list,
                                                                          True, []), "batch.baseline.step_rows")])
    return BatchRecord(size=size, rows=rows, forwards=forwards, stats=stats, baseline=baseline,
                       prices=_parse_prices(_get(d, "prices", "batch", dict, optional=True)))


PRICE_LISTS = ("sizes", "widths", "draft_ms", "overhead_ms", "baseline_overhead_ms")


def _parse_prices(d: dict | None) -> dict | None:
    """The recorded prices' shape (their meaning is checked where they are used: ``BatchPrices.from_dict``)."""
    if d is None:
        return None
    out: dict = {}
    for key in PRICE_LISTS:
        out[key] = _numbers(_get(d, key, "batch.prices", list), f"batch.prices.{key}")
        if len(out[key]) > 64:
            _fail(f"batch.prices.{key}", "too many entries")
    rows = _get(d, "verify_ms", "batch.prices", list)
    if len(rows) > 64:
        _fail("batch.prices.verify_ms", "too many rows")
    out["verify_ms"] = [_numbers(r, "batch.prices.verify_ms")[:128] for r in rows]
    out["catchup_ms"] = _numbers(_get(d, "catchup_ms", "batch.prices", list, True, []), "batch.prices.catchup_ms")[:64]
    out["draft_per_token"] = _get(d, "draft_per_token", "batch.prices", bool)
    device = _get(d, "device", "batch.prices", str, True, "")
    out["device"] = device[:64]
    return out


def _parse_forward(d: Any, where: str, size: int) -> BatchForward:
    d = _dict(d, where)
    rows = _get(d, "rows", where, list)
    if not rows or len(rows) > size or any(isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < size
                                           for r in rows) or len(set(rows)) != len(rows):
        _fail(f"{where}.rows", f"expected distinct row indices below {size}")
    k, fed, tokens = _get(d, "k", where, int), _get(d, "fed", where, int), _get(d, "tokens", where, int, True, 0)
    if not 0 <= k <= 64 or not 0 <= fed <= 64 * 65 or not 0 <= tokens <= 65 * len(rows):
        _fail(where, "k, fed or tokens out of range")
    reason = _get(d, "k_reason", where, str, True, "")
    if len(reason) > MAX_REASON:
        _fail(f"{where}.k_reason", "text too long")
    draft_ms = _numbers(_get(d, "draft_ms", where, list), f"{where}.draft_ms")
    if len(draft_ms) > 65:
        _fail(f"{where}.draft_ms", "more draft steps than K allows")
    return BatchForward(index=_get(d, "index", where, int), rows=list(rows), k=k, fed=fed, draft_ms=draft_ms,
                        verify_ms=_nonneg(d, "verify_ms", where), other_ms=_nonneg(d, "other_ms", where),
                        t_start_ms=_nonneg(d, "t_start_ms", where, True), k_reason=reason, tokens=tokens)
