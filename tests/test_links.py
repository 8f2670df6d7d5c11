"""The Live settings as a link (``components/pages/links.py`` and the Live tab's handlers): parsing, refusals of bad
and hostile parameters, the round trip of "copy link", and the same trace from a link as from the same settings
entered by hand."""
from __future__ import annotations

import threading
from dataclasses import replace
from types import SimpleNamespace
from urllib.parse import parse_qs

import gradio as gr
import pytest

from components.pages.live import copy_link, page_defaults, run_live, settings_from_url
from components.serving.pairs import PAIR_NGRAM, pair_keys
from components.pages.links import LIVE_PARAMS, LiveSettings, live_query, parse_live_query, refusal_message
from specdec_core import LoadedModel, Trace

HOSTILE = ('<img src="x">', "<script>alert(1)</script>", "javascript:alert(1)", "1<b>", "\u202e", "%3Cimg%3E",
           "1e3", "nan", "-1", "0x10", "1 ", "", "９")


def _q(query: str) -> dict[str, list[str]]:
    return parse_qs(query.lstrip("?"), keep_blank_values=True)


def test_no_live_parameter_leaves_the_page_as_it_is():
    for params in ({}, {"tab": ["learn"], "chapter": ["3"]}, {"presenter": ["1"]}):
        assert parse_live_query(params, page_defaults()) == parse_live_query({}, page_defaults())
        link = parse_live_query(params, page_defaults())
        assert link.settings is None and not link.run and not link.problems


def test_a_link_sets_what_it_names_and_keeps_the_rest():
    link = parse_live_query({"pair": [PAIR_NGRAM], "k": ["3"], "temperature": ["0.7"], "seed": ["42"],
                             "chat": ["0"], "run": ["1"]}, page_defaults())
    assert not link.problems and link.run
    assert link.settings == replace(page_defaults(), pair=PAIR_NGRAM, k=3, temperature=0.7, seed=42, chat=False)


@pytest.mark.parametrize("settings", [
    page_defaults(),
    LiveSettings(pair=PAIR_NGRAM, prompt="Repeat: a & b < c > d \"quoted\" 'x' + ü 😀\nline two\t#hash?x=1",
                 k=16, k_policy="heuristic", temperature=1.35, top_k=50, top_p=0.93, max_new_tokens=512,
                 seed=2**53 - 1, chat=False, confidence_stop=0.95),
])
def test_live_query_reads_back_to_the_same_settings(settings):
    query = live_query(settings)
    assert query.startswith("?tab=live&")
    link = parse_live_query(_q(query), page_defaults())
    assert link.settings == settings and link.run and not link.problems
    assert not parse_live_query(_q(live_query(settings, run=False)), page_defaults()).run


@pytest.mark.parametrize("params, message", [
    ({"k": ["0"]}, "K must be between 1 and 16, got 0"),
    ({"k": ["17"]}, "K must be between 1 and 16"),
    ({"k": ["2.5"]}, "K must be a whole number, got '2.5'"),
    ({"k": ["4", "5"]}, "k is given 2 times"),
    ({"temperature": ["2.5"]}, "temperature must be between 0 (greedy) and 2"),
    ({"temperature": ["0.73"]}, "multiple of 0.05"),
    ({"temperature": ["inf"]}, "temperature must be a number, got 'inf'"),
    ({"top_p": ["0"]}, "top-p must be in (0, 1]"),
    ({"seed": [str(2**53)]}, "seed must be between 0 and 9007199254740991"),
    ({"seed": ["-1"]}, "seed must be between 0 and 9007199254740991, got -1"),
    ({"seed": ["1e5"]}, "seed must be a whole number"),
    ({"max_new_tokens": ["100000"]}, "max new tokens must be between 1 and 512"),
    ({"pair": ["preset:99"]}, "pair must be one of"),
    ({"pair": ["bundled|ngram\x00"]}, "pair must be one of"),
    ({"k_policy": ["greedy"]}, "K policy must be one of fixed, heuristic, cost"),
    ({"prompt": ["   "]}, "prompt is empty"),
    ({"prompt": ["x" * 20_001]}, "The prompt is 20001 characters long; the limit is 20000."),
    ({"prompt": ["a\x1b[31mred"]}, "control characters"),
    ({"chat": ["maybe"]}, "chat must be 1 or 0"),
    ({"run": ["yes please"]}, "run must be 1 or 0"),
    ({"confidence_stop": ["0.99"]}, "the confidence stop must be between 0 (off) and 0.95"),
])
def test_bad_parameters_refuse_the_whole_link(params, message):
    link = parse_live_query({**params, "seed": params.get("seed", ["1"]), "run": params.get("run", ["1"])},
                            page_defaults())
    assert link.settings is None and not link.run
    assert any(message in p for p in link.problems), link.problems


@pytest.mark.parametrize("name", [*LIVE_PARAMS, "run", "repro"])
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_in_every_parameter_are_refused_or_kept_as_plain_text(name, value):
    """Every parameter takes only what its control takes; only the prompt is free text (a textbox's value,
    never markup). A refusal quotes the value, and the page shows it escaped."""
    query = {name: [value], "run": ["1"]} if name != "run" else {"run": [value]}
    link = parse_live_query(query, page_defaults())
    if name == "prompt" and value.strip():
        assert link.settings is not None and link.settings.prompt == value and not link.problems
        return
    if name == "run" and value == "1":
        return
    assert link.settings is None and not link.run and link.problems
    with pytest.warns(UserWarning, match="not applied"):     # the toast (outside a request: a warning)
        status = settings_from_url(SimpleNamespace(query_params=query))[17]
    assert "<img" not in status and "<script" not in status and "<b>" not in status
    assert status.startswith('<div class="sd-status"')


def test_a_refused_link_warns_with_the_values_escaped_and_runs_nothing(monkeypatch):
    shown = []
    monkeypatch.setattr(gr, "Warning", lambda message, *a, **kw: shown.append(message))
    out = settings_from_url(SimpleNamespace(query_params={"k": ['<img src="x">'], "pair": ["<b>x</b>"],
                                                          "run": ["1"]}))
    assert len(out) == 19 and out[16] is False and out[18] is None
    assert all(isinstance(v, type(gr.skip())) for v in out[:16])
    assert len(shown) == 1 and "&lt;img src=\"x\"&gt;" in shown[0] and "<img" not in shown[0]
    assert "&lt;b&gt;x&lt;/b&gt;" in shown[0] and "not applied" in shown[0]
    assert refusal_message(["a", "b"]).endswith("a; b.")


def test_settings_from_url_fills_every_control_and_asks_for_the_run():
    query = live_query(replace(page_defaults(), pair=PAIR_NGRAM, k=5, seed=9, temperature=0.5, tree_nodes=6,
                               tree_top_k=3, sampler="coupled"))
    assert "sampler=coupled" in query
    out = settings_from_url(SimpleNamespace(query_params=_q(query)))
    assert out[:16] == (PAIR_NGRAM, PAIR_NGRAM, page_defaults().prompt, 5, page_defaults().k_policy, 0.5,
                        page_defaults().top_k, page_defaults().top_p, page_defaults().max_new_tokens, 9, True,
                        page_defaults().confidence_stop, 6, 3, "coupled", 1)
    assert out[16] is True and "running" in out[17] and out[18] is None
    plain = settings_from_url(SimpleNamespace(query_params={}))
    assert plain[16] is False and all(isinstance(v, type(gr.skip())) for v in plain[:16] + plain[17:18])
    assert settings_from_url(None)[16] is False


def _page_values(s: LiveSettings) -> tuple:
    return (s.pair, s.prompt, s.k, s.k_policy, s.temperature, s.top_k, s.top_p, s.max_new_tokens, s.seed, s.chat,
            s.confidence_stop, s.tree_nodes, s.tree_top_k, s.sampler)


def test_copy_link_writes_the_current_settings_and_refuses_what_a_link_cannot_carry():
    s = replace(page_defaults(), pair=PAIR_NGRAM, prompt="a <b> & c", k=3, temperature=0.35, seed=5)
    query = copy_link(*_page_values(s))
    assert parse_live_query(_q(query), page_defaults()).settings == s
    with pytest.raises(gr.Error, match="K must be between 1 and 16"):
        copy_link(*_page_values(replace(s, k=40)))
    with pytest.raises(gr.Error, match="prompt is empty"):
        copy_link(*_page_values(replace(s, prompt="  ")))
    with pytest.raises(gr.Error, match="characters; links are kept under"):
        copy_link(*_page_values(replace(s, prompt="long prompt " * 1000)))
    with pytest.raises(gr.Error, match="cannot be written as a link: pair must be one of"):
        copy_link(*_page_values(replace(s, pair="<img src=x>")))
    with pytest.raises(gr.Error) as refused:
        copy_link(*_page_values(replace(s, seed=2**60)))
    assert "seed must be between 0 and" in str(refused.value)


class _Pool:
    def __init__(self, model, tokenizer):
        self.lm = LoadedModel("bundled", "SmolLM2-135M-Instruct (bundled)", model, tokenizer, threading.Lock())

    def get(self, key: str) -> LoadedModel:
        if key != "bundled":
            raise ValueError(f"no model {key!r} here")
        return self.lm


def _final_trace(frames) -> Trace:
    return Trace.from_dict(list(frames)[-1][-3])


def _same_run(a: Trace, b: Trace) -> None:
    assert a.new_token_ids == b.new_token_ids and a.config == b.config
    assert [(it.k, [(d.token_id, d.u, d.accepted) for d in it.drafts], it.emitted) for it in a.iterations] == \
        [(it.k, [(d.token_id, d.u, d.accepted) for d in it.drafts], it.emitted) for it in b.iterations]


@pytest.mark.slow
def test_a_link_reproduces_the_trace_of_the_same_settings_entered_by_hand(bundled):
    """Sampling at T = 0.9 with a seed: the link's run (copy link -> page load -> the run it asks for) and a
    run with the same settings typed in give the same tokens, drafts and uniform draws."""
    pool = _Pool(*bundled)
    by_hand = replace(page_defaults(), pair=PAIR_NGRAM, prompt="Repeat exactly: one two three, one two three.",
                      k=4, k_policy="fixed", temperature=0.9, top_p=0.95, max_new_tokens=12, seed=7)
    query = copy_link(*_page_values(by_hand))
    values = settings_from_url(SimpleNamespace(query_params=_q(query)))
    assert values[16] is True                              # run=1
    pair, _, prompt, k, policy, temperature, top_k, top_p, max_new, seed, chat, stop = values[:12]
    from_link = _final_trace(run_live(pool, pair, prompt, k, policy, temperature, top_k, top_p, max_new, seed, False,
                                      chat, None, confidence_stop=stop))
    typed = _final_trace(run_live(pool, *_page_values(by_hand)[:9], False, by_hand.chat, None,
                                  confidence_stop=by_hand.confidence_stop))
    _same_run(from_link, typed)
    assert any(d.u is not None for it in typed.iterations for d in it.drafts)      # really sampled
    other = _final_trace(run_live(pool, *_page_values(replace(by_hand, seed=8))[:9], False, by_hand.chat, None,
                                  confidence_stop=by_hand.confidence_stop))
    assert [d.u for it in other.iterations for d in it.drafts] != [d.u for it in typed.iterations for d in it.drafts]


def test_every_pair_key_can_be_linked():
    for key in pair_keys():
        assert parse_live_query({"pair": [key]}, page_defaults()).settings.pair == key


def test_random_links_never_crash_and_what_they_set_reads_back():
    """500 seeded random links (any parameter, any text, repeated keys): parsing never raises; a refused link sets
    nothing; an accepted one holds settings a run takes and that a copied link reproduces."""
    import random

    from components.pages.links import spec_config
    rng = random.Random(53)
    alphabet = "0123456789.-+eE xnaif<>\"'&%;/\\\x00\x1b\u202e\ud800é😀|:"
    names = [*LIVE_PARAMS, "run", "tab", "chapter", "presenter"]
    accepted = 0
    for _ in range(500):
        params: dict[str, list[str]] = {}
        for _ in range(rng.randint(1, 5)):
            value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
            if rng.random() < 0.5:
                value = rng.choice(["1", "0", "4", "0.5", "0.05", "1.0", "12", PAIR_NGRAM, "fixed", "cost", "coupled", value])
            params.setdefault(rng.choice(names), []).append(value)
        link = parse_live_query(params, page_defaults())
        if link.problems:
            assert link.settings is None and not link.run
            continue
        if link.settings is not None:
            accepted += 1
            spec_config(link.settings)
            assert parse_live_query(_q(live_query(link.settings)), page_defaults()).settings == link.settings
    assert accepted >= 20


@pytest.mark.slow
def test_a_coupled_link_runs_the_coupled_rule(bundled):
    """``sampler=coupled`` reaches the run: the trace records the rule, and the text is the coupled baseline's."""
    pool = _Pool(*bundled)
    s = replace(page_defaults(), pair=PAIR_NGRAM, prompt="Repeat exactly: one two three, one two three.", k=3,
                k_policy="fixed", temperature=0.9, max_new_tokens=10, seed=3, sampler="coupled")
    values = settings_from_url(SimpleNamespace(query_params=_q(copy_link(*_page_values(s)))))
    assert values[14] == "coupled"
    trace = _final_trace(run_live(pool, *_page_values(s)[:9], True, s.chat, None, sampler=values[14]))
    assert trace.config["sampler"] == "coupled"
    assert trace.new_token_ids == trace.baseline.new_token_ids
