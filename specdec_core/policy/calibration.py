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
- cached for the process per (model, device, dtype): the first cost-aware run pays ≈ n_max × repeats + 3
  forwards once (≈ 1–3 s for n_max = 9 on this CPU), later runs nothing. ``cached`` looks without measuring.
"""
from __future__ import annotations

import functools
import statistics
import threading
import weakref
from dataclasses import dataclass

import torch

from ..timing import now_ms

DEFAULT_CONTEXT = 128
DEFAULT_REPEATS = 5


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
              cache: CalibrationCache | None = None) -> VerifyCurve:
    """The verify curve of ``model`` for n = 1..n_max, from the cache when it covers n_max, else measured
    (and cached)."""
    if not 1 <= n_max <= 128:
        raise ValueError(f"n_max must be between 1 and 128, got {n_max}")
    if context < 1 or repeats < 1:
        raise ValueError("context and repeats must be >= 1")
    cache = cache if cache is not None else default_cache()
    hit = cache.get(model, n_max)
    if hit is not None:
        return hit
    curve = measure_verify_curve(model, n_max, context, repeats)
    cache.put(curve, model)
    return curve


@torch.inference_mode()
def measure_verify_curve(model: torch.nn.Module, n_max: int, context: int = DEFAULT_CONTEXT,
                         repeats: int = DEFAULT_REPEATS) -> VerifyCurve:
    """Time forwards of 1..n_max tokens after a cached context (see the module docstring)."""
    if n_max < 1 or repeats < 1 or context < 1:
        raise ValueError("n_max, context and repeats must be >= 1")
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

    sizes = list(range(1, n_max + 1))
    for n in sorted({1, min(2, n_max), n_max}):   # warm-up, not timed (allocations, kernel selection)
        one(n)
    rounds = [{n: one(n) for n in (sizes if r % 2 == 0 else sizes[::-1])} for r in range(repeats)]
    return VerifyCurve(model_key(model), level_and_shape(rounds), context, repeats)


def level_and_shape(rounds: list[dict[int, float]]) -> tuple[float, ...]:
    """The curve from timed rounds (ms by n, every round the same sizes): per n, the median of its time
    over its round's mean, times the median round mean (see the module docstring). One round is returned
    as it is."""
    sizes = sorted(rounds[0])
    means = [statistics.fmean(r.values()) for r in rounds]
    level = statistics.median(means)
    return tuple(level * statistics.median(r[n] / m for r, m in zip(rounds, means)) for n in sizes)
