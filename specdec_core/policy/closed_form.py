"""Closed-form expectations for speculative decoding (Leviathan et al. 2023, section 3).

alpha: the expected acceptance probability of one draft token, E[min(1, p(x)/q(x))];
k: draft tokens per iteration; c: cost of one draft forward divided by one target forward.
The often-quoted (alpha*k + beta)/(k*c + 1) is only an approximation (``approximate_speedup``); these are
the exact formulas under the i.i.d.-acceptance assumption."""
from __future__ import annotations

from ..trace import Trace


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens emitted per iteration: (1 - alpha^(k+1)) / (1 - alpha); k+1 at alpha = 1."""
    _check(alpha, k)
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def speedup(alpha: float, k: int, c: float) -> float:
    """Expected wall-time speedup over target-only decoding: expected_tokens / (c*k + 1)."""
    if c < 0:
        raise ValueError(f"c must be >= 0, got {c}")
    return expected_tokens(alpha, k) / (c * k + 1.0)


def optimal_k(alpha: float, c: float, k_max: int = 16) -> int:
    """The k in 1..k_max with the highest expected speedup (the smallest such k on ties)."""
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    return max(range(1, k_max + 1), key=lambda k: (speedup(alpha, k, c), -k))


def break_even_alpha(k: int, c: float) -> float:
    """The alpha at which speedup(alpha, k, c) = 1; above it speculation pays. 1.0 if it never does
    (c*k >= k, i.e. c >= 1), 0.0 when even alpha = 0 breaks even (c = 0)."""
    if speedup(1.0, k, c) <= 1.0:
        return 1.0
    if speedup(0.0, k, c) >= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # speedup is increasing in alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speedup(mid, k, c) < 1.0 else (lo, mid)
    return (lo + hi) / 2


def approximate_speedup(alpha: float, k: int, c: float) -> float:
    """The approximation (alpha*k + beta)/(k*c + 1) with beta = alpha^k found in some write-ups. It counts
    alpha*k accepted drafts, as if a rejection did not end the iteration, and omits the token emitted
    on rejection. Shown next to the exact formula for comparison only."""
    _check(alpha, k)
    return (alpha * k + alpha ** k) / (c * k + 1.0)


def estimate_alpha(trace: Trace) -> float | None:
    """Mean of min(1, p/q) over the drafts that were tested: an unbiased, low-variance estimate of
    alpha (each tested draft's alpha is its acceptance probability; under coupled sampling the coupled rule's
    ``coupled_alpha`` is, and is used: ``DraftRecord.accept_prob``). Chain iterations only: a token tree's
    drafts are its accepted path, which would bias the mean up."""
    alphas = [d.accept_prob for it in trace.iterations if it.tree is None for d in it.drafts if d.tested]
    return sum(alphas) / len(alphas) if alphas else None


def estimate_c(trace: Trace) -> float | None:
    """Mean draft forward time / mean target verify time, both measured in this run."""
    draft = [ms for it in trace.iterations for ms in it.draft_ms]
    verify = [it.verify_ms for it in trace.iterations if it.drafts]
    if not draft or not verify or sum(verify) <= 0:
        return None
    return (sum(draft) / len(draft)) / (sum(verify) / len(verify))


def _check(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
