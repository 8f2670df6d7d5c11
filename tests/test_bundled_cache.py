"""The bundled model's converted copy: the same weights, config and tokenizer as the GGUF read, and a cache
that survives damage, concurrency leftovers and an unwritable location."""
from __future__ import annotations

import os
import time

import pytest
import torch

from conftest import make_tiny_lm
from specdec_core.models import bundled_cache
from specdec_core.models.loading import BUNDLED_GGUF, bundled_model_dir, encode_prompt, read_bundled_gguf

TEXTS = ("Repeat the following text exactly: The mitochondria is the powerhouse of the cell.",
         "  leading spaces, tabs\tand\nnew lines\n\n", "ünïcödé, 日本語, emoji 🙂, code: def f(x): return x**2",
         "<|im_start|>user\nspecial tokens typed as text<|im_end|>")


def _never():
    raise AssertionError("converted again although the cache holds the entry")


def test_the_cached_copy_equals_the_gguf_read(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    folder = bundled_model_dir()
    gguf = os.path.join(folder, BUNDLED_GGUF)
    direct, direct_tok = read_bundled_gguf(folder)
    assert bundled_cache.load_converted(gguf, lambda: (direct, direct_tok))[0] is direct
    cached, tok = bundled_cache.load_converted(gguf, _never)
    assert cached is not direct and os.listdir(tmp_path) == [bundled_cache.entry_name(gguf)]

    a, b = direct.state_dict(), cached.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    assert cached.lm_head.weight.data_ptr() == cached.model.embed_tokens.weight.data_ptr()  # still tied
    ca, cb = direct.config.to_dict(), cached.config.to_dict()
    assert {k for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k)} == {"quantization_config"}
    assert direct.generation_config.to_dict() == cached.generation_config.to_dict()

    assert len(tok) == len(direct_tok) and tok.get_vocab() == direct_tok.get_vocab()
    assert tok.all_special_tokens == direct_tok.all_special_tokens and tok.chat_template == direct_tok.chat_template
    for text in TEXTS:
        assert tok.encode(text) == direct_tok.encode(text)
        ids = encode_prompt(tok, text)
        assert ids == encode_prompt(direct_tok, text)
        assert tok.decode(ids) == direct_tok.decode(ids)
    ids = torch.tensor([encode_prompt(tok, TEXTS[0])])
    with torch.no_grad():
        assert torch.equal(direct(ids).logits, cached(ids).logits)


@pytest.fixture
def small(tmp_path, monkeypatch, bundled):
    """A stand-in GGUF file and a converter that counts its calls (a tiny model with the bundled tokenizer)."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"not really a GGUF file, only hashed")
    calls = []

    def convert():
        calls.append(1)
        return make_tiny_lm(), bundled[1]
    return str(gguf), convert, calls


def test_one_conversion_then_reads(small):
    gguf, convert, calls = small
    first = bundled_cache.load_converted(gguf, convert)[0]
    second = bundled_cache.load_converted(gguf, convert)[0]
    assert len(calls) == 1 and second is not first
    assert second.config._name_or_path == os.path.dirname(gguf)
    assert all(torch.equal(first.state_dict()[k], v) for k, v in second.state_dict().items())


def test_a_damaged_entry_is_converted_again(small):
    gguf, convert, calls = small
    bundled_cache.load_converted(gguf, convert)
    weights = os.path.join(bundled_cache.cache_root(), bundled_cache.entry_name(gguf), "model.safetensors")
    with open(weights, "r+b") as f:
        f.truncate(100)
    bundled_cache.load_converted(gguf, convert)
    assert len(calls) == 2
    bundled_cache.load_converted(gguf, convert)  # rewritten whole: read again, not converted
    assert len(calls) == 2


def test_a_new_entry_replaces_older_ones_and_what_a_killed_writer_left(small):
    gguf, convert, calls = small
    root = bundled_cache.cache_root()
    os.makedirs(os.path.join(root, bundled_cache.PREFIX + "0123456789abcdef-transformers-0.0"))
    os.makedirs(os.path.join(root, "someone-elses-folder"))
    for name, age in ((".writing-killed", 7200), (".writing-live", 60)):  # a killed writer's leftover, a live one
        os.makedirs(os.path.join(root, name))
        os.utime(os.path.join(root, name), (time.time() - age, time.time() - age))
    model, tok = bundled_cache.load_converted(gguf, convert)
    entry = os.path.join(root, bundled_cache.entry_name(gguf))
    with pytest.raises(OSError):  # a second writer of the same entry (another process converting at once)
        bundled_cache._write(entry, model, tok)
    assert sorted(os.listdir(root)) == sorted([bundled_cache.entry_name(gguf), "someone-elses-folder", ".writing-live"])
    assert bundled_cache.load_converted(gguf, convert) and len(calls) == 1


def test_an_unwritable_cache_still_loads(small, tmp_path, monkeypatch):
    gguf, convert, calls = small
    blocker = tmp_path / "a-file-not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(blocker / "cache"))
    model, tok = bundled_cache.load_converted(gguf, convert)
    assert isinstance(model, torch.nn.Module) and tok is not None
    bundled_cache.load_converted(gguf, convert)
    assert len(calls) == 2


def test_the_location(monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", "/some/where")
    assert bundled_cache.cache_root() == "/some/where"
    monkeypatch.delenv("SPECDEC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert bundled_cache.cache_root() == "/xdg/speculative-decoding-explorer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert bundled_cache.cache_root() == "/home/someone/.cache/speculative-decoding-explorer"
