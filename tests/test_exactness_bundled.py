"""Slow: statistical exactness on the bundled SmolLM2 with the n-gram drafter (point-mass q) and with
the shipped feature-reading draft (a real q ≠ p over a truncated vocabulary), top-k sampling, first two
tokens against the enumerated target distribution; a broken engine must fail. 1,200 runs a test, about a quarter
of an hour each on 2 cores: `make test-long`."""
from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specdec_core import (InjectedBugs, NGramDrafter, SpecConfig, encode_prompt, load_feature_draft,
                          speculative_generate)
from specdec_core.sampling import warp_logits

PROMPT = "Repeat exactly: red green blue red green blue red green"
N = 600
SETTINGS = dict(temperature=1.0, top_k=4, top_p=1.0)


@torch.inference_mode()
def exact_joint(model, ids):
    p1 = warp_logits(model(input_ids=torch.tensor([ids])).logits[0, -1], **SETTINGS)
    joint = {}
    for t1 in torch.nonzero(p1).flatten().tolist():
        p2 = warp_logits(model(input_ids=torch.tensor([ids + [t1]])).logits[0, -1], **SETTINGS)
        for t2 in torch.nonzero(p2).flatten().tolist():
            joint[(t1, t2)] = float(p1[t1] * p2[t2])
    return joint


def p_value(model, ids, joint, bugs, draft=None):
    counts = Counter()
    for seed in range(N):
        cfg = SpecConfig(k=3, max_new_tokens=3, seed=seed, full_trace=False, **SETTINGS)
        tr = speculative_generate(model, NGramDrafter() if draft is None else draft, ids, cfg, bugs=bugs)
        counts[tuple(tr.new_token_ids[:2])] += 1
    assert set(counts) <= set(joint), "generated a pair with zero target probability"
    cells = list(joint)
    exp = np.array([joint[c] * N for c in cells])
    obs = np.array([counts.get(c, 0) for c in cells], dtype=float)
    big = exp >= 5
    if exp[~big].sum() > 0:   # pool the rare cells into one bin
        obs, exp = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    else:
        obs, exp = obs[big], exp[big]
    return chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


@pytest.mark.long
def test_bundled_ngram_exact_and_bug_caught(bundled):
    model, tok = bundled
    ids = encode_prompt(tok, PROMPT, chat=False)
    joint = exact_joint(model, ids)
    exact, broken = p_value(model, ids, joint, InjectedBugs()), p_value(model, ids, joint, InjectedBugs(resample_from_p=True))
    assert exact > 1e-3 and broken < 1e-6, f"p-values: correct engine {exact:.3g}, resample-from-p {broken:.3g}"


@pytest.mark.long
def test_bundled_feature_draft_exact_and_bug_caught(bundled):
    model, tok = bundled
    draft = load_feature_draft(model)
    ids = encode_prompt(tok, "Tell me about the ocean.", chat=True)
    joint = exact_joint(model, ids)
    exact = p_value(model, ids, joint, InjectedBugs(), draft)
    # the bug a model draft invites: drafts drawn from one q (temperature 2) while the ratio uses another.
    # (resample-from-p is too weak a control here: at this prompt's first tokens p and q overlap a lot;
    # measured p = 0.011 with N = 600.)
    broken = p_value(model, ids, joint, InjectedBugs(draft_temperature=2.0), draft)
    assert exact > 1e-3 and broken < 1e-6, f"p-values: correct engine {exact:.3g}, mismatched draft q {broken:.3g}"
