"""How sure a measured figure is: 95 % intervals and the plain verdict built on them.

- **Acceptance** (overall and per draft position) is a share of trials: a Wilson score interval (no
  continuity correction, as R's ``prop.test(correct = FALSE)`` and statsmodels' ``method="wilson"``). The
  overall rate treats every draft as its own trial; drafts of one iteration are not independent (a
  rejection ends the iteration), so read it as a little too narrow. Per position j the trials are the
  iterations that tested a j-th draft, one each.
- **Speedup** from one run with its baseline: a percentile bootstrap over iterations (the speculative
  run's iterations and the baseline's tokens resampled with replacement, the prefills kept fixed; seeded,
  so the same trace always gives the same interval). It measures the run-to-run noise of iterations, not
  a drift of the machine between the speculative run and its baseline, and says so in its label.
- **Speedup** of a batched run (all rows pooled, over the batched baseline): the same bootstrap over the
  batch's forwards and the baseline's steps (a step emits one token per row still decoding).
- **Speedup** from repeated interleaved rounds (the bench, the K sweep, the comparison): a t interval on
  the logs of the per-round speedups (their geometric mean), which does cover drift between rounds.
- **Verdict**: from the interval, not the point: "pays here" when all of it is above ×1, "does not pay
  here" when all of it is below, otherwise (or when the sample is too small for any interval to mean much)
  "can't tell yet — run more tokens".

Pure functions over plain numbers, plus readers of a ``Trace``; the statistics are scipy's (``binomtest``'s
Wilson interval, ``t.ppf``, ``bootstrap``).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.stats._result_classes import BinomTestResult   # binomtest's result (scipy.stats' documented class)

from ..trace import Trace

Z95 = 1.959963984540054           # the normal 97.5 % quantile
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0
MIN_ITERATIONS = 10               # fewer speculative iterations than this: no verdict from a bootstrap
MIN_BASELINE_TOKENS = 16          # fewer baseline tokens than this: no verdict from a bootstrap
MIN_ROUNDS = 3                    # fewer interleaved rounds than this: no verdict from rounds
BOOTSTRAP = "bootstrap over iterations"
BOOTSTRAP_FORWARDS = "bootstrap over the batch's forwards"
ROUNDS = "interleaved rounds"
CANT_TELL = "can't tell yet — run more tokens"


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion successes / trials, scipy's (``binomtest(...).proportion_ci``,
    ``method="wilson"``) at the two-sided level of the normal quantile ``z``; (0, 1) with no trials.

    Built from ``binomtest``'s result class directly: ``binomtest`` itself also computes the test's p-value
    (about a millisecond here), which the interval never reads, and ``fill_stats`` runs after every iteration,
    inside the run's timed wall clock."""
    if trials < 0 or not 0 <= successes <= trials or successes != int(successes) or trials != int(trials):
        raise ValueError(f"need whole counts 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return 0.0, 1.0
    k, n = int(successes), int(trials)
    result = BinomTestResult(k=k, n=n, alternative="two-sided", statistic=k / n, pvalue=math.nan)
    ci = result.proportion_ci(confidence_level=math.erf(z / math.sqrt(2)), method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95 % interval, how it was obtained, and whether the sample is big enough
    for the interval to decide anything."""
    point: float
    low: float
    high: float
    method: str                  # BOOTSTRAP or ROUNDS
    enough: bool = True

    def to_list(self) -> list[float]:
        return [self.low, self.high]


def mean_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(mean(a) − mean(b), low, high): Welch's 95 % t interval of a difference of two means (the t quantile at
    the Welch–Satterthwaite degrees of freedom, scipy's); needs two values on each side. A side with no spread
    (every iteration the same) adds nothing to the error."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each sample needs at least two values")
    d = float(np.mean(a) - np.mean(b))
    ea, eb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    if ea + eb == 0:
        return d, d, d
    df = (ea + eb) ** 2 / (ea ** 2 / (len(a) - 1) + eb ** 2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(ea + eb)
    return d, d - half, d + half


@functools.lru_cache(maxsize=256)
def t975(df: int) -> float:
    """Student's t 97.5 % quantile (the two-sided 95 % interval's) at ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    return float(stats.t.ppf(0.975, df))


def rounds_interval(speedups: Sequence[float]) -> Interval | None:
    """The geometric mean of per-round speedups (each from one interleaved round: both sides measured back
    to back) with a t interval on their logs; None with fewer than two positive rounds."""
    logs = [math.log(s) for s in speedups if s > 0 and math.isfinite(s)]
    if len(logs) < 2:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = t975(len(logs) - 1) * sd / math.sqrt(len(logs))
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), ROUNDS, len(logs) >= MIN_ROUNDS)


def bootstrap_speedup(iter_tokens: Sequence[int], iter_ms: Sequence[float], fixed_ms: float,
                      base_ms: Sequence[float], base_fixed_ms: float, base_fixed_tokens: int = 0,
                      samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
                      base_tokens: Sequence[int] | None = None) -> tuple[float, float]:
    """A percentile bootstrap 95 % interval of (tokens / time) of the speculative run over the baseline's.
    The run's iterations (tokens, ms) and the baseline's steps (``base_ms``, one token each, or
    ``base_tokens`` each: a batch's step emits one per active row) are resampled with replacement; each side's
    fixed part (prefill: ``fixed_ms``; the baseline's ``base_fixed_ms`` carrying ``base_fixed_tokens``) is added
    to every resample. Deterministic for a given seed."""
    if not iter_ms or not base_ms or len(iter_tokens) != len(iter_ms):
        raise ValueError("need iterations (tokens and times alike) and baseline token times")
    if base_tokens is not None and len(base_tokens) != len(base_ms):
        raise ValueError("need one token count per baseline step")
    tok, ms, bms = (np.asarray(x, dtype=float) for x in (iter_tokens, iter_ms, base_ms))
    btok = np.ones(len(bms)) if base_tokens is None else np.asarray(base_tokens, dtype=float)
    n, n_base = len(ms), len(bms)

    def ratio(picks: np.ndarray, base: np.ndarray, axis: int = -1) -> np.ndarray:
        spec = _total(tok[picks], n, axis) / (fixed_ms + _total(ms[picks], n, axis))
        return spec / ((base_fixed_tokens + _total(btok[base], n_base, axis))
                       / (base_fixed_ms + _total(bms[base], n_base, axis)))

    # each side's sample is its steps' indices (an iteration's tokens and time are resampled together, and so are
    # a baseline step's); scipy resamples only samples of two or more, so one observation goes in twice (its
    # resamples are all itself either way) and ``_total`` counts it once
    res = stats.bootstrap((_twice_if_one(np.arange(n)), _twice_if_one(np.arange(n_base))), ratio, n_resamples=samples,
                          vectorized=True, method="percentile", confidence_level=0.95,
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _twice_if_one(sample: np.ndarray) -> np.ndarray:
    return np.repeat(sample, 2) if len(sample) == 1 else sample


def _total(resampled: np.ndarray, n: int, axis: int) -> np.ndarray:
    """The sum over a resample, counted as ``n`` observations (a doubled one-observation sample: half)."""
    return resampled.sum(axis) * (n / resampled.shape[axis])


def verdict(interval: Interval | None) -> str:
    """The plain-words verdict: "pays here: ×1.42 (95 % CI 1.31–1.53, <method>)", "does not pay here: …",
    or "can't tell yet — run more tokens: …" (straddling ×1, or too small a sample)."""
    if interval is None:
        return CANT_TELL
    head = CANT_TELL
    if interval.enough and interval.low > 1.0:
        head = "pays here"
    elif interval.enough and interval.high < 1.0:
        head = "does not pay here"
    return f"{head}: {describe(interval)}"


def describe(interval: Interval) -> str:
    """"×1.42 (95 % CI 1.31–1.53, bootstrap over iterations)"."""
    small = "" if interval.enough else "; too few to decide"
    return (f"×{interval.point:.2f} (95 % CI {interval.low:.2f}–{interval.high:.2f}, "
            f"{interval.method}{small})")


# --- read off a trace -------------------------------------------------------------------------------

def acceptance_interval(trace: Trace) -> tuple[float, float]:
    """Wilson 95 % interval of the run's acceptance rate (accepted / drafted)."""
    return wilson(trace.stats.accepted, trace.stats.drafted)


def position_intervals(trace: Trace) -> list[tuple[int, int, float, float]]:
    """Per draft position (0-based): (tested, accepted, Wilson low, Wilson high) of the conditional
    acceptance (accepted among the j-th drafts that were tested)."""
    width = max((len(it.drafts) for it in trace.iterations), default=0)
    out = []
    for j in range(width):
        ds = [it.drafts[j] for it in trace.iterations if len(it.drafts) > j and it.drafts[j].tested]
        acc = sum(d.accepted for d in ds)
        out.append((len(ds), acc, *wilson(acc, len(ds))))
    return out


def speedup_interval(trace: Trace) -> Interval | None:
    """The measured speedup (tokens/s over the same run's baseline's) with its bootstrap interval over
    iterations; None without a baseline."""
    b, st = trace.baseline, trace.stats
    if (b is None or not b.token_ms or not trace.iterations or b.tokens_per_s <= 0 or st.tokens_per_s <= 0
            or b.wall_ms <= 0):
        return None
    ms = [it.catchup_ms + sum(it.draft_ms) + it.verify_ms + it.other_ms for it in trace.iterations]
    tokens = [len(it.emitted) for it in trace.iterations]
    fixed = max(0.0, st.wall_ms - sum(ms))
    if len(b.token_ms) > 1:     # the first baseline token carries the prefill: a fixed part
        lo, hi = bootstrap_speedup(tokens, ms, fixed, b.token_ms[1:], b.token_ms[0], 1)
    else:
        lo, hi = bootstrap_speedup(tokens, ms, fixed, b.token_ms, 0.0)
    point = st.tokens_per_s / b.tokens_per_s
    enough = len(trace.iterations) >= MIN_ITERATIONS and len(b.token_ms) >= MIN_BASELINE_TOKENS
    return Interval(point, min(lo, point), max(hi, point), BOOTSTRAP, enough)


def batch_speedup_interval(trace: Trace) -> Interval | None:
    """A batched run's pooled speedup (all rows' tokens/s over the batched baseline's, ``BatchStats.speedup``)
    with a bootstrap interval over its forwards: each batch iteration (the tokens every row emitted in it, its
    draft, verify and host time) and each baseline step (one token per row still decoding, its time) resampled;
    the prefills kept fixed (the baseline's first step, which holds its prefill, with its tokens). None without a
    batch, its baseline or a forward. Enough for a verdict from ``MIN_ITERATIONS`` forwards and
    ``MIN_BASELINE_TOKENS`` baseline steps."""
    batch = trace.batch
    if batch is None or batch.baseline is None or not batch.forwards or batch.stats.speedup <= 0:
        return None
    rows, base = trace.rows(), batch.baseline
    if len(base.step_ms) < 2 or any(r.baseline is None for r in rows):
        return None
    # rows only leave a batch: a row's i-th iteration is the batch's i-th forward, its baseline's s-th token step s
    tokens = [sum(len(r.iterations[i].emitted) for r in rows if len(r.iterations) > i)
              for i in range(len(batch.forwards))]
    ms = [sum(f.draft_ms) + f.verify_ms + f.other_ms for f in batch.forwards]
    step_tokens = [sum(len(r.baseline.new_token_ids) > s for r in rows) for s in range(len(base.step_ms))]
    lo, hi = bootstrap_speedup(tokens, ms, max(0.0, batch.stats.wall_ms - sum(ms)), base.step_ms[1:],
                               base.step_ms[0], step_tokens[0], base_tokens=step_tokens[1:])
    point = batch.stats.speedup
    enough = len(batch.forwards) >= MIN_ITERATIONS and len(base.step_ms) >= MIN_BASELINE_TOKENS
    return Interval(point, min(lo, point), max(hi, point), BOOTSTRAP_FORWARDS, enough)


def fill_stats(trace: Trace) -> Trace:
    """Write the intervals into ``trace.stats`` (acceptance_ci; with a baseline also speedup, speedup_ci,
    speedup_ci_method and verdict) and return the trace."""
    st = trace.stats
    st.acceptance_ci = list(acceptance_interval(trace))
    iv = speedup_interval(trace)
    st.speedup = iv.point if iv else 0.0
    st.speedup_ci = iv.to_list() if iv else []
    st.speedup_ci_method = iv.method if iv else ""
    st.verdict = verdict(iv) if iv else ""
    return trace
