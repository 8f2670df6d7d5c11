"""The sampling math on hand-built logits: warping, accept/reject, residual."""
import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

from specdec_core.sampling import (acceptance_probs, first_rejection, point_mass, residual_distribution, sample,
                                   warp_logits)


def hf_warp(logits, temperature, top_k, top_p):
    scores = logits.clone().unsqueeze(0)
    scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_k > 0:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores.softmax(-1)[0]


LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 3.0, 0.2, -0.5, 1.5, 0.1])


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 3, 1.0), (0.7, 0, 0.8), (1.3, 5, 0.6), (0.9, 1, 1.0), (1.0, 0, 0.05)])
def test_warp_matches_transformers_warpers(temperature, top_k, top_p):
    ours = warp_logits(LOGITS, temperature, top_k, top_p)
    assert torch.allclose(ours, hf_warp(LOGITS, temperature, top_k, top_p), atol=1e-6)
    assert abs(float(ours.sum()) - 1) < 1e-6


def test_warp_order_temperature_before_top_p():
    # top-p=0.5 keeps only token 5 at temperature 0.25 (very peaked) but tokens 5 and 0 at temperature 4:
    # the nucleus is taken on the tempered distribution, as transformers does.
    cold = warp_logits(LOGITS, 0.25, 0, 0.5)
    hot = warp_logits(LOGITS, 4.0, 0, 0.5)
    assert (cold > 0).sum() == 1 and cold[5] == 1
    assert (hot > 0).sum() > 1


def test_greedy_is_one_hot_argmax():
    p = warp_logits(LOGITS, 0.0)
    assert p[5] == 1 and p.sum() == 1


def test_top_k_keeps_exactly_k():
    p = warp_logits(LOGITS, 1.0, top_k=3)
    assert set(torch.nonzero(p).flatten().tolist()) == {5, 0, 8}


def test_acceptance_deterministic_cases():
    p = torch.tensor([0.1, 0.6, 0.3])
    q = torch.tensor([0.5, 0.2, 0.3])
    alpha = acceptance_probs(p, q)
    assert torch.allclose(alpha, torch.tensor([0.2, 1.0, 1.0]))
    # accept iff u < alpha: u = 0.19 accepts token 0, u = 0.2 rejects it
    assert first_rejection(torch.tensor([0.19, 0.99, 0.5]), alpha) == 3
    assert first_rejection(torch.tensor([0.2, 0.0, 0.0]), alpha) == 0
    assert first_rejection(torch.tensor([0.0, 0.999, 1.0]), torch.tensor([0.5, 1.0, 0.7])) == 2


def test_hand_built_ten_token_reject_then_accept():
    # A draft favouring token 5 where the target favours token 8: token 5 is rejected at u = 0.5,
    # token 8 would be accepted with certainty (p > q).
    target = warp_logits(torch.tensor([0., 0, 0, 0, 0, 1, 0, 0, 4, 0]), 1.0)
    draft = warp_logits(torch.tensor([0., 0, 0, 0, 0, 4, 0, 0, 1, 0]), 1.0)
    alpha = acceptance_probs(target[[5, 8]], draft[[5, 8]])
    assert alpha[0] < 0.1 and alpha[1] == 1.0
    assert first_rejection(torch.tensor([0.5]), alpha[:1]) == 0
    res = residual_distribution(target, draft)
    assert res[5] == 0 and res.argmax() == 8 and abs(float(res.sum()) - 1) < 1e-6


def test_residual_distribution():
    p = torch.tensor([0.1, 0.6, 0.3])
    q = torch.tensor([0.5, 0.2, 0.3])
    assert torch.allclose(residual_distribution(p, q), torch.tensor([0.0, 1.0, 0.0]))
    p2 = torch.tensor([0.2, 0.5, 0.3])
    q2 = torch.tensor([0.4, 0.3, 0.3])
    assert torch.allclose(residual_distribution(p2, q2), torch.tensor([0.0, 1.0, 0.0]))
    p3 = torch.tensor([0.3, 0.3, 0.4])
    q3 = torch.tensor([0.1, 0.2, 0.7])
    assert torch.allclose(residual_distribution(p3, q3), torch.tensor([2 / 3, 1 / 3, 0.0]))


def test_residual_zero_mass_guard_returns_p_not_nan():
    p = torch.tensor([0.25, 0.75])
    res = residual_distribution(p, p.clone())
    assert not torch.isnan(res).any() and torch.allclose(res, p)


def test_point_mass_residual_is_p_without_x():
    p = torch.tensor([0.2, 0.5, 0.3])
    res = residual_distribution(p, point_mass(1, 3))
    assert torch.allclose(res, torch.tensor([0.4, 0.0, 0.6]))
    assert torch.allclose(acceptance_probs(p[[1]], torch.ones(1)), torch.tensor([0.5]))


@pytest.mark.parametrize("probs", [
    [0.5, 0.0, 0.2, 0.3, 0.0],                 # zero mass inside and at the end
    [0.0, 0.0, 1.0, 0.0, 0.0],                 # a point mass
    [3.0, 1.0, 0.0, 0.0, 2.0],                 # unnormalised: drawn in proportion to the mass
    [1e-6, 0.999999, 0.0, 0.0, 0.0]])
def test_sample_draws_in_proportion_and_never_a_zero(probs):
    p = torch.tensor(probs)
    n = 40_000
    draws = sample(p.expand(n, -1), torch.Generator().manual_seed(3))
    assert draws.shape == (n,) and draws.dtype == torch.long
    counts = torch.bincount(draws, minlength=len(probs)).double()
    assert (counts[p == 0] == 0).all()
    mass = p[p > 0].double() / p.sum()
    if len(mass) > 1 and mass.min() * n >= 5:
        assert chisquare(counts[p > 0].numpy(), (mass * n).numpy()).pvalue > 1e-3


def test_sample_shapes_seeds_and_a_big_vocabulary():
    probs = torch.softmax(torch.randn(2, 3, 49_152, generator=torch.Generator().manual_seed(0)), -1)
    a = sample(probs, torch.Generator().manual_seed(7))
    assert a.shape == (2, 3)
    assert torch.equal(a, sample(probs, torch.Generator().manual_seed(7)))
    last_only = torch.zeros(49_152)
    last_only[-1] = 1.0
    assert int(sample(last_only, None)) == 49_151
