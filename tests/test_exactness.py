"""Statistical exactness: the first two (or three) generated tokens, over thousands of seeds, follow the exact
target distribution (enumerated from the target model). The same test must FAIL on deliberately
broken variants of the engine, which proves it has the power to catch those bugs.

The verification step itself is tested exactly, by enumeration, in test_verify.py. Here the whole engine
(drafter, KV caches, rollback) runs: the default suite keeps one such run (warped sampling) and one bug
control; the other settings run in the slow suite (``make test-slow``)."""
import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from conftest import make_tiny_lm
from specdec_core import InjectedBugs, NGramDrafter, SpecConfig, speculative_generate
from specdec_core.sampling import warp_logits

VOCAB = 6
PROMPT = [1, 2, 3, 1, 2]   # the n-gram drafter finds "1 2" -> proposes "3 1 ..."
N_RUNS = 2500


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    return make_tiny_lm(vocab_size=VOCAB, seed=1, scale=10.0), make_tiny_lm(vocab_size=VOCAB, seed=2, scale=10.0)


@torch.inference_mode()
def exact_first_tokens(target, prompt, temperature, top_k, top_p, length: int = 2) -> np.ndarray:
    """P(t1, …, t_length) = p(t1 | prompt) · p(t2 | prompt, t1) · …, warped as the engine warps: an array
    with one axis per token."""
    def p_next(ids):
        return warp_logits(target(input_ids=torch.tensor([ids])).logits[0, -1], temperature, top_k, top_p).numpy()
    joint = np.zeros((VOCAB,) * length)
    for head in itertools.product(range(VOCAB), repeat=length - 1):
        prob, ids = 1.0, list(prompt)
        for t in head:
            prob *= p_next(ids)[t]
            ids.append(t)
            if prob == 0:
                break
        if prob > 0:
            joint[head] = prob * p_next(ids)
    return joint


def empirical_first_tokens(target, draft_factory, k, temperature, top_k, top_p, bugs=InjectedBugs(), n=N_RUNS,
                           drafted: Counter | None = None, length: int = 2, **extra):
    """Counts of the first ``length`` generated tokens over n seeds (``drafted``, if given, also counts how
    many tokens the first iteration drafted)."""
    counts = Counter()
    for seed in range(n):
        cfg = SpecConfig(k=k, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=length + 1,
                         seed=seed, full_trace=False, **extra)
        trace = speculative_generate(target, draft_factory(), PROMPT, cfg, bugs=bugs)
        counts[tuple(trace.new_token_ids[:length])] += 1
        if drafted is not None:
            drafted[len(trace.iterations[0].drafts)] += 1
    return counts


def chi_square_p(counts: Counter, joint: np.ndarray, n: int) -> tuple[float, float]:
    """(p-value, total variation distance); cells with expected count < 5 are pooled into one bin."""
    cells = list(itertools.product(range(VOCAB), repeat=joint.ndim))
    expected = np.array([joint[c] * n for c in cells])
    observed = np.array([counts.get(c, 0) for c in cells], dtype=float)
    assert observed.sum() == n
    assert observed[expected == 0].sum() == 0, "a token with zero target probability was generated"
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    tv = 0.5 * np.abs(observed / n - expected / n).sum()
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue), float(tv)


SETTINGS = {
    "plain": dict(temperature=1.0, top_k=0, top_p=1.0),
    "warped": dict(temperature=0.7, top_k=4, top_p=0.9),
}


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["plain", "warped"])
def test_model_draft_is_exact(models, setting):
    target, draft = models
    s = SETTINGS[setting]
    joint = exact_first_tokens(target, PROMPT, **s)
    counts = empirical_first_tokens(target, lambda: draft, k=2, **s)
    p, tv = chi_square_p(counts, joint, N_RUNS)
    assert p > 1e-3, f"{setting}: chi-square p={p:.2e}, TV={tv:.3f}"


@pytest.mark.slow
def test_model_draft_with_confidence_stop_is_exact(models):
    """Stopping on the draft's own confidence (``drafters.chain_confidence``) reads q only, so the output
    stays exact. The stop after draft j decides whether draft j + 1 is offered; after the first draft that
    depends on the prompt alone, after the second on the first draw. So the test drafts K = 3 and checks
    the first THREE tokens, at a threshold where the first iteration drafts two tokens or three depending
    on that draw: the stop really varies within the runs (checked)."""
    target, draft = models
    s = SETTINGS["plain"]
    drafted = Counter()
    counts = empirical_first_tokens(target, lambda: draft, k=3, drafted=drafted, confidence_stop=0.1, length=3, **s)
    assert drafted[2] > 100 and drafted[3] > 100, drafted
    p, tv = chi_square_p(counts, exact_first_tokens(target, PROMPT, length=3, **s), N_RUNS)
    assert p > 1e-3, f"confidence stop: chi-square p={p:.2e}, TV={tv:.3f}"


@pytest.mark.slow
def test_ngram_draft_is_exact(models):
    target, _ = models
    s = SETTINGS["plain"]
    joint = exact_first_tokens(target, PROMPT, **s)
    counts = empirical_first_tokens(target, NGramDrafter, k=2, **s)
    p, tv = chi_square_p(counts, joint, N_RUNS)
    assert p > 1e-3, f"n-gram: chi-square p={p:.2e}, TV={tv:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["resample_from_p", "greedy_draft_ratio_rule"])
def test_broken_variants_are_caught(models, bug):
    """Power control: the same test rejects an engine with a classic bug."""
    target, draft = models
    s = SETTINGS["plain"]
    joint = exact_first_tokens(target, PROMPT, **s)
    counts = empirical_first_tokens(target, lambda: draft, k=2, bugs=InjectedBugs(**{bug: True}), **s)
    p, tv = chi_square_p(counts, joint, N_RUNS)
    assert p < 1e-6, f"the bug '{bug}' went undetected: p={p:.2e}, TV={tv:.3f}"
