"""The power of a chi-square exactness test, and the sample that gives it.

An exactness test draws N first tokens from the engine and compares their counts with the target's warped
distribution p (Pearson's chi-square, rare cells pooled into one bin: ``pooled_chi_square``, which the
exactness lab uses too). A planted bug moves the first token's
law from p to some P'; with N draws the statistic is then about noncentral chi-square with noncentrality
λ = N · Σ (P' − p)² / p (Cohen's w² = λ / N), which gives the test's power at level α and, inverted, the
smallest N that detects the bug with a chosen power. ``first_token_law`` gives P' exactly from p and q for
the bugs that change the first token: the replacement drawn from p instead of the residual, and drafts drawn
from a q other than the one in the ratio (``bugs.InjectedBugs``).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import chi2, chisquare, ncx2

MIN_EXPECTED = 5.0   # cells expected fewer times than this are pooled into one bin (the tests' rule)


def first_token_law(p: np.ndarray, q: np.ndarray, drawn_from: np.ndarray | None = None,
                    replacement_from_p: bool = False) -> np.ndarray:
    """The law of the first emitted token when a draft x ~ ``drawn_from`` (default q) is accepted with
    probability min(1, p(x)/q(x)) and otherwise replaced by a draw from norm(max(0, p − q)) (or from p with
    ``replacement_from_p``). With the defaults it is p itself: the rule is exact."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    drawn = q if drawn_from is None else np.asarray(drawn_from, float)
    ratio = np.divide(p, q, out=np.zeros_like(p), where=q > 0)
    accepted = drawn * np.minimum(1.0, ratio)
    residual = np.maximum(0.0, p - q)
    replacement = p if replacement_from_p or residual.sum() == 0 else residual / residual.sum()
    return accepted + (1.0 - accepted.sum()) * replacement


def pool(observed: np.ndarray, expected: np.ndarray,
         min_expected: float = MIN_EXPECTED) -> tuple[np.ndarray, np.ndarray]:
    """The bins a chi-square test keeps: every bin of expected count < ``min_expected`` pooled into one (and
    that pool merged into the smallest kept bin if it is itself too small)."""
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    big = expected >= min_expected
    obs, exp = list(observed[big]), list(expected[big])
    pool_o, pool_e = float(observed[~big].sum()), float(expected[~big].sum())
    if pool_e > 0:
        if pool_e >= min_expected or not exp:
            obs.append(pool_o)
            exp.append(pool_e)
        else:
            j = int(np.argmin(exp))
            obs[j] += pool_o
            exp[j] += pool_e
    return np.asarray(obs, float), np.asarray(exp, float)


def pooled_chi_square(observed: np.ndarray, expected: np.ndarray,
                      min_expected: float = MIN_EXPECTED) -> tuple[float | None, float | None, int]:
    """Chi-square goodness of fit over the bins ``pool`` keeps (expected rescaled to the observed total).
    Returns (statistic, p-value, degrees of freedom); (None, None, 0) when fewer than two bins remain."""
    obs, exp = pool(observed, expected, min_expected)
    if len(exp) < 2:
        return None, None, 0
    res = chisquare(obs, exp * obs.sum() / exp.sum())
    return float(res.statistic), float(res.pvalue), len(exp) - 1


def pooled(p0: np.ndarray, p1: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(p0, p1) over the bins a test of n draws keeps (``pool`` with expected counts n·p0)."""
    mass1, exp0 = pool(p1, n * np.asarray(p0, float))
    return exp0 / n, mass1


def effect_size(p0: np.ndarray, p1: np.ndarray) -> float:
    """Cohen's w²: Σ (p1 − p0)² / p0 over the cells where p0 > 0 (mass of p1 outside them counts as found)."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    if np.any((p0 == 0) & (p1 > 0)):
        return math.inf
    keep = p0 > 0
    return float(np.sum((p1[keep] - p0[keep]) ** 2 / p0[keep]))


def chi2_power(p0: np.ndarray, p1: np.ndarray, n: int, alpha: float) -> float:
    """Probability that the chi-square test of n draws from p1 against p0 rejects at level alpha."""
    c0, c1 = pooled(p0, p1, n)
    df = len(c0) - 1
    if df < 1:
        return 0.0
    w2 = effect_size(c0, c1)
    if math.isinf(w2):
        return 1.0
    return float(ncx2.sf(chi2.isf(alpha, df), df, n * w2))


def sample_size(p0: np.ndarray, p1: np.ndarray, alpha: float, power: float, n_max: int = 10 ** 7) -> int | None:
    """The smallest n whose chi-square test detects p1 against p0 with at least ``power`` at level ``alpha``
    (the pooling at that n included); None when even n_max does not (p1 too close to p0)."""
    if chi2_power(p0, p1, n_max, alpha) < power:
        return None
    lo, hi = 1, n_max            # the power grows with n (λ is linear in n; pooling only changes at a few n)
    while lo < hi:
        mid = (lo + hi) // 2
        if chi2_power(p0, p1, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo

