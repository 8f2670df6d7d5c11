"""Shared fixtures: tiny in-process models (random weights, no downloads) and the bundled model."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import pytest
import torch

_SESSION_CACHE: list[str] = []


def pytest_configure(config):
    """The bundled model's converted copy (``specdec_core.models.bundled_cache``) goes to a folder of this test
    session, unless SPECDEC_CACHE_DIR names one: the session's first load reads the GGUF file, and every
    app, CLI and benchmark the tests start as a subprocess reads the converted copy."""
    if not os.environ.get("SPECDEC_CACHE_DIR"):
        _SESSION_CACHE.append(tempfile.mkdtemp(prefix="specdec-test-cache-"))
        os.environ["SPECDEC_CACHE_DIR"] = _SESSION_CACHE[0]


def pytest_unconfigure(config):
    for folder in _SESSION_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


def make_tiny_lm(vocab_size: int = 8, seed: int = 0, scale: float = 4.0, layers: int = 1, hidden: int = 16):
    """A tiny Llama causal LM with random weights. ``scale`` multiplies the output head so that the
    distributions are peaked enough to differ between seeds (target vs draft disagree)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


@pytest.fixture(scope="session")
def tiny_pair():
    """(target, draft): two different tiny models over the same 8-token vocabulary."""
    return make_tiny_lm(seed=1), make_tiny_lm(seed=2)


@pytest.fixture(scope="session")
def bundled():
    """(model, tokenizer) of the bundled SmolLM2-135M-Instruct, loaded once per test session."""
    from specdec_core import load_bundled_model
    return load_bundled_model("cpu")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: a second intra-op thread only adds overhead (and stalls badly on a busy CPU).
    Restores the previous thread count after the module, so model tests keep their threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@contextlib.contextmanager
def fault_on_forward(module: torch.nn.Module, n: int, exc: Exception):
    """Within the block, ``module``'s n-th forward call raises ``exc`` (a fault injected for a test)."""
    calls = {"n": 0}

    def fault(mod, args, kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
    handle = module.register_forward_pre_hook(fault, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
