"""Closed-form theory, checked against direct enumeration and a simulation."""
import random

import pytest

from specdec_core.policy.closed_form import (approximate_speedup, break_even_alpha, estimate_alpha, estimate_c,
    expected_tokens, optimal_k, speedup)


def enumerate_expected(alpha: float, k: int) -> float:
    """E[tokens] = sum over n accepted of P(n) * (n + 1): n < k has prob alpha^n (1 - alpha), n = k alpha^k."""
    return sum(alpha ** n * (1 - alpha) * (n + 1) for n in range(k)) + alpha ** k * (k + 1)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_expected_tokens_matches_enumeration(alpha, k):
    assert expected_tokens(alpha, k) == pytest.approx(enumerate_expected(alpha, k))


def test_expected_tokens_matches_simulation():
    rng = random.Random(0)
    alpha, k, n = 0.7, 4, 200_000
    total = 0
    for _ in range(n):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        total += accepted + 1
    assert total / n == pytest.approx(expected_tokens(alpha, k), rel=0.01)


def test_speedup_and_edges():
    assert expected_tokens(1.0, 4) == 5 and expected_tokens(0.0, 4) == 1
    assert speedup(0.8, 4, 0.0) == pytest.approx(expected_tokens(0.8, 4))
    assert speedup(1.0, 4, 1.0) == pytest.approx(1.0)          # self-drafting never wins
    assert speedup(0.8, 4, 0.1) == pytest.approx(expected_tokens(0.8, 4) / 1.4)
    with pytest.raises(ValueError):
        expected_tokens(1.2, 3)
    with pytest.raises(ValueError):
        speedup(0.5, 3, -0.1)


def test_optimal_k_and_break_even():
    assert optimal_k(0.0, 0.1, 16) == 1
    assert optimal_k(1.0, 0.0, 16) == 16
    k = optimal_k(0.8, 0.05, 16)
    assert all(speedup(0.8, k, 0.05) >= speedup(0.8, j, 0.05) for j in range(1, 17))
    a = break_even_alpha(4, 0.2)
    assert 0 < a < 1 and speedup(a, 4, 0.2) == pytest.approx(1.0, abs=1e-6)
    assert break_even_alpha(4, 1.0) == 1.0 and break_even_alpha(4, 0.0) == 0.0


def test_approximation_differs_from_exact():
    # the approximation counts alpha*k accepted drafts: it misses the token emitted on rejection
    assert approximate_speedup(0.5, 4, 0.0) != pytest.approx(speedup(0.5, 4, 0.0))
    assert approximate_speedup(1.0, 4, 0.1) == pytest.approx(speedup(1.0, 4, 0.1))


def test_estimators_from_trace():
    from specdec_core.trace import DraftRecord, IterationRecord, Trace
    d = lambda a, acc, tested=True: DraftRecord(0, "", 0.5, 0.5 * a, a, 0.1 if tested else None, acc, tested)  # noqa: E731
    its = [IterationRecord(0, 3, 2, [d(1.0, True), d(0.5, False)], None, None, [0, 1], [2.0, 2.0], 10.0, 1.0),
           IterationRecord(1, 5, 2, [d(0.0, False), d(0.9, False, tested=False)], None, None, [1], [3.0, 1.0], 30.0,
                           1.0)]
    trace = Trace(config={}, prompt="", prompt_ids=[1, 2, 3], iterations=its)
    assert estimate_alpha(trace) == pytest.approx(0.5)          # untested drafts are not counted
    assert estimate_c(trace) == pytest.approx(2.0 / 20.0)
    assert estimate_alpha(Trace(config={}, prompt="", prompt_ids=[1])) is None
