"""A batch is exact: each row of a B = 4 batch (prompts of different lengths) draws its first two tokens from the
target's own distribution for its prompt (chi-square against the enumerated joint), with the n-gram, a model
draft and the feature-reading draft, under the standard and the coupled rule; rows with the same prompt are
independent (their joint law is the product). The planted bugs fail: the batch's cache cut with one row's length
(``batch_one_crop``) biases the longer rows, one random stream for every row (``batch_shared_uniforms``)
correlates them. The default suite keeps one run and one bug control; the rest is in the slow suite."""
import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from conftest import make_tiny_lm
from specdec_core import FeatureDraft, InjectedBugs, ModelDrafter, NGramDrafter, SpecConfig
from specdec_core.batch.engine import batch_generate
from test_exactness import VOCAB, chi_square_p, exact_first_tokens

# rows of different lengths; rows 1 and 2 share a prompt (the independence test reads them)
PROMPTS = [[2], [1, 2, 3, 1, 2], [1, 2, 3, 1, 2], [4, 5, 1, 2, 3, 4, 0, 1, 2]]
N_RUNS = 1500
PLAIN = dict(temperature=1.0, top_k=0, top_p=1.0)
WARPED = dict(temperature=0.7, top_k=4, top_p=0.9)
ALPHA = 1e-3 / len(PROMPTS)          # every row is tested: Bonferroni

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    target = make_tiny_lm(vocab_size=VOCAB, seed=1, scale=10.0, layers=2, hidden=32)   # reads its context
    return target, make_tiny_lm(vocab_size=VOCAB, seed=2, scale=10.0), FeatureDraft(target, 0, torch.arange(VOCAB - 1))


def drafter_of(models, name):
    target, draft, feature = models
    return {"ngram": NGramDrafter, "model": lambda: ModelDrafter(draft), "feature": lambda: feature.make_drafter()}[name]


def batch_samples(target, factory, settings, n=N_RUNS, bugs=InjectedBugs(), sampler="standard", k=2):
    """Per row, its first two tokens in each of n batches, in run order (seeds 0, B, 2B, …: every row's unique)."""
    rows = [[] for _ in PROMPTS]
    for i in range(n):
        cfg = SpecConfig(k=k, max_new_tokens=3, seed=i * len(PROMPTS), full_trace=False, sampler=sampler, **settings)
        trace = batch_generate(target, factory(), PROMPTS, cfg, bugs=bugs)
        for samples, row in zip(rows, trace.rows()):
            samples.append(tuple(row.new_token_ids[:2]))
    return rows


def row_p_values(target, rows, settings):
    return [chi_square_p(Counter(samples), exact_first_tokens(target, prompt, **settings), len(samples))[0]
            for samples, prompt in zip(rows, PROMPTS)]


def independence_p(target, rows, settings):
    """Chi-square of rows 1 and 2's first tokens (one prompt) against the product of the exact marginal."""
    n = len(rows[1])
    counts = Counter((a[0], b[0]) for a, b in zip(rows[1], rows[2]))
    marginal = exact_first_tokens(target, PROMPTS[1], **settings).sum(axis=1)
    cells = list(itertools.product(range(VOCAB), repeat=2))
    expected = np.array([marginal[a] * marginal[b] * n for a, b in cells])
    observed = np.array([counts.get(c, 0) for c in cells], dtype=float)
    assert observed[expected == 0].sum() == 0, "a pair with zero probability was drawn"
    big = expected >= 5
    obs, exp = np.append(observed[big], observed[~big].sum()), np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def test_each_row_is_exact_and_rows_are_independent(models):
    target = models[0]
    rows = batch_samples(target, drafter_of(models, "model"), PLAIN)
    ps = row_p_values(target, rows, PLAIN)
    assert min(ps) > ALPHA, f"rows' chi-square p-values {ps}"
    assert independence_p(target, rows, PLAIN) > 1e-3


def test_one_crop_for_the_batch_is_caught(models):
    """Cut with the first (shortest) row's length, the longest row loses its context after the first iteration:
    K = 1, so its second token comes from the second iteration about half the time."""
    target = models[0]
    rows = batch_samples(target, drafter_of(models, "model"), PLAIN, n=800, bugs=InjectedBugs(batch_one_crop=True), k=1)
    ps = row_p_values(target, rows, PLAIN)
    assert ps[-1] < 1e-6, f"the batch's one crop went undetected: {ps}"


@pytest.mark.slow
def test_a_shared_random_stream_is_caught(models):
    target = models[0]
    rows = batch_samples(target, drafter_of(models, "model"), PLAIN, bugs=InjectedBugs(batch_shared_uniforms=True))
    assert min(row_p_values(target, rows, PLAIN)) > ALPHA     # each row alone stays exact ...
    assert independence_p(target, rows, PLAIN) < 1e-6          # ... but rows with one prompt are correlated


@pytest.mark.slow
@pytest.mark.parametrize("drafter,settings,sampler", [("model", "warped", "standard"), ("feature", "plain", "standard"),
                                                      ("model", "plain", "coupled"), ("ngram", "warped", "coupled")])
def test_rows_are_exact(models, drafter, settings, sampler):
    s = {"plain": PLAIN, "warped": WARPED}[settings]
    rows = batch_samples(models[0], drafter_of(models, drafter), s, sampler=sampler)
    ps = row_p_values(models[0], rows, s)
    assert min(ps) > ALPHA, f"{drafter}, {settings}, {sampler}: rows' p-values {ps}"
    assert independence_p(models[0], rows, s) > 1e-3
