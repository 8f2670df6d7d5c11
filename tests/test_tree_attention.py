"""Tree attention (models/tree_attention.py): one forward over a token tree gives, at every node, the
logits of a chain forward over the root-to-node path; keeping the accepted path in the cache leaves it
as if only that path had been fed."""
from __future__ import annotations

import pytest
import torch

from specdec_core.models.kv_cache import new_kv_cache
from specdec_core.models.tree_attention import keep_rows, tree_feed, tree_positions, visibility
from tests.conftest import make_tiny_lm

PARENTS = [-1, -1, 0, 0, 1, 2, 2, 4, -1]        # three children of the root, depth up to 4
TOKENS = [11, 12, 13, 14, 15, 16, 17, 18, 19]


def _path(parents: list[int], node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


def test_visibility_and_positions_by_hand():
    vis = visibility([-1, 0, -1], n_chain=2)
    assert vis.int().tolist() == [[1, 0, 0, 0, 0],
                                  [1, 1, 0, 0, 0],
                                  [1, 1, 1, 0, 0],
                                  [1, 1, 1, 1, 0],
                                  [1, 1, 0, 0, 1]]
    assert tree_positions([-1, 0, -1], n_chain=2, past_len=5) == [5, 6, 7, 8, 7]
    feed = tree_feed([-1, 0, -1], n_chain=2, past_len=3)
    assert feed.attention_mask.shape == (1, 1, 5, 8)
    assert (feed.attention_mask[0, 0, :, :3] == 0).all()
    assert ((feed.attention_mask[0, 0, :, 3:] == 0) == vis).all()


@pytest.mark.parametrize("parents,n_chain", [([0], 1), ([-1, 1], 1), ([-1], 0), ([-1, True], 1)])
def test_bad_trees_are_refused(parents, n_chain):
    with pytest.raises(ValueError):
        tree_feed(parents, n_chain, 0)


def _tree_vs_chains(model, cache_factory, prefix, chain, parents, tokens, atol):
    """Feed prefix (cached), then chain + tree in one forward; compare every node's and chain token's logits
    with a plain forward over prefix + chain + the node's path."""
    dtype = next(model.parameters()).dtype
    with torch.inference_mode():
        cache = cache_factory()
        model(input_ids=torch.tensor([prefix]), past_key_values=cache, use_cache=True)
        feed = tree_feed(parents, len(chain), len(prefix), dtype)
        out = model(input_ids=torch.tensor([chain + tokens]), past_key_values=cache, use_cache=True,
                    attention_mask=feed.attention_mask, position_ids=feed.position_ids, logits_to_keep=0).logits[0]
        full = model(input_ids=torch.tensor([prefix + chain])).logits[0]
        assert torch.allclose(out[:len(chain)], full[len(prefix):], atol=atol, rtol=0)
        for i in range(len(tokens)):
            seq = prefix + chain + [tokens[j] for j in _path(parents, i)]
            ref = model(input_ids=torch.tensor([seq])).logits[0, -1]
            assert torch.allclose(out[len(chain) + i], ref, atol=atol, rtol=0), f"node {i}"
    return cache


def _keep_path_then_continue(model, cache, prefix, chain, parents, tokens, node, atol):
    """Keep the path to ``node`` (and drop its last entry, as the engine does when the new token is not yet
    fed), feed the next token: its logits equal a plain forward's over the whole kept sequence."""
    path = _path(parents, node)
    base = len(prefix) + len(chain)
    keep_rows(cache, [base + i for i in path], base, base + len(path))
    kept = prefix + chain + [tokens[i] for i in path]
    assert cache.get_seq_length() == len(kept)
    with torch.inference_mode():
        nxt = model(input_ids=torch.tensor([[7]]), past_key_values=cache, use_cache=True).logits[0, -1]
        ref = model(input_ids=torch.tensor([kept + [7]])).logits[0, -1]
    assert torch.allclose(nxt, ref, atol=atol, rtol=0)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("growing", [True, False])
def test_tiny_model_tree_forward_and_keep(impl, growing):
    from transformers import DynamicCache
    model = make_tiny_lm(vocab_size=32, layers=2, hidden=32)
    model.config._attn_implementation = impl
    factory = (lambda: new_kv_cache(model.config)) if growing else (lambda: DynamicCache(config=model.config))
    prefix, chain = [1, 2, 3, 4], [5, 6]
    cache = _tree_vs_chains(model, factory, prefix, chain, PARENTS, TOKENS, 1e-5)
    _keep_path_then_continue(model, cache, prefix, chain, PARENTS, TOKENS, node=7, atol=1e-5)


def test_keep_rows_of_the_root_only_and_refusals():
    model = make_tiny_lm(vocab_size=32, layers=1, hidden=32)
    cache = _tree_vs_chains(model, lambda: new_kv_cache(model.config), [1, 2], [3], [-1, -1], [4, 5], 1e-5)
    with pytest.raises(ValueError):
        keep_rows(cache, [4, 3], 3, 4)           # not increasing
    with pytest.raises(ValueError):
        keep_rows(cache, [4], 3, 5)              # length past the kept rows
    keep_rows(cache, [], 3, 3)                   # no node accepted: the prefix and the root stay
    assert cache.get_seq_length() == 3


@pytest.mark.slow
def test_bundled_model_tree_forward_equals_chain_forwards(bundled):
    model, tok = bundled
    prefix = tok.encode("The capital of France is Paris. The capital of")
    chain = tok.encode(" Spain")
    tokens = tok.encode(" is Madrid, and the capital of Italy is Rome or Milan")[:len(PARENTS)]
    assert len(tokens) == len(PARENTS)
    cache = _tree_vs_chains(model, lambda: new_kv_cache(model.config), prefix, chain, PARENTS, tokens, 1e-4)
    _keep_path_then_continue(model, cache, prefix, chain, PARENTS, tokens, node=5, atol=1e-4)


def test_target_keep_path_leaves_cache_and_features_as_a_chain_forward():
    """TargetModel: a tree forward then keep_path gives the same cache and features (for a feature-reading
    draft) as feeding the chain and the accepted path plainly."""
    from specdec_core.decoding.target import TargetModel
    model = make_tiny_lm(vocab_size=32, layers=2, hidden=32)
    ids = [1, 2, 3, 4, 5]
    tree, chain = TargetModel(model, keep_features=True), TargetModel(model, keep_features=True)
    tree.forward(ids[:-2])
    tree.tree_forward(ids, TOKENS, PARENTS)
    path = _path(PARENTS, 7)
    tree.keep_path(path, len(ids) + len(path))
    chain.forward(ids[:-2])
    chain.forward(ids + [TOKENS[i] for i in path])
    assert tree.cache_len == chain.cache_len == tree.cache.get_seq_length()
    assert (tree.features_from, tree.features.shape) == (chain.features_from, chain.features.shape)
    assert torch.allclose(tree.features, chain.features, atol=1e-5)
    for a, b in zip(tree.cache.layers, chain.cache.layers):
        assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_the_presets_architectures_take_the_tree_mask(arch, impl):
    """The hub presets' families (GPT-2: learned absolute positions; Qwen2) read the mask and positions alike."""
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    if arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                           bos_token_id=0, eos_token_id=0))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64))
    model.eval().config._attn_implementation = impl
    cache = _tree_vs_chains(model, lambda: new_kv_cache(model.config), [1, 2, 3, 4], [5, 6], PARENTS, TOKENS, 1e-5)
    _keep_path_then_continue(model, cache, [1, 2, 3, 4], [5, 6], PARENTS, TOKENS, node=6, atol=1e-5)
