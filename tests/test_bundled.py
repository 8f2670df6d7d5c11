"""The bundled SmolLM2-135M-Instruct (offline): greedy equality, chat template, tokenizer checks, CLI."""
import json
import os
import subprocess
import sys

import pytest

from specdec_core import (ModelDrafter, NGramDrafter, SpecConfig, Trace, baseline_generate, check_tokenizer_compat,
                          encode_prompt, speculative_generate)
from specdec_core.cli import main

EXTRACTIVE = ("Repeat the following text exactly: The mitochondria is the powerhouse of the cell. "
              "It produces energy through respiration.")


@pytest.mark.parametrize("drafter", ["ngram", pytest.param("self", marks=pytest.mark.slow)])
def test_greedy_speculative_equals_baseline(bundled, drafter):
    model, tok = bundled
    ids = encode_prompt(tok, EXTRACTIVE)
    cfg = SpecConfig(k=4, temperature=0.0, max_new_tokens=16)
    draft = NGramDrafter() if drafter == "ngram" else ModelDrafter(model)
    trace = speculative_generate(model, draft, ids, cfg, tok)
    base = baseline_generate(model, ids, cfg, tok)
    assert trace.new_token_ids == base.new_token_ids
    assert trace.text == base.text and "mitochondria" in trace.text
    assert trace.stats.accepted > 0
    if drafter == "self":
        assert trace.stats.acceptance_rate == 1.0   # q == p: nothing is ever rejected
    else:
        assert trace.stats.target_forwards < base.target_forwards
    assert all(d.text for it in trace.iterations for d in it.drafts)


def test_sampling_trace_on_bundled_model(bundled):
    model, tok = bundled
    ids = encode_prompt(tok, "Write one sentence about the sea.")
    cfg = SpecConfig(k=3, temperature=0.8, top_p=0.95, max_new_tokens=16, seed=7)
    trace = speculative_generate(model, NGramDrafter(), ids, cfg, tok)
    assert Trace.from_dict(json.loads(json.dumps(trace.to_dict()))).new_token_ids == trace.new_token_ids
    assert trace.config["dtype"] == "float32" and trace.config["device"] == "cpu"


def test_chat_template_and_raw_prompt(bundled):
    _, tok = bundled
    chat = encode_prompt(tok, "Hello there")
    raw = encode_prompt(tok, "Hello there", chat=False)
    text = tok.decode(chat)
    assert text.startswith("<|im_start|>system") and text.rstrip().endswith("<|im_start|>assistant")
    assert tok.decode(raw) == "Hello there"
    with pytest.raises(ValueError, match="prompt is empty"):
        encode_prompt(tok, "   ")


def test_tokenizer_compatibility_check(bundled):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    _, tok = bundled
    check_tokenizer_compat(tok, tok)
    vocab = {f"w{i}": i for i in range(100)}
    small = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    small.pre_tokenizer = pre_tokenizers.Whitespace()
    other = PreTrainedTokenizerFast(tokenizer_object=small, unk_token="w0")
    with pytest.raises(ValueError, match="'vocab size' failed"):
        check_tokenizer_compat(tok, other)
    swapped = {k: (1 if v == 2 else 2 if v == 1 else v) for k, v in vocab.items()}
    a = PreTrainedTokenizerFast(tokenizer_object=small, unk_token="w0", eos_token="w2")
    b_tok = Tokenizer(models.WordLevel(swapped, unk_token="w0"))
    b_tok.pre_tokenizer = pre_tokenizers.Whitespace()
    b = PreTrainedTokenizerFast(tokenizer_object=b_tok, unk_token="w0", eos_token="w2")
    with pytest.raises(ValueError, match="'special tokens' failed"):
        check_tokenizer_compat(a, b)
    words = {**vocab, "Hello": 50, "world": 51}
    words.pop("w50"), words.pop("w51")
    c_tok = Tokenizer(models.WordLevel({**words, "Hello": 51, "world": 50}, unk_token="w0"))
    c_tok.pre_tokenizer = pre_tokenizers.Whitespace()
    a_tok = Tokenizer(models.WordLevel(words, unk_token="w0"))
    a_tok.pre_tokenizer = pre_tokenizers.Whitespace()
    a = PreTrainedTokenizerFast(tokenizer_object=a_tok, unk_token="w0", eos_token="w2")
    c = PreTrainedTokenizerFast(tokenizer_object=c_tok, unk_token="w0", eos_token="w2")
    with pytest.raises(ValueError, match="'tokenization' failed on probe 'Hello, world!'"):
        check_tokenizer_compat(a, c)


@pytest.mark.parametrize("argv,message", [
    (["--prompt", "hi", "--k", "0"], "K must be between 1 and 16"),
    (["--prompt", "hi", "--temperature", "-1"], "temperature must be between 0 (greedy) and 2"),
    (["--prompt", "hi", "--top-p", "0"], "top-p must be in (0, 1]"),
    (["--prompt", "hi", "--top-k", "-3"], "top-k must be between 0 (off) and 1000000"),
    (["--prompt", "hi", "--max-new-tokens", "100000"], "max new tokens must be between 1 and 512"),
    (["--prompt", "   "], "The prompt is empty"),
    (["--prompt", "hi", "--draft", "../../etc/passwd"], "not a valid Hugging Face model id"),
])
def test_cli_bad_input_exits_2_without_traceback(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "specdec_core", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_cli_failed_download_is_plain(monkeypatch, capsys):
    import specdec_core.models.loading as models
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)    # as offline (HF_HUB_OFFLINE=1)
    assert main(["--prompt", "hi", "--target", "some-org/not-a-model"]) == 2
    err = capsys.readouterr().err
    assert "could not load 'some-org/not-a-model'" in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_end_to_end_offline_with_baseline(tmp_path):
    """``python -m specdec_core`` in a fresh process. Fixed K: the default cost-aware policy would first calibrate
    the target in that process (about 60 forwards, half this test's time); the CLI's defaults, and a run with
    them, are checked in test_api.py."""
    out = tmp_path / "trace.json"
    r = run_cli("--prompt", EXTRACTIVE, "--baseline", "--max-new-tokens", "12", "--k-policy", "fixed",
                "--json", str(out), env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert "mitochondria" in r.stdout and "output identical to baseline: yes" in r.stdout
    for label in ("acceptance:", "tokens/iteration", "forwards: target", "tokens/s (measured)", "speedup:"):
        assert label in r.stdout
    assert "Converting" not in r.stderr
    trace = Trace.from_dict(json.loads(out.read_text()))
    assert trace.baseline is not None and trace.baseline.new_token_ids == trace.new_token_ids
    assert trace.config["k_policy"] == "fixed"


def test_hub_model_without_network_fails_fast_and_plainly(monkeypatch):
    import specdec_core.models.loading as models
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(RuntimeError, match="cannot be reached"):
        models.load_model("some-org/not-cached-model")
    with pytest.raises(ValueError, match="not a valid Hugging Face model id"):
        models.load_model("../../etc", allow_local=False)
