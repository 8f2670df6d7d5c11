"""The shipped trained draft on the bundled target (slow: real model): it loads offline, keeps greedy
output identical to target-only greedy (ours and transformers' assisted generation), and really disagrees
with the target (some drafts accepted, some rejected)."""
from __future__ import annotations

import pytest
import torch

from specdec_core import SpecConfig, baseline_generate, encode_prompt, load_bundled_draft, speculative_generate

pytestmark = pytest.mark.slow

PROMPTS = ("Write a short paragraph about lighthouses.", "What should everyone know about snowflakes?",
           "Give me three tips for learning to cook.")


@pytest.fixture(scope="module")
def draft(bundled):
    return load_bundled_draft(bundled[0])


def test_trained_draft_greedy_equality_and_real_disagreement(bundled, draft):
    model, tok = bundled
    drafted = accepted = 0
    for prompt in PROMPTS:
        ids = encode_prompt(tok, prompt)
        cfg = SpecConfig(k=4, temperature=0.0, max_new_tokens=24)
        tr = speculative_generate(model, draft, ids, cfg, tokenizer=tok)
        assert tr.new_token_ids == baseline_generate(model, ids, cfg, tok).new_token_ids, prompt
        drafted, accepted = drafted + tr.stats.drafted, accepted + tr.stats.accepted
    assert 0 < accepted < drafted


def test_trained_draft_as_transformers_assistant(bundled, draft):
    model, tok = bundled
    x = torch.tensor([encode_prompt(tok, PROMPTS[0])])
    ref = model.generate(input_ids=x, max_new_tokens=16, do_sample=False)
    out = model.generate(input_ids=x, max_new_tokens=16, do_sample=False, assistant_model=draft)
    assert out[0].tolist() == ref[0].tolist()
    logits = draft(input_ids=x).logits
    assert logits.shape[-1] == 49152 and torch.isinf(logits).any()   # full vocabulary, q = 0 off the draft head
