"""The chi-square power calculation that sizes the exactness tests, checked against simulation, and the exact
first-token laws under the planted bugs checked against the verify rule run by hand."""
import numpy as np
import pytest
from scipy.stats import chisquare

from specdec_core.stats.power import chi2_power, effect_size, first_token_law, pooled_chi_square, sample_size

P0 = np.array([0.5, 0.3, 0.15, 0.04, 0.01])
P1 = np.array([0.56, 0.27, 0.13, 0.03, 0.01])


def simulated_power(p0, p1, n, alpha, trials, rng):
    """The fraction of ``trials`` tests of n draws from p1 against p0 that reject at alpha (the tests' pooling)."""
    counts = rng.multinomial(n, p1, size=trials)
    return float(np.mean([pooled_chi_square(c, n * p0)[1] < alpha for c in counts]))


@pytest.mark.parametrize("alpha,power", [(0.01, 0.9), (1e-3, 0.99)])
def test_sample_size_gives_the_power_in_simulation(alpha, power):
    n = sample_size(P0, P1, alpha, power)
    assert n is not None and chi2_power(P0, P1, n, alpha) >= power > chi2_power(P0, P1, n - 1, alpha)
    rng = np.random.default_rng(0)
    trials = 4000
    seen = simulated_power(P0, P1, n, alpha, trials, rng)
    slack = 3 * np.sqrt(power * (1 - power) / trials) + 0.02   # the noncentral approximation's error included
    assert abs(seen - power) < slack, f"n = {n}: simulated power {seen:.3f}, computed {power}"
    half = simulated_power(P0, P1, n // 2, alpha, trials, rng)
    assert half < power - 0.1, f"half the sample should lose power, simulated {half:.3f}"


def test_no_effect_has_no_sample_size_and_a_new_cell_is_found_at_once():
    assert sample_size(P0, P0, 1e-3, 0.99) is None
    assert effect_size(np.array([0.5, 0.5, 0.0]), np.array([0.5, 0.4, 0.1])) == float("inf")


def by_hand(p, q, drawn, from_p):
    """The verify rule for one draft, enumerated: x ~ drawn, accepted w.p. min(1, p/q), else the replacement."""
    law = np.zeros_like(p)
    residual = np.maximum(p - q, 0)
    residual = p if from_p else residual / residual.sum()
    for x, dx in enumerate(drawn):
        acc = min(1.0, p[x] / q[x]) if q[x] > 0 else 0.0
        law[x] += dx * acc
        law += dx * (1 - acc) * residual
    return law


def test_first_token_laws_match_the_rule_enumerated():
    rng = np.random.default_rng(1)
    for _ in range(20):
        p, q, drawn = (rng.dirichlet(np.ones(6)) for _ in range(3))
        assert np.allclose(first_token_law(p, q), p)                      # the exact rule: p itself
        assert np.allclose(first_token_law(p, q, drawn_from=drawn), by_hand(p, q, drawn, False))
        assert np.allclose(first_token_law(p, q, replacement_from_p=True), by_hand(p, q, q, True))
        point = np.eye(6)[rng.integers(6)]                                 # a point-mass draft (n-gram)
        assert np.allclose(first_token_law(p, point), p)
        assert np.allclose(first_token_law(p, point, replacement_from_p=True), by_hand(p, point, point, True))


def test_pooled_chi_square_pools_small_bins_like_the_textbook():
    observed = np.array([50.0, 30.0, 15.0, 3.0, 2.0, 0.0])
    expected = np.array([48.0, 32.0, 14.0, 3.5, 1.5, 1.0])
    stat, p, dof = pooled_chi_square(observed, expected)
    ref = chisquare([50, 30, 15, 5], [48, 32, 14, 6])            # the three small bins pooled into one of 6
    assert stat == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue) and dof == 3


def test_pooled_chi_square_merges_a_too_small_pool_and_handles_a_point_mass():
    stat, p, dof = pooled_chi_square(np.array([96.0, 2.0, 2.0]), np.array([96.0, 2.0, 2.0]))
    assert dof == 0 and p is None                                  # 2 + 2 < 5 merged into the one big bin
    stat, p, dof = pooled_chi_square(np.array([100.0]), np.array([100.0]))
    assert p is None and dof == 0
