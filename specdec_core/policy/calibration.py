"""Calibration: the measured cost of one target forward over n new tokens, t_verify(n), n = 1..n_max.

The cost model in ``theory`` needs t_verify(n) as a curve, not a line: on a GPU it is nearly flat, on a
CPU it is flat only for a few tokens and rises after, and it need not be monotonic (a curve measured here:
docs/benchmarks.md, "The CPU matrix-product path"). A run measures only the sizes it used, so a short
calibration pass times the rest:

- one KV cache prefilled with ``context`` tokens (a realistic prompt length), then for each n one
  forward of n tokens with ``logits_to_keep = n`` (as the engine's verify keeps n logits), cropped
  back after each forward so every size sees the same context;
- untimed forwards of 1, 2 and n_max tokens first (warm-up: allocations, kernel selection), then
  ``repeats`` rounds in alternating order, the device synchronized before every clock read;
- the curve's shape and its level are taken apart: each size's time divided by its round's mean, the
  median of that per n, times the median round mean. A machine whose speed drifts from one round to
  the next (measured here: one calibration 1.7 × slower than another a few seconds earlier) then
  shifts the level, not the shape, and the shape is what the K policy compares sizes by (it rescales
  the level online);
- cached for the process per (model, device, dtype), and never changed once there: a later need for more
  sizes measures only those (with a few it already has, to bring the new ones to the stored level) and appends
  them (``calibrate``), so a run priced now and the same run priced after the extension get the same prices.
  One measurement at a time in the process (``measuring``): two would time each other, and two runs that need
  the same curve get the one measured once. The app measures at start-up (``components/serving/calibrate.py``);
  elsewhere the first cost-aware run pays ≈ n_max × repeats + 3 forwards once, later runs nothing. ``cached``
  looks without measuring.

What else a cost-aware run is priced with (a drafter's step, catch-up and host costs) is measured by short
engine runs (``decoding/prices.py``, which needs the engine); the records of both live here (``DraftCosts``,
``Prices``), and ``Prices.to_dict`` is what a trace records as its ``calibration`` (docs/cost-model.md, "Prices
are fixed before a run").
"""
from __future__ import annotations

import functools
import hashlib
import json
import statistics
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..timing import now_ms

DEFAULT_CONTEXT = 128
DEFAULT_REPEATS = 5
EXTEND_REPEATS = 3      # rounds of a later extension (more sizes, each dearer)
EXTEND_OVERLAP = 4      # sizes already stored that an extension measures again, to take the stored level
_MEASURING = threading.RLock()


def measuring() -> threading.RLock:
    """Held while this process measures a cost (one at a time: two measurements would time each other)."""
    return _MEASURING


@dataclass(frozen=True)
class VerifyCurve:
    """Median ms of one forward over n new tokens, n = 1..len(verify_ms), after ``context`` cached tokens."""
    key: tuple[str, str, str]          # (model id, device, dtype)
    verify_ms: tuple[float, ...]
    context: int
    repeats: int

    @property
    def t1(self) -> float:
        return self.verify_ms[0]

    def to_dict(self) -> dict:
        return {"model": self.key[0], "device": self.key[1], "dtype": self.key[2],
                "verify_ms": list(self.verify_ms), "context": self.context, "repeats": self.repeats}


def model_key(model: torch.nn.Module) -> tuple[str, str, str]:
    """(model id, device, dtype). The id is the checkpoint path with the model's class and size (a draft built
    from its target's config carries the target's path: sharing the target's calibration, the shipped
    token-only draft was priced at a target forward, 90 ms against its 7, and never drafted), or the object's
    identity for a model built in-process (two random-weight models must not share a calibration)."""
    p = next(model.parameters())
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    if name:
        ident = f"{name} [{type(model).__name__}, {sum(q.numel() for q in model.parameters()):,} parameters]"
    else:
        ident = f"#{id(model)}"
    return ident, str(p.device), str(p.dtype).replace("torch.", "")


class CalibrationCache:
    """Calibrations of this process, per (model, device, dtype); thread-safe."""

    def __init__(self) -> None:
        self._curves: dict[tuple[str, str, str], tuple[VerifyCurve, weakref.ref | None]] = {}
        self._lock = threading.Lock()

    def get(self, model: torch.nn.Module, n_max: int = 1) -> VerifyCurve | None:
        entry = self._curves.get(model_key(model))
        if entry is None:
            return None
        curve, ref = entry
        if ref is not None and ref() is not model:      # an in-process model that has gone; its id reused
            return None
        return curve if len(curve.verify_ms) >= n_max else None

    def put(self, curve: VerifyCurve, model: torch.nn.Module | None = None) -> None:
        """Store a curve; ``model`` (for in-process models keyed by identity) guards against a reused id."""
        with self._lock:
            old = self._curves.get(curve.key)
            if old is None or len(old[0].verify_ms) <= len(curve.verify_ms) or (old[1] is not None and old[1]() is None):
                ref = weakref.ref(model) if model is not None and "#" in curve.key[0] else None
                self._curves[curve.key] = (curve, ref)

    def clear(self) -> None:
        with self._lock:
            self._curves.clear()


@functools.cache
def default_cache() -> CalibrationCache:
    """The process-wide cache (created on first use, not at import)."""
    return CalibrationCache()


def cached(model: torch.nn.Module, n_max: int = 1) -> VerifyCurve | None:
    """The process's calibration of ``model`` covering n = 1..n_max, or None: never measures."""
    return default_cache().get(model, n_max)


def calibrate(model: torch.nn.Module, n_max: int, context: int = DEFAULT_CONTEXT, repeats: int = DEFAULT_REPEATS,
              cache: CalibrationCache | None = None, pause: Callable[[], None] | None = None) -> VerifyCurve:
    """The verify curve of ``model`` for n = 1..n_max: from the cache when it covers n_max; else, when a shorter
    curve is stored, that curve with the missing sizes appended (``extend_curve``: the stored sizes keep their
    prices); else measured. Cached. ``pause`` is called between timed rounds (the app's start-up lets waiting
    runs through there)."""
    if not 1 <= n_max <= 128:
        raise ValueError(f"n_max must be between 1 and 128, got {n_max}")
    if context < 1 or repeats < 1:
        raise ValueError("context and repeats must be >= 1")
    cache = cache if cache is not None else default_cache()
    hit = cache.get(model, n_max)
    if hit is not None:
        return hit
    with _MEASURING:
        hit = cache.get(model, n_max)          # measured by another thread while this one waited
        if hit is not None:
            return hit
        old = cache.get(model)
        curve = (extend_curve(model, old, n_max, min(repeats, EXTEND_REPEATS), pause) if old is not None
                 else measure_verify_curve(model, n_max, context, repeats, pause=pause))
        cache.put(curve, model)
        return curve


def extend_curve(model: torch.nn.Module, old: VerifyCurve, n_max: int, repeats: int = EXTEND_REPEATS,
                 pause: Callable[[], None] | None = None) -> VerifyCurve:
    """``old`` with sizes len(old) + 1 … n_max appended: measured with the last ``EXTEND_OVERLAP`` stored sizes
    and n = 1, and scaled so that those match what is stored (the median ratio), so the appended sizes sit at
    the stored level. The stored sizes are returned unchanged."""
    m = len(old.verify_ms)
    if n_max <= m:
        return old
    overlap = sorted({1, *range(max(1, m - EXTEND_OVERLAP + 1), m + 1)})
    times = measure_sizes(model, overlap + list(range(m + 1, n_max + 1)), old.context, repeats, pause)
    ratio = statistics.median(old.verify_ms[n - 1] / times[n] for n in overlap if times[n] > 0)
    return VerifyCurve(old.key, old.verify_ms + tuple(times[n] * ratio for n in range(m + 1, n_max + 1)),
                       old.context, old.repeats)


def measure_verify_curve(model: torch.nn.Module, n_max: int, context: int = DEFAULT_CONTEXT,
                         repeats: int = DEFAULT_REPEATS, pause: Callable[[], None] | None = None) -> VerifyCurve:
    """Time forwards of 1..n_max tokens after a cached context (see the module docstring)."""
    if n_max < 1 or repeats < 1 or context < 1:
        raise ValueError("n_max, context and repeats must be >= 1")
    times = measure_sizes(model, list(range(1, n_max + 1)), context, repeats, pause)
    return VerifyCurve(model_key(model), tuple(times[n] for n in range(1, n_max + 1)), context, repeats)


@torch.inference_mode()
def measure_sizes(model: torch.nn.Module, sizes: Sequence[int], context: int = DEFAULT_CONTEXT,
                  repeats: int = DEFAULT_REPEATS, pause: Callable[[], None] | None = None) -> dict[int, float]:
    """ms of one forward over n new tokens for each n in ``sizes``, after ``context`` cached tokens: untimed
    warm-up forwards, then ``repeats`` rounds in alternating order, level and shape taken apart
    (``level_and_shape``). ``pause`` is called between rounds (the cache stays as it is)."""
    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < 1 or repeats < 1 or context < 1:
        raise ValueError("sizes, context and repeats must be >= 1")
    n_max = sizes[-1]
    from ..models.kv_cache import new_kv_cache
    p = next(model.parameters())
    device = p.device
    vocab = int(model.get_output_embeddings().weight.shape[0])
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit:
        context = max(1, min(context, int(limit) - n_max - 1))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, context + n_max), generator=gen).to(device)
    cache = new_kv_cache(model.config)
    model(input_ids=ids[:, :context], past_key_values=cache, use_cache=True, logits_to_keep=1)

    def one(n: int) -> float:
        t0 = now_ms(device)
        model(input_ids=ids[:, context:context + n], past_key_values=cache, use_cache=True, logits_to_keep=n)
        dt = now_ms(device) - t0
        cache.crop(-n)
        return dt

    for n in sorted({sizes[0], sizes[min(1, len(sizes) - 1)], n_max}):   # warm-up, not timed (allocations,
        one(n)                                                             # kernel selection)
    rounds = []
    for r in range(repeats):
        if r and pause is not None:
            pause()
        rounds.append({n: one(n) for n in (sizes if r % 2 == 0 else sizes[::-1])})
    return dict(zip(sizes, level_and_shape(rounds)))


def level_and_shape(rounds: list[dict[int, float]]) -> tuple[float, ...]:
    """The curve from timed rounds (ms by n, every round the same sizes): per n, the median of its time
    over its round's mean, times the median round mean (see the module docstring). One round is returned
    as it is."""
    sizes = sorted(rounds[0])
    means = [statistics.fmean(r.values()) for r in rounds]
    level = statistics.median(means)
    return tuple(level * statistics.median(r[n] / m for r, m in zip(rounds, means)) for n in sizes)


# --- what a cost-aware run is priced with ------------------------------------------------------------------

@dataclass(frozen=True)
class DraftCosts:
    """What one drafter costs beside its target, in ms at the level of the target's verify curve (measured by
    short engine runs together with verifies, and brought to the curve's level: ``decoding/prices.py``)."""
    drafter: str                       # ``drafter_key``: what was timed
    draft_ms: float                    # one draft forward (a model draft), or one lookup per iteration
    draft_per_token: bool
    catchup_ms: float = 0.0            # per token fed to a catch-up forward (a model draft that sat out)
    overhead_ms: float = 0.0           # host time per chain iteration, greedy
    overhead_sampled_ms: float = 0.0   # the same when sampling (warping, residuals, draws)
    tree_draft_ms: float | None = None     # one level of a token tree (None: the drafter drafts no trees)
    tree_overhead_ms: float | None = None  # host time per tree iteration
    measured: bool = True              # False: the drafter could not be timed; zeros price it


PRICED = ("verify_ms", "draft_ms", "draft_per_token", "catchup_ms", "overhead_ms", "tree_draft_ms",
          "tree_overhead_ms")   # the values the cost-aware policy decides by: what ``prices_id`` covers


@dataclass(frozen=True)
class Prices:
    """Everything a cost-aware run is priced with, fixed before it starts: the target's verify curve (the
    sizes the run can feed) and its drafter's costs, the host time for its kind of decoding (greedy or
    sampling). ``to_dict`` is what the trace records as ``calibration``; ``CostAwareK.from_calibration`` takes
    it back, so the same prices give the same K choices on any machine."""
    verify: VerifyCurve
    draft: DraftCosts
    sampled: bool

    @property
    def overhead_ms(self) -> float:
        return self.draft.overhead_sampled_ms if self.sampled else self.draft.overhead_ms

    def to_dict(self) -> dict:
        d = self.draft
        out = {**self.verify.to_dict(), "drafter": d.drafter, "draft_ms": d.draft_ms,
               "draft_per_token": d.draft_per_token, "catchup_ms": d.catchup_ms, "overhead_ms": self.overhead_ms,
               "tree_draft_ms": d.tree_draft_ms, "tree_overhead_ms": d.tree_overhead_ms,
               "sampled": self.sampled, "draft_measured": d.measured, "torch": torch.__version__}
        out["prices"] = prices_id(out)
        return out


def prices_id(calibration: dict) -> str:
    """8 hex digits naming the priced values of a trace's ``calibration`` (``PRICED``): two runs whose ids match
    were priced alike, whatever machine measured them."""
    def plain(v: object) -> object:   # 2 and 2.0 price alike (a hand-edited or re-encoded trace)
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    priced = {key: plain(calibration.get(key)) for key in PRICED}
    return hashlib.sha256(json.dumps(priced, sort_keys=True).encode()).hexdigest()[:8]
