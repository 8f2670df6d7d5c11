"""The Trace itself: one run, written to and read from a plain dict ("specdec-trace/1", DESIGN.md §4; a batched
run, "specdec-trace/2": the first row's trace with a ``batch``, ``batch.py``). ``Trace.from_dict`` is the gate for
untrusted files (uploads): it raises ValueError naming the first problem."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..config import MAX_K
from .batch import SCHEMA_BATCH, BatchRecord, parse_batch
from .checks import _dict, _fail, _get, _nonneg, _parse_iteration, _token_list
from .records import MAX_ITERATIONS, MAX_REASON, MAX_TOKENS, OPTIONAL_STATS, SCHEMA, BaselineResult, \
    IterationRecord, Stats
from .sampler import COUPLED_DRAFT_FIELDS, check_sampler


@dataclass
class Trace:
    config: dict
    prompt: str
    prompt_ids: list[int]
    iterations: list[IterationRecord] = field(default_factory=list)
    new_token_ids: list[int] = field(default_factory=list)
    text: str = ""
    stats: Stats = field(default_factory=Stats)
    baseline: BaselineResult | None = None
    finish_reason: str = ""      # "eos" | "length" | "stopped" | "limit" (the app's run limit) | "" while running
    schema: str = SCHEMA
    calibration: dict | None = None  # {"verify_ms": [t(1), t(2), ...], "context": int, ...}: the target's
                                     # measured verify curve, when one was at hand (calibration.VerifyCurve)
    batch: BatchRecord | None = None  # a batched run: the other rows, the shared forwards, the pooled figures

    def rows(self) -> list["Trace"]:
        """Every row of the run: this trace, then a batch's other rows."""
        return [self] + (self.batch.rows if self.batch is not None else [])

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.batch is None:
            del d["batch"]
        else:
            d["batch"], d["schema"] = self.batch.to_dict(), SCHEMA_BATCH
        if self.baseline is None:
            del d["baseline"]
        if self.calibration is None:
            del d["calibration"]
        for it in d["iterations"]:   # chain iterations are written exactly as before trees (and coupling) existed
            if it.get("tree") is None:
                it.pop("tree", None)
            for draft in it["drafts"]:
                for key in COUPLED_DRAFT_FIELDS:
                    if draft[key] is None:
                        del draft[key]
            if it["resampled"] is not None and it["resampled"]["q"] is None:   # likewise the resampled token's q
                del it["resampled"]["q"]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "Trace":
        return _parse_trace(d)


def _parse_trace(d: Any) -> Trace:
    d = _dict(d, "trace")
    if d.get("schema") not in (SCHEMA, SCHEMA_BATCH):
        _fail("schema", f"expected '{SCHEMA}' or '{SCHEMA_BATCH}', got {d.get('schema')!r}")
    batch = None
    if d["schema"] == SCHEMA_BATCH:
        batch = parse_batch(_get(d, "batch", "trace", dict), _parse_row)
    elif "batch" in d:
        _fail("batch", f"a batch needs the schema '{SCHEMA_BATCH}'")
    config = _get(d, "config", "trace", dict)
    for key, kind in (("k", int), ("temperature", float), ("max_new_tokens", int)):
        _get(config, key, "config", kind)
    if not 1 <= config["k"] <= MAX_K:   # figures loop over K: an untrusted huge K must not hang them
        _fail("config.k", f"must be between 1 and {MAX_K}, got {config['k']}")
    for key in config:
        if not isinstance(key, str) or len(key) > 64:
            _fail("config", "keys must be short strings")
    for key, v in config.items():
        if not (v is None or isinstance(v, (str, int, float, bool))) or (isinstance(v, str) and len(v) > 500):
            _fail(f"config.{key}", "values must be short scalars")
    iters_raw = _get(d, "iterations", "trace", list)
    if len(iters_raw) > MAX_ITERATIONS:
        _fail("iterations", f"more than {MAX_ITERATIONS} iterations")
    iterations = [_parse_iteration(x, f"iterations[{i}]") for i, x in enumerate(iters_raw)]
    new_ids = _token_list(_get(d, "new_token_ids", "trace", list), "new_token_ids")
    if [t for it in iterations for t in it.emitted] != new_ids:
        _fail("iterations", "the emitted tokens do not concatenate to new_token_ids")
    st = _dict(_get(d, "stats", "trace", dict), "stats")
    defaults = Stats()
    stats = Stats(**{f: _get(st, f, "stats", type(getattr(defaults, f)), optional=f in OPTIONAL_STATS,
                             default=getattr(defaults, f)) for f in Stats.__dataclass_fields__})
    for f in ("acceptance_ci", "speedup_ci"):
        v = getattr(stats, f)
        if v and (len(v) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                         and math.isfinite(x) and x >= 0 for x in v)):
            _fail(f"stats.{f}", "expected [low, high], two non-negative numbers")
        setattr(stats, f, [float(x) for x in v])
    if len(stats.verdict) > MAX_REASON or len(stats.speedup_ci_method) > MAX_REASON:
        _fail("stats.verdict", "text too long")
    if stats.new_tokens != len(new_ids) or stats.iterations != len(iterations):
        _fail("stats", "new_tokens / iterations disagree with the iterations")
    if not 0 <= stats.accepted <= stats.drafted:
        _fail("stats", f"accepted ({stats.accepted}) must be between 0 and drafted ({stats.drafted})")
    baseline = None
    bd = _get(d, "baseline", "trace", dict, optional=True)
    if bd is not None:
        token_ms = _get(bd, "token_ms", "baseline", list)
        if len(token_ms) > MAX_TOKENS or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                 and math.isfinite(x) and x >= 0 for x in token_ms):
            _fail("baseline.token_ms", "expected a list of non-negative numbers")
        baseline = BaselineResult(
            new_token_ids=_token_list(_get(bd, "new_token_ids", "baseline", list), "baseline.new_token_ids"),
            text=_get(bd, "text", "baseline", str), token_ms=[float(x) for x in token_ms],
            wall_ms=_nonneg(bd, "wall_ms", "baseline"), tokens_per_s=_nonneg(bd, "tokens_per_s", "baseline"),
            target_forwards=_get(bd, "target_forwards", "baseline", int, True, 0))
    check_sampler(config, iterations)
    finish = _get(d, "finish_reason", "trace", str, True, "")
    if finish not in ("", "eos", "length", "stopped", "limit"):
        _fail("finish_reason", f"unknown value {finish!r}")
    return Trace(config=dict(config), prompt=_get(d, "prompt", "trace", str),
                 prompt_ids=_token_list(_get(d, "prompt_ids", "trace", list), "prompt_ids"),
                 iterations=iterations, new_token_ids=new_ids, text=_get(d, "text", "trace", str),
                 stats=stats, baseline=baseline, finish_reason=finish,
                 calibration=_parse_calibration(_get(d, "calibration", "trace", dict, optional=True)), batch=batch)


def _parse_row(d: Any) -> Trace:
    """One row of a batch: a trace of its own, without a batch."""
    return _parse_trace(d)


def _parse_calibration(c: dict | None) -> dict | None:
    if c is None:
        return None
    v = _get(c, "verify_ms", "calibration", list)
    if not 1 <= len(v) <= 128 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                          and math.isfinite(x) and x >= 0 for x in v):
        _fail("calibration.verify_ms", "expected 1 to 128 non-negative numbers")
    out: dict = {"verify_ms": [float(x) for x in v]}
    for key, value in c.items():
        if key != "verify_ms":
            if not (value is None or isinstance(value, (str, int, float, bool))) or (
                    isinstance(value, str) and len(value) > 500) or len(str(key)) > 64:
                _fail(f"calibration.{key}", "values must be short scalars")
            out[str(key)] = value
    return out
