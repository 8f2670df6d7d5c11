"""A batch's prices (``policy.batch_cost.BatchPrices``), measured once per process per (target, drafter, K cap,
greedy or sampling) and fixed for every run after, as a single run's are (``decoding.prices``).

On a synthetic context of ``CONTEXT`` tokens per row (random tokens, then their first half again, so prompt lookup
finds matches), at each batch size of ``BATCH_SIZES``:
 - the verify: one target forward over B rows × w tokens each, for the widths w = 1 … K cap + 1 of
   ``price_widths`` (the least of ``REPS`` timings each, taken in rounds over the widths after a warm-up round);
 - a draft step: one batched draft forward over B rows after the context (prompt lookup: every row's lookup), and
   a model draft's catch-up (its first step, over the whole context);
 - the host time per iteration beyond the forwards (the median of a short fixed-K batched run) and per baseline
   step beyond its forward (a short batched baseline's fastest step less the fastest one-token verify).
A forward over more rows or tokens is priced at least as high as a smaller one (``monotone``).
``pause``, called between batch sizes, lets a caller give way to runs (the app's background measurement releases the
model there).
"""
from __future__ import annotations

import random
import statistics
import threading
from collections.abc import Callable
from typing import Any

import torch

from ..config import SpecConfig
from ..decoding.prices import drafter_key, per_token
from ..drafters.base import DraftPolicy
from ..policy.batch_cost import BatchPrices
from ..policy.calibration import model_key
from ..timing import now_ms
from ..trace import Trace
from .baseline import batch_baseline
from .drafters import batch_drafter
from .target import BatchTarget

Generate = Callable[[torch.nn.Module, Any, list[list[int]], SpecConfig], Trace]   # engine.batch_generate

BATCH_SIZES = (1, 2, 4, 8, 16)
CONTEXT = 64            # tokens each row holds while its forwards are timed
REPS = 3                # timings per (size, width); the least is kept
RUN_TOKENS = 8          # new tokens of the short runs the host time is read off
RUN_K = 2

_CACHE: dict[tuple, BatchPrices] = {}
_LOCK = threading.Lock()


def price_widths(k_cap: int) -> tuple[int, ...]:
    """The tokens per row a verify is timed at: every width up to 5, then every other, and the cap's K + 1."""
    top = k_cap + 1
    return tuple(sorted({w for w in (1, 2, 3, 4, 5, 7, 9, 11, 13, 15, 17) if w <= top} | {top}))


def context_ids(vocab_size: int, n: int = CONTEXT, seed: int = 0) -> list[int]:
    """A synthetic context: n // 2 + n % 2 random tokens, then their first half again."""
    rng = random.Random(seed)
    low = min(100, vocab_size // 2)              # past the special tokens of a real vocabulary
    head = [rng.randrange(low, min(vocab_size, 30_000)) for _ in range(n - n // 2)]
    return head + head[:n // 2]


def measured_batch_prices(target: torch.nn.Module, drafter: Any, cfg: SpecConfig, generate: Generate,
                          sizes: tuple[int, ...] = BATCH_SIZES, pause: Callable[[], None] | None = None
                          ) -> BatchPrices:
    """This process's prices for (target, drafter, cfg's K cap, greedy or sampling), measured on first use.
    ``generate``: the batched engine's run (``engine.batch_generate``; passed in, as the engine calls this).
    Without ``pause`` a second caller waits for the first's result; with it (a background measurement that gives
    way to runs) the measurement runs outside the cache's lock, so a run that needs prices meanwhile measures them
    itself, and the first result stored is kept."""
    key = (model_key(target), drafter_key(drafter), cfg.k, cfg.greedy, sizes)
    if pause is not None:
        with _LOCK:
            if key in _CACHE:
                return _CACHE[key]
        prices = measure_batch_prices(target, drafter, cfg, generate, sizes, pause)
        with _LOCK:
            return _CACHE.setdefault(key, prices)
    with _LOCK:                      # one measurement at a time; a second caller waits for the first's result
        if key not in _CACHE:
            _CACHE[key] = measure_batch_prices(target, drafter, cfg, generate, sizes)
        return _CACHE[key]


def measure_batch_prices(target: torch.nn.Module, drafter: Any, cfg: SpecConfig, generate: Generate,
                         sizes: tuple[int, ...] = BATCH_SIZES, pause: Callable[[], None] | None = None
                         ) -> BatchPrices:
    device = next(target.parameters()).device
    ids = context_ids(int(target.get_output_embeddings().weight.shape[0]))
    widths = price_widths(cfg.k)
    run_cfg = SpecConfig(k=RUN_K, k_policy="fixed", temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                         max_new_tokens=RUN_TOKENS, full_trace=False)
    verify, draft, catchup, overhead, base_overhead = [], [], [], [], []
    for i, b in enumerate(sizes):
        if pause is not None and i:
            pause()
        tgt = BatchTarget(target, b)
        tgt.forward([ids] * b, logits=False)
        best = [float("inf")] * len(widths)
        for rep in range(REPS + 1):          # the first round is an untimed warm-up; rounds run every width, so
            for j, w in enumerate(widths):   # a stall of the machine costs one timing of each, not all of one
                t0 = now_ms(device)
                tgt.forward([ids] * b, [ids[:w]] * b)
                if rep:
                    best[j] = min(best[j], now_ms(device) - t0)
                tgt.rollback([len(ids)] * b)
        verify.append(tuple(best))
        step_ms, catchup_ms = _draft_step_ms(target, drafter, ids, b, device)
        draft.append(step_ms)
        catchup.append(catchup_ms)
        trace = generate(target, drafter, [ids] * b, run_cfg)
        overhead.append(statistics.median(f.other_ms for f in trace.batch.forwards))
        steps = batch_baseline(target, [ids] * b, run_cfg)[1].step_ms[1:]
        base_overhead.append(max(0.0, min(steps) - best[0]))
    return BatchPrices(tuple(sizes), widths, monotone(verify), tuple(draft), per_token(drafter), tuple(overhead),
                       tuple(base_overhead), device=str(device), catchup_ms=tuple(catchup))


def monotone(verify: list[tuple[float, ...]]) -> tuple[tuple[float, ...], ...]:
    """A forward over more rows or more tokens per row costs at least as much: each (size, width)'s price is the
    least of its own timing and every larger shape's (a stall of the machine during one timing inflates it)."""
    out = [list(row) for row in verify]
    for i in reversed(range(len(out))):
        for j in reversed(range(len(out[i]))):
            if i + 1 < len(out):
                out[i][j] = min(out[i][j], out[i + 1][j])
            if j + 1 < len(out[i]):
                out[i][j] = min(out[i][j], out[i][j + 1])
    return tuple(tuple(row) for row in out)


def _draft_step_ms(target: torch.nn.Module, drafter: Any, ids: list[int], b: int, device: torch.device
                   ) -> tuple[float, float]:
    """(one batched draft step over b rows after the context, feeding each row the last two tokens as a step after
    a verify does (prompt lookup: the rows' lookups), and a catch-up's ms per row and token fed: the first step over
    the whole context; the least of ``REPS`` timings each)."""
    bd = batch_drafter(drafter)
    feats = []
    if bd.reads_features:                     # the feature draft reads the target's features of the context
        tgt = BatchTarget(target, b, keep_features=True)
        tgt.forward([ids] * b, logits=False)
        feats = tgt.features

    def observe() -> None:
        for j, f in enumerate(feats):
            bd.observe_features(j, 0, f)
    policies = [DraftPolicy(0.0, 0, 1.0, None, raw_probs=False)] * b
    catchups = []
    for _ in range(REPS):                     # the first step fills the caches with the context: a catch-up's price
        bd.start([ids] * b)
        observe()
        first = bd.propose([ids[:-1]] * b, [1] * b, policies)
        catchups.append(sum(first.step_ms) / (b * (len(ids) - 1)) if first.forwards else 0.0)
    times = []
    for _ in range(REPS):
        bd.rollback([len(ids) - 2] * b)
        observe()
        out = bd.propose([ids] * b, [1] * b, policies)
        times.append(out.step_ms[0] if out.step_ms else 0.0)
    return min(times), min(catchups)
