"""In-process drafts for the benchmark, built without any download: an early-exit draft sharing the
target's weights, and a random-weight pair of realistic shape."""
from __future__ import annotations

import copy

import torch


def early_exit_draft(target: torch.nn.Module, n_layers: int) -> torch.nn.Module:
    """A draft made of the target's first ``n_layers`` decoder layers + its final norm and LM head,
    sharing the weights (no copy). A real model of realistic shape whose cost ratio c is about
    n_layers / layers, built without any download. Works for Llama-style models (model.layers)."""
    inner = getattr(target, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(target, "lm_head"):
        raise ValueError("early_exit_draft needs a Llama-style causal LM (model.layers, model.norm, lm_head)")
    if not 1 <= n_layers < len(layers):
        raise ValueError(f"n_layers must be between 1 and {len(layers) - 1}, got {n_layers}")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types)[:n_layers]
    with torch.device("meta"):
        draft = type(target)(cfg)
    draft.model.embed_tokens = inner.embed_tokens
    draft.model.layers = torch.nn.ModuleList(list(layers[:n_layers]))
    draft.model.norm = inner.norm
    draft.model.rotary_emb = inner.rotary_emb
    draft.lm_head = target.lm_head
    leftovers = [n for n, t in list(draft.named_parameters()) + list(draft.named_buffers()) if t.is_meta]
    if leftovers:
        raise ValueError(f"early_exit_draft: unshared tensors left on 'meta': {leftovers[:3]}")
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.eval()


def tiny_realistic_pair(vocab_size: int, seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Random-weight Llama target (12 layers, hidden 256, GQA 4/2 heads) over the real vocabulary, and an
    early-exit draft of its first 2 layers: the shape of a real pair (c ~ 0.2 before the shared head),
    small enough to make per-iteration host overhead, not matrix math, the thing being measured."""
    from transformers import LlamaConfig, LlamaForCausalLM
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=768, num_hidden_layers=12,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                          tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
        target = LlamaForCausalLM(cfg).eval()
    finally:
        torch.random.set_rng_state(gen_state)
    return target, early_exit_draft(target, 2)
