"""The bundled model's converted copy: the same weights, config and tokenizer after a write and a read (in a
cache folder of the test's own; the conversion from the GGUF file itself, a 30 s read, in the slow suite), and
a cache that survives damage, concurrency leftovers and an unwritable location."""
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


def _assert_same_model(a_model, a_tok, b_model, b_tok):
    """Bit-equal weights (the head still tied to the embedding), the same config but the GGUF reader's
    quantization note, the same generation config, tokenizer and logits."""
    a, b = a_model.state_dict(), b_model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    assert b_model.lm_head.weight.data_ptr() == b_model.model.embed_tokens.weight.data_ptr()  # still tied
    ca, cb = a_model.config.to_dict(), b_model.config.to_dict()
    assert {k for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k)} <= {"quantization_config"}
    assert a_model.generation_config.to_dict() == b_model.generation_config.to_dict()

    assert len(b_tok) == len(a_tok) and b_tok.get_vocab() == a_tok.get_vocab()
    assert b_tok.all_special_tokens == a_tok.all_special_tokens and b_tok.chat_template == a_tok.chat_template
    for text in TEXTS:
        assert b_tok.encode(text) == a_tok.encode(text)
        ids = encode_prompt(b_tok, text)
        assert ids == encode_prompt(a_tok, text)
        assert b_tok.decode(ids) == a_tok.decode(ids)
    ids = torch.tensor([encode_prompt(b_tok, TEXTS[0])])   # > 16 tokens: the stock linear path on both
    with torch.no_grad():
        assert torch.equal(a_model(ids).logits, b_model(ids).logits)


@pytest.mark.slow
def test_a_written_entry_reads_back_equal(tmp_path, monkeypatch, bundled):
    """The session's bundled model (itself read from the persistent cache) written to a cache of this test
    and read back: the same model, without reading the GGUF file again."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    gguf = os.path.join(bundled_model_dir(), BUNDLED_GGUF)
    model, tok = bundled
    assert bundled_cache.load_converted(gguf, lambda: (model, tok))[0] is model
    cached, cached_tok = bundled_cache.load_converted(gguf, _never)
    assert cached is not model and os.listdir(tmp_path) == [bundled_cache.entry_name(gguf)]
    assert cached.config._name_or_path == bundled_model_dir()      # the identity of a GGUF load
    _assert_same_model(model, tok, cached, cached_tok)


@pytest.mark.slow
def test_the_cached_copy_equals_the_gguf_read(tmp_path, monkeypatch):
    """The conversion itself: the GGUF file read and dequantized by transformers (about 30 s), written,
    read back."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    folder = bundled_model_dir()
    gguf = os.path.join(folder, BUNDLED_GGUF)
    direct, direct_tok = read_bundled_gguf(folder)
    assert bundled_cache.load_converted(gguf, lambda: (direct, direct_tok))[0] is direct
    cached, tok = bundled_cache.load_converted(gguf, _never)
    assert cached is not direct and os.listdir(tmp_path) == [bundled_cache.entry_name(gguf)]
    _assert_same_model(direct, direct_tok, cached, tok)
    assert "quantization_config" in direct.config.to_dict() and "quantization_config" not in cached.config.to_dict()


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
