"""Token trees on the bundled SmolLM2 target with the real drafters: greedy output with a tree equals
target-only greedy output, for both shipped trained drafts and prompt lookup, and the trees are really
used (a node other than the first child accepted somewhere). Sampling with a tree runs and its trace loads."""
from __future__ import annotations

import pytest

from specdec_core import (NGramDrafter, SpecConfig, Trace, baseline_generate, encode_prompt, load_bundled_draft,
                          load_feature_draft, speculative_generate)

PROMPTS = ("Write a short paragraph about lighthouses.",
           "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.")


def _drafter(which: str, model):
    if which == "feature":
        return load_feature_draft(model)
    if which == "token":
        return load_bundled_draft(model)
    return NGramDrafter()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["feature", "token", "lookup"])
def test_greedy_tree_equals_target_greedy(bundled, which):
    model, tok = bundled
    draft = _drafter(which, model)
    off_first_child = 0
    for prompt in PROMPTS if which != "feature" else PROMPTS[:1]:
        ids = encode_prompt(tok, prompt)
        cfg = SpecConfig(k=4, max_new_tokens=20, tree_nodes=10, tree_top_k=3)
        tr = speculative_generate(model, draft, ids, cfg, tokenizer=tok)
        assert tr.new_token_ids == baseline_generate(model, ids, cfg, tok).new_token_ids, prompt
        trees = [it.tree for it in tr.iterations if it.tree is not None]
        assert trees and all(t.rule == "greedy" for t in trees)
        off_first_child += sum(1 for t in trees for i in t.path
                               if [j for j, n in enumerate(t.nodes) if n.parent == t.nodes[i].parent][0] != i)
        Trace.from_dict(tr.to_dict())
    if which != "lookup":   # prompt lookup branches only where earlier continuations differ
        assert off_first_child > 0


@pytest.mark.slow
@pytest.mark.parametrize("which", ["feature", "token"])
def test_sampled_tree_on_the_bundled_model(bundled, which):
    model, tok = bundled
    ids = encode_prompt(tok, PROMPTS[0])
    cfg = SpecConfig(k=4, temperature=0.7, top_p=0.9, max_new_tokens=20, tree_nodes=8, tree_top_k=2, seed=3)
    tr = speculative_generate(model, _drafter(which, model), ids, cfg, tokenizer=tok)
    assert any(it.tree is not None for it in tr.iterations)
    assert Trace.from_dict(tr.to_dict()).new_token_ids == tr.new_token_ids
