"""The shipped trained drafts on the bundled target (slow: real model): they load offline, keep greedy
output identical to target-only greedy (ours, and for the token-only draft transformers' assisted
generation), and really disagree with the target (some drafts accepted, some rejected)."""
from __future__ import annotations

import pytest
import torch

from specdec_core import (FeatureDrafter, SpecConfig, baseline_generate, encode_prompt, load_bundled_draft,
                          load_feature_draft, speculative_generate)

pytestmark = pytest.mark.slow

PROMPTS = ("Write a short paragraph about lighthouses.", "What should everyone know about snowflakes?",
           "Give me three tips for learning to cook.")


@pytest.fixture(scope="module")
def draft(bundled):
    return load_bundled_draft(bundled[0])


@pytest.mark.parametrize("which", ["token", "feature"])
def test_trained_drafts_keep_greedy_equality_and_really_disagree(bundled, draft, which):
    model, tok = bundled
    chosen = draft if which == "token" else load_feature_draft(model)
    drafted = accepted = 0
    for prompt in PROMPTS:
        ids = encode_prompt(tok, prompt)
        cfg = SpecConfig(k=4, temperature=0.0, max_new_tokens=24)
        tr = speculative_generate(model, chosen, ids, cfg, tokenizer=tok)
        assert tr.new_token_ids == baseline_generate(model, ids, cfg, tok).new_token_ids, prompt
        drafted, accepted = drafted + tr.stats.drafted, accepted + tr.stats.accepted
    assert 0 < accepted < drafted
    if which == "feature":
        assert tr.config["drafter"] == "feature draft" and isinstance(chosen.make_drafter(), FeatureDrafter)


def test_trained_draft_as_transformers_assistant(bundled, draft):
    model, tok = bundled
    x = torch.tensor([encode_prompt(tok, PROMPTS[0])])
    ref = model.generate(input_ids=x, max_new_tokens=16, do_sample=False)
    out = model.generate(input_ids=x, max_new_tokens=16, do_sample=False, assistant_model=draft)
    assert out[0].tolist() == ref[0].tolist()
    logits = draft(input_ids=x).logits
    assert logits.shape[-1] == 49152 and torch.isinf(logits).any()   # full vocabulary, q = 0 off the draft head


def test_feature_draft_with_the_confidence_stop_is_accepted_more_often_and_stays_exact(bundled):
    """Fixed K = 4 with the recommended confidence stop on held-out prompts: the draft
    stops after its confidence falls, so far more of what it offers is accepted; it still offers a draft in
    every iteration; greedy output unchanged."""
    from specdec_core.config import RECOMMENDED_CONFIDENCE_STOP
    from specdec_core.training.prompts import heldout_prompts
    model, tok = bundled
    draft = load_feature_draft(model)
    counts = {0.0: [0, 0], RECOMMENDED_CONFIDENCE_STOP: [0, 0]}
    for prompt in heldout_prompts(4, seed=5):
        ids = encode_prompt(tok, prompt)
        base = baseline_generate(model, ids, SpecConfig(max_new_tokens=32), tok).new_token_ids
        for stop, c in counts.items():
            tr = speculative_generate(model, draft, ids, SpecConfig(k=4, max_new_tokens=32, confidence_stop=stop),
                                      tokenizer=tok)
            assert tr.new_token_ids == base, (prompt, stop)
            assert all(it.drafts for it in tr.iterations if it.k > 0), (prompt, stop)
            c[0], c[1] = c[0] + tr.stats.accepted, c[1] + tr.stats.drafted
    plain, stopped = (a / d for a, d in counts.values())
    assert stopped >= 0.3 and stopped > plain + 0.12, counts
