"""Coupled sampling on the bundled SmolLM2 target with the real drafters: at temperature 0.8 the speculative
output equals the coupled target-only output token for token, for the feature-reading draft (default run), the
token-only draft, prompt lookup and the target drafting for itself, as chains and as token trees (slow)."""
from __future__ import annotations

import pytest

from specdec_core import (NGramDrafter, SpecConfig, Trace, baseline_generate, encode_prompt, load_bundled_draft,
                          load_feature_draft, speculative_generate)
from specdec_core.drafters.model import ModelDrafter

PROMPT = "Write a short paragraph about lighthouses. Lighthouses guide ships; lighthouses guide ships."


def _drafter(which: str, model):
    if which == "feature":
        return load_feature_draft(model)
    if which == "token":
        return load_bundled_draft(model)
    if which == "self":
        return ModelDrafter(model, name="self")
    return NGramDrafter()


def _cfg(**extra) -> SpecConfig:
    return SpecConfig(k=4, temperature=0.8, top_p=0.95, max_new_tokens=24, seed=5, sampler="coupled", **extra)


@pytest.fixture(scope="module")
def coupled_baseline(bundled):
    model, tok = bundled
    ids = encode_prompt(tok, PROMPT)
    return ids, baseline_generate(model, ids, _cfg(), tok).new_token_ids


@pytest.mark.slow
@pytest.mark.parametrize("which, tree", [("feature", False), ("token", False), ("lookup", False), ("self", False),
                                         ("feature", True), ("token", True), ("lookup", True)])
def test_coupled_output_equals_the_coupled_baseline(bundled, coupled_baseline, which, tree):
    model, tok = bundled
    ids, base = coupled_baseline
    cfg = _cfg(tree_nodes=8, tree_top_k=3) if tree else _cfg()
    tr = speculative_generate(model, _drafter(which, model), ids, cfg, tokenizer=tok)
    assert tr.new_token_ids == base
    assert tr.stats.accepted > 0 and Trace.from_dict(tr.to_dict()).new_token_ids == base
    if tree:
        trees = [it.tree for it in tr.iterations if it.tree is not None]
        assert trees and all(t.rule == "coupled" for t in trees)
