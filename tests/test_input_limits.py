"""One set of input limits (``specdec_core/limits.py``) behind every entrance: the same hostile value gets the
same refusal from the Live tab, a link, /generate, the Exactness lab, the Simulator, Draft comparison, K sweep,
the command line and ``advise``; a batch size (0, 10⁶, −1, 2.5, "abc", a batch with token trees, a batch whose
other row overflows the context) from the Live tab, a link, /generate and the command line. The context check runs
on a tiny target of few positions that shares the bundled tokenizer (no generation is needed to refuse)."""
from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from components.pages.links import parse_live_query
from components.pages.live import page_defaults, run_live
from components.pages.teaching.compare import run_compare
from components.pages.teaching.ksweep import run_ksweep
from components.pages.teaching.lab import run_lab
from components.pages.teaching.simulator import run_simulator
from components.serving.api import generate
from specdec_core import LoadedModel, limits

CONTEXT = 64                 # the tiny target's positions
SEED_MSG = "seed must be between 0 and 9007199254740991, got {}"
LONG = "x" * 30_000
LONG_MSG = "The prompt is 30000 characters long; the limit is 20000."


class TinyPool:
    """A pool whose "bundled" model is a tiny Llama with CONTEXT positions and the bundled tokenizer."""

    def __init__(self, model, tokenizer):
        self.lm = LoadedModel("bundled", "tiny (64 positions)", model, tokenizer, threading.Lock())

    def get(self, key: str, **_: object) -> LoadedModel:
        if key != "bundled":
            raise ValueError(f"no model {key!r} here")
        return self.lm

    def loaded(self) -> list[str]:
        return ["bundled"]


@pytest.fixture(scope="module")
def tiny_pool(bundled):
    from transformers import LlamaConfig, LlamaForCausalLM
    _, tok = bundled
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=CONTEXT)
    return TinyPool(LlamaForCausalLM(cfg).eval(), tok)


def _over_context(pool: TinyPool) -> tuple[str, str]:
    """A prompt that fits the character limit but not the tiny target's context."""
    prompt = ("one two three four five six seven eight nine ten " * 8).strip()
    n = len(pool.lm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                  add_generation_prompt=True)["input_ids"])
    assert CONTEXT < n < CONTEXT * 10
    return prompt, f"The prompt is {n} tokens; the model's context is {CONTEXT} tokens."


def _refusal(call: Callable[[], object]) -> str:
    """The message of the gr.Error a handler raises (consuming a streaming handler's first frame)."""
    with pytest.raises(gr.Error) as refused:
        out = call()
        if hasattr(out, "__next__"):
            next(out)
    return refused.value.message


# Each entrance as (prompt, seed) -> its refusal; every other value is valid and small.
ENTRANCES: dict[str, Callable[[TinyPool, str, int], str]] = {
    "live": lambda pool, prompt, seed: _refusal(lambda: run_live(
        pool, "bundled|ngram", prompt, 4, "fixed", 0.0, 0, 1.0, 16, seed, False, True, None)),
    "generate": lambda pool, prompt, seed: _refusal(lambda: generate(
        pool, prompt, pair="bundled|ngram", seed=seed, max_new_tokens=16)),
    "lab": lambda pool, prompt, seed: _refusal(lambda: run_lab(
        pool, "ngram", prompt, True, 0.5, 1, 4, 0.0, 0, 1.0, 10, seed, False, False, False, 1.0, False,
        progress=None)),
    "compare": lambda pool, prompt, seed: _refusal(lambda: run_compare(
        pool, "bundled", prompt, True, 4, 0.0, 16, seed, progress=None)),
    "ksweep": lambda pool, prompt, seed: _refusal(lambda: run_ksweep(
        pool, "bundled", "ngram", prompt, True, 2, 0.0, 16, seed, progress=None)),
    "simulator": lambda pool, prompt, seed: _refusal(lambda: run_simulator(
        0.5, prompt if prompt != OK_PROMPT else "the cat", 3, 1.0, 16, seed, False)),
}
OK_PROMPT = "Repeat: one two."


def _link(prompt: str, seed: int) -> str:
    link = parse_live_query({"prompt": [prompt], "seed": [str(seed)], "run": ["1"]}, page_defaults())
    assert link.settings is None and len(link.problems) == 1
    return link.problems[0]


@pytest.mark.parametrize("name", [*ENTRANCES, "link"])
@pytest.mark.parametrize("seed", [2**70, -1])
def test_a_seed_out_of_range_gets_the_same_refusal_everywhere(tiny_pool, name, seed):
    message = _link(OK_PROMPT, seed) if name == "link" else ENTRANCES[name](tiny_pool, OK_PROMPT, seed)
    assert message == SEED_MSG.format(seed)


@pytest.mark.parametrize("name", [*ENTRANCES, "link"])
def test_a_30000_character_prompt_gets_the_same_refusal_everywhere(tiny_pool, name):
    message = _link(LONG, 1) if name == "link" else ENTRANCES[name](tiny_pool, LONG, 1)
    assert message == LONG_MSG


@pytest.mark.parametrize("name", [n for n in ENTRANCES if n != "simulator"])
def test_a_prompt_beyond_the_targets_context_gets_the_same_refusal_everywhere(tiny_pool, name):
    """(The Simulator's toy pair has no context limit.) A link carries the prompt and the run it asks for is
    the Live tab's: refused there, in these words."""
    prompt, expected = _over_context(tiny_pool)
    assert ENTRANCES[name](tiny_pool, prompt, 1) == expected


def test_a_link_with_a_prompt_beyond_the_context_is_refused_by_the_run_it_asks_for(tiny_pool):
    prompt, expected = _over_context(tiny_pool)
    link = parse_live_query({"prompt": [prompt], "pair": ["bundled|ngram"], "max_new_tokens": ["16"],
                             "k_policy": ["fixed"], "run": ["1"]}, page_defaults())
    s = link.settings
    assert s is not None and link.run
    assert _refusal(lambda: run_live(tiny_pool, s.pair, s.prompt, s.k, s.k_policy, s.temperature, s.top_k, s.top_p,
                                     s.max_new_tokens, s.seed, False, s.chat, None)) == expected


def test_the_limits_are_the_library_config_too():
    """The seed bound is SpecConfig's as well (one number for a seed everywhere)."""
    from specdec_core import SpecConfig
    with pytest.raises(ValueError, match=r"^seed must be between 0 and 9007199254740991, got -1$"):
        SpecConfig(seed=-1)
    assert limits.check_seed(limits.MAX_SEED) == 2**53 - 1


def test_the_context_check_counts_the_new_tokens():
    limits.check_context(48, 16, 64)                 # exactly fits
    limits.check_context(10**6, 16, None)            # a model whose config does not say: not checked here
    with pytest.raises(limits.InputError, match=r"^The prompt is 49 tokens; with 16 new tokens that exceeds "
                                                r"the model's context of 64 tokens\.$"):
        limits.check_context(49, 16, 64)
    with pytest.raises(limits.InputError, match="with 2 new tokens that"):
        limits.check_context(63, 2, 64)
    with pytest.raises(limits.InputError, match=r"^The prompt is 65 tokens; the model's context is 64 tokens\.$"):
        limits.check_context(65, 1, 64)
    assert limits.context_length(SimpleNamespace(config=SimpleNamespace(n_positions=1024))) == 1024


# --- the command line and advise: the same words on one line of stderr, exit status 2 -------------------------

@pytest.fixture(scope="module")
def tiny_folder(tiny_pool, tmp_path_factory):
    """The tiny target as a local model folder (safetensors and the bundled tokenizer), for --target."""
    folder = tmp_path_factory.mktemp("tiny-target")
    tiny_pool.lm.model.save_pretrained(folder)
    tiny_pool.lm.tokenizer.save_pretrained(folder)
    return str(folder)


def _cli(argv: list[str], capsys) -> str:
    from specdec_core import cli
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]   # (a model loaded first may show its progress bar)
    assert err.startswith("error: ")
    return err[len("error: "):]


def _advise(argv: list[str], capsys) -> str:
    from specdec_core import advise
    assert advise.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ")
    return err[len("error: "):]


def _prompts_file(tmp_path, prompt: str) -> str:
    path = tmp_path / "prompts.txt"
    path.write_text(prompt + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("seed", [2**70, -1])
def test_the_command_line_and_advise_refuse_a_seed_in_the_same_words(seed, capsys):
    assert _cli(["--prompt", OK_PROMPT, "--draft", "ngram", "--seed", str(seed)], capsys) == SEED_MSG.format(seed)
    assert _advise(["--draft", "ngram", "--seed", str(seed)], capsys) == SEED_MSG.format(seed)


def test_the_command_line_and_advise_refuse_a_long_prompt_in_the_same_words(tmp_path, capsys):
    assert _cli(["--prompt", LONG, "--draft", "ngram"], capsys) == LONG_MSG
    path = _prompts_file(tmp_path, LONG)
    assert _advise(["--draft", "ngram", "--prompts", path], capsys) == f"--prompts {path}: prompt 1: {LONG_MSG}"


def test_the_command_line_and_advise_refuse_a_prompt_beyond_the_context_in_the_same_words(tiny_pool, tiny_folder,
                                                                                            tmp_path, capsys):
    prompt, expected = _over_context(tiny_pool)
    assert _cli(["--prompt", prompt, "--target", tiny_folder, "--draft", "ngram", "--max-new-tokens", "16"],
                capsys) == expected
    path = _prompts_file(tmp_path, prompt)
    assert _advise(["--target", tiny_folder, "--draft", "ngram", "--prompts", path, "--tokens", "16"],
                   capsys) == f"--prompts {path}: prompt 1: {expected}"


def test_an_unknown_sampler_gets_the_same_refusal_everywhere(tiny_pool, capsys):
    expected = "sampler must be one of standard, coupled, got 'nope'"
    assert _refusal(lambda: generate(tiny_pool, OK_PROMPT, pair="bundled|ngram", sampler="nope")) == expected
    assert _refusal(lambda: run_lab(tiny_pool, "ngram", OK_PROMPT, True, 0.5, 1, 4, 0.0, 0, 1.0, 10, 1, False, False,
                                    False, 1.0, False, "nope", progress=None)) == expected
    assert _cli(["--prompt", OK_PROMPT, "--draft", "ngram", "--sampler", "nope"], capsys) == expected


# --- the batch size: the same words from the Live tab, a link, /generate and the command line ----------------

BATCH_RANGE = "batch size must be between 1 (one sequence) and 16, got {}"
BATCH_WHOLE = "batch size must be a whole number, got {}"
HOSTILE_BATCHES = [(0, BATCH_RANGE.format(0)), (10**6, BATCH_RANGE.format(1000000)), (-1, BATCH_RANGE.format(-1)),
                   (2.5, BATCH_WHOLE.format(2.5)), ("abc", BATCH_WHOLE.format("'abc'"))]


def _batch_refusal(name: str, pool: TinyPool, batch, capsys, prompt: str = OK_PROMPT, max_new: int = 16,
                   tree_nodes: int = 0) -> str:
    """The refusal of a batch of ``batch`` rows at the entrance ``name`` (a link and the command line get it as
    text, the way they carry every value)."""
    if name == "live":
        return _refusal(lambda: run_live(pool, "bundled|ngram", prompt, 4, "fixed", 0.0, 0, 1.0, max_new, 1, False,
                                         True, None, tree_nodes=tree_nodes, batch_size=batch))
    if name == "generate":
        return _refusal(lambda: generate(pool, prompt, pair="bundled|ngram", k_policy="fixed", max_new_tokens=max_new,
                                         tree_nodes=tree_nodes, batch_size=batch))
    if name == "link":
        link = parse_live_query({"batch_size": [str(batch)], "tree_nodes": [str(tree_nodes)], "run": ["1"]},
                                page_defaults())
        assert link.settings is None and len(link.problems) == 1
        return link.problems[0]
    return _cli(["--prompt", prompt, "--draft", "ngram", "--k-policy", "fixed", "--max-new-tokens", str(max_new),
                 "--batch", str(batch), "--tree-nodes", str(tree_nodes)], capsys)


@pytest.mark.parametrize("name", ["live", "generate", "link", "cli"])
@pytest.mark.parametrize("batch, expected", HOSTILE_BATCHES, ids=[str(b) for b, _ in HOSTILE_BATCHES])
def test_a_hostile_batch_size_gets_the_same_refusal_everywhere(tiny_pool, name, batch, expected, capsys):
    assert _batch_refusal(name, tiny_pool, batch, capsys) == expected


@pytest.mark.parametrize("name", ["live", "generate", "link", "cli"])
def test_a_batch_with_token_trees_gets_the_same_refusal_everywhere(tiny_pool, name, capsys):
    expected = "token trees run one sequence at a time: with a batch size of 3, set tree nodes to 0 (a chain), got 4"
    assert _batch_refusal(name, tiny_pool, 3, capsys, tree_nodes=4) == expected


def _overflowing_row(pool: TinyPool, rows: int, max_new: int) -> tuple[str, str]:
    """A short prompt whose batch of ``rows`` has a later row (another user's, longer request) that does not fit
    the tiny target's context with ``max_new`` new tokens, while the prompt's own row does; the refusal naming it."""
    from specdec_core.batch.requests import fill_batch
    prompt = "Hi"
    counts = [len(pool.lm.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                        add_generation_prompt=True)["input_ids"])
              for text in fill_batch(prompt, rows)]
    row = next(i for i, n in enumerate(counts, 1) if n + max_new > CONTEXT)
    assert row > 1, counts
    n = counts[row - 1]
    tail = (f"the model's context is {CONTEXT} tokens." if n >= CONTEXT
            else f"with {max_new} new tokens that exceeds the model's context of {CONTEXT} tokens.")
    return prompt, f"Row {row} of the batch: The prompt is {n} tokens; {tail}"


@pytest.mark.parametrize("name", ["live", "generate", "link-run", "cli"])
def test_a_batch_row_beyond_the_targets_context_is_named_in_the_same_words_everywhere(tiny_pool, tiny_folder, name,
                                                                                      capsys):
    """Your prompt fits; another user's request beside it, with the new tokens asked for, does not: the refusal
    names that row. A link carries the batch size and the run it asks for is the Live tab's: refused there."""
    prompt, expected = _overflowing_row(tiny_pool, 3, 24)
    if name == "cli":
        message = _cli(["--prompt", prompt, "--target", tiny_folder, "--draft", "ngram", "--k-policy", "fixed",
                        "--max-new-tokens", "24", "--batch", "3"], capsys)
    elif name == "link-run":
        link = parse_live_query({"prompt": [prompt], "pair": ["bundled|ngram"], "max_new_tokens": ["24"],
                                 "k_policy": ["fixed"], "batch_size": ["3"], "run": ["1"]}, page_defaults())
        s = link.settings
        assert s is not None and s.batch_size == 3 and link.run
        message = _refusal(lambda: run_live(tiny_pool, s.pair, s.prompt, s.k, s.k_policy, s.temperature, s.top_k,
                                            s.top_p, s.max_new_tokens, s.seed, False, s.chat, None,
                                            batch_size=s.batch_size))
    else:
        message = _batch_refusal(name, tiny_pool, 3, capsys, prompt=prompt, max_new=24)
    assert message == expected
