"""Statistical exactness on the bundled SmolLM2 with the n-gram drafter (point-mass q) and with the shipped
feature-reading draft (a real q ≠ p over a truncated vocabulary), top-k sampling; a broken engine must fail.

- slow (every CI run): the first token against the target's warped p, with as many runs as a power calculation
  says detect the planted bug (``stats.power``: power 0.99 at p = 1e-3, the bug's first-token law computed
  exactly from this prompt's p and q); a few minutes on 2 cores.
- long (`make test-long`): the first two tokens against the enumerated joint, 1,200 runs a test, about a
  quarter of an hour each on 2 cores."""
from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specdec_core import (InjectedBugs, NGramDrafter, SpecConfig, encode_prompt, load_feature_draft,
                          speculative_generate)
from specdec_core.decoding.target import TargetModel
from specdec_core.drafters.base import DraftPolicy
from specdec_core.sampling import warp_logits
from specdec_core.stats.power import first_token_law, pooled_chi_square, sample_size

PROMPT = "Repeat exactly: red green blue red green blue red green"
N = 600
SETTINGS = dict(temperature=1.0, top_k=4, top_p=1.0)
ALPHA, POWER = 1e-3, 0.99
K = 3
N_BUDGET = 1000        # runs an arm may take in CI (about 2 minutes); a prompt that needs more is a weak control


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


# --- sized by power: the first token, every CI run ------------------------------------------------------

@torch.inference_mode()
def first_p_and_q(model, drafter, ids, draft_temperature=None):
    """The target's warped p and the drafter's q for the first generated token, the engine's prefill replayed
    (a feature draft reads the target's features of the prompt); q drawn at ``draft_temperature`` if given."""
    reads = bool(getattr(drafter, "reads_features", False))
    tgt = TargetModel(model, keep_features=reads)
    drafter.start(ids)
    tgt.forward(ids[:-1])
    if reads:
        drafter.observe_features(tgt.features_from, tgt.features)
    temperature = SETTINGS["temperature"] if draft_temperature is None else draft_temperature
    prop = drafter.propose(ids, 1, DraftPolicy(temperature, SETTINGS["top_k"], SETTINGS["top_p"],
                                               torch.Generator().manual_seed(0)))
    p = warp_logits(tgt.forward(ids)[-1], **SETTINGS).double().numpy()
    assert prop.tokens, "the drafter proposed nothing at this prompt: no bug can show"
    q = (np.eye(len(p))[prop.tokens[0]] if prop.draft_probs is None else prop.draft_probs[0].double().numpy())
    return p, q


def first_token_p_value(model, make_drafter, ids, p, n, bugs):
    counts = np.zeros(len(p))
    for seed in range(n):      # K + 1 new tokens: the engine drafts K only where K + 1 tokens remain
        cfg = SpecConfig(k=K, max_new_tokens=K + 1, seed=seed, full_trace=False, **SETTINGS)
        counts[speculative_generate(model, make_drafter(), ids, cfg, bugs=bugs).new_token_ids[0]] += 1
    assert counts[p == 0].sum() == 0, "generated a first token with zero target probability"
    return pooled_chi_square(counts, n * p)[1]


def sized_check(model, make_drafter, ids, law_under_bug, bugs):
    p, q = first_p_and_q(model, make_drafter(), ids)
    n = sample_size(p, law_under_bug(p, q), ALPHA, POWER)
    assert n is not None and n <= N_BUDGET, f"the planted bug needs {n} runs at this prompt (budget {N_BUDGET})"
    exact = first_token_p_value(model, make_drafter, ids, p, n, InjectedBugs())
    broken = first_token_p_value(model, make_drafter, ids, p, n, bugs)
    assert exact > ALPHA and broken < ALPHA, (f"{n} runs (power {POWER} at p = {ALPHA}): correct engine "
                                              f"p = {exact:.3g}, {bugs.names()[0]} p = {broken:.3g}")


@pytest.mark.slow
def test_bundled_ngram_first_token_exact_sized_by_power(bundled):
    model, tok = bundled
    ids = encode_prompt(tok, PROMPT, chat=False)
    sized_check(model, NGramDrafter, ids, lambda p, q: first_token_law(p, q, replacement_from_p=True),
                InjectedBugs(resample_from_p=True))


@pytest.mark.slow
def test_bundled_feature_draft_first_token_exact_sized_by_power(bundled):
    model, tok = bundled
    draft = load_feature_draft(model)
    ids = encode_prompt(tok, "Write a short poem about rain.", chat=True)
    _, q_hot = first_p_and_q(model, draft.make_drafter(), ids, draft_temperature=2.0)
    sized_check(model, draft.make_drafter, ids, lambda p, q: first_token_law(p, q, drawn_from=q_hot),
                InjectedBugs(draft_temperature=2.0))
