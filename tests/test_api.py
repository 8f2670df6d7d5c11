"""The scripting API: /generate and /validate_trace called directly (the bundled model loaded once, by the
session fixture), then through gradio_client against the session's app (``app_server`` in conftest.py); the
API description lists exactly the two named endpoints."""
from __future__ import annotations

import inspect
import json
import re
import threading
from pathlib import Path

import gradio as gr
import pytest

import app
from components.serving.api import API_NAMES, generate, pair_keys, validate_trace
from components.serving.pairs import DEFAULT_PAIR, PAIR_NGRAM, pair_choices
from specdec_core import LoadedModel, ModelPool, Trace
from specdec_core.cli import build_parser, config_from_args
from specdec_core.config import recommended_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "ngram_extractive.json"
PROMPT = "Repeat exactly: red green blue, red green blue, red green blue."


class BundledPool:
    """The pool protocol over the session's bundled model; other keys go to a real (offline) ModelPool."""

    def __init__(self, model, tokenizer):
        self.bundled = LoadedModel("bundled", "SmolLM2-135M-Instruct (bundled)", model, tokenizer, threading.Lock())
        self.hub = ModelPool(allow_local=False)

    def get(self, key: str) -> LoadedModel:
        return self.bundled if key == "bundled" else self.hub.get(key)

    def loaded(self) -> list[str]:
        return ["bundled"]


@pytest.fixture(scope="module")
def pool(bundled):
    return BundledPool(*bundled)


# --- the handlers, no server ------------------------------------------------------------------------------

def test_generate_returns_a_valid_trace_and_a_summary(pool):
    trace_dict, summary = generate(pool, PROMPT, PAIR_NGRAM, k=3, max_new_tokens=10, baseline=True)
    trace = Trace.from_dict(trace_dict)
    assert trace_dict["schema"] == "specdec-trace/1" and trace.config["k"] == 3
    assert trace.stats.new_tokens == len(trace.new_token_ids) <= 10 and trace.baseline is not None
    assert trace.baseline.new_token_ids == trace.new_token_ids         # greedy, float32: the same tokens
    assert f"{trace.stats.new_tokens} new tokens in {trace.stats.iterations} iterations" in summary
    assert "measured speedup: can't tell yet — run more tokens: ×" in summary and "95 % CI" in summary   # 10 tokens
    assert "identical to baseline: yes" in summary and "\n" not in summary
    assert validate_trace(json.dumps(trace_dict)) == summary == validate_trace(trace_dict)


@pytest.mark.parametrize("kw, message", [
    ({"k": "4"}, "K must be a whole number, got '4'"), ({"k": 2.5}, "K must be a whole number"),
    ({"k": 0}, "K must be between 1 and 16"), ({"temperature": None}, "temperature must be a number, got None"),
    ({"temperature": float("nan")}, "temperature must be a number, got nan"),
    ({"top_p": "0.9"}, "top-p must be a number"), ({"max_new_tokens": 10_000}, "max new tokens must be between 1"),
    ({"seed": -3}, "seed must be between 0 and 9007199254740991, got -3"), ({"chat": "false"}, "chat must be true or false"),
    ({"baseline": 1}, "baseline must be true or false"), ({"pair": "bundled|nope"}, "pair must be one of bundled|feature, bundled|trained, bundled|ngram"),
    ({"k_policy": "greedy"}, "K policy must be one of fixed, heuristic, cost, got 'greedy'"),
    ({"adaptive_k": True, "k_policy": "cost"}, "adaptive_k=true means k_policy='heuristic'"),
    ({"prompt": None}, "prompt must be text, got None"), ({"prompt": "  "}, "The prompt is empty"),
    ({"confidence_stop": 2}, "the confidence stop must be between 0 (off) and 0.95, got 2"),
    ({"tree_nodes": 99}, "tree nodes must be between 0 (a chain) and 32, got 99"),
    ({"tree_nodes": "8"}, "tree nodes must be a whole number, got '8'"),
    ({"tree_top_k": 0}, "tree top-k (children per node) must be between 1 and 8, got 0"),
])
def test_generate_refuses_bad_values_with_the_field_named(pool, kw, message):
    args = {"prompt": PROMPT, "max_new_tokens": 4, **kw}
    with pytest.raises(gr.Error, match=re.escape(message)):
        generate(pool, **args)


@pytest.mark.slow
def test_k_policy_reaches_the_trace(pool):
    """Explicit values are used as given; adaptive_k=false (given) is fixed K, as it always was."""
    for policy, adaptive, want in (("cost", False, "cost"), ("", True, "heuristic"), ("heuristic", True, "heuristic"),
                                   ("fixed", False, "fixed"), ("", False, "fixed"), ("", None, "cost")):
        trace = Trace.from_dict(generate(pool, PROMPT, PAIR_NGRAM, k=3, adaptive_k=adaptive, k_policy=policy,
                                         max_new_tokens=6)[0])
        assert (trace.config["k_policy"], trace.config["k"]) == (want, 3)
        assert all(it.k_reason for it in trace.iterations) or want != "cost"


def test_tree_settings_reach_the_trace(pool):
    trace = Trace.from_dict(generate(pool, PROMPT, k=3, k_policy="fixed", tree_nodes=4, tree_top_k=2,
                                     max_new_tokens=6)[0])
    assert (trace.config["tree_nodes"], trace.config["tree_top_k"]) == (4, 2)
    trees = [it.tree for it in trace.iterations if it.tree is not None]
    assert trees and all(len(t.nodes) <= 4 for t in trees)


def test_confidence_stop_reaches_the_trace(pool):
    trace = Trace.from_dict(generate(pool, PROMPT, k=4, confidence_stop=0.0, max_new_tokens=6)[0])
    assert trace.config["confidence_stop"] == 0
    trace = Trace.from_dict(generate(pool, PROMPT, k=4, k_policy="fixed", max_new_tokens=6)[0])
    assert trace.config["confidence_stop"] == recommended_config().confidence_stop > 0


def test_live_generate_and_the_cli_start_from_the_recommended_config():
    """One set of defaults: the Live tab's first values, /generate's defaults and the CLI's are recommended_config()."""
    rec = recommended_config()
    demo = app.build_demo(ModelPool())
    values = {c["props"].get("elem_id"): c["props"].get("value") for c in demo.config["components"]}
    assert (values["k"], values["k-policy"], values["confidence-stop"], values["temperature"], values["top-k"],
            values["top-p"], values["max-new"], values["seed"]) == (rec.k, rec.k_policy, rec.confidence_stop,
                                                                    rec.temperature, rec.top_k, rec.top_p,
                                                                    rec.max_new_tokens, rec.seed)
    defaults = {n: p.default for n, p in inspect.signature(generate).parameters.items()}
    assert {n: defaults[n] for n in ("k", "temperature", "top_k", "top_p", "max_new_tokens", "seed",
                                     "confidence_stop")} == {n: getattr(rec, n) for n in (
        "k", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "confidence_stop")}
    assert (defaults["k_policy"], defaults["adaptive_k"]) == ("", None)        # -> rec.k_policy (checked below)
    assert config_from_args(build_parser().parse_args(["--prompt", "hi"])) == rec
    assert rec.k_policy == "cost" and rec.k > 4 and rec.confidence_stop > 0   # not the library's plain SpecConfig()


def test_generate_with_only_a_prompt_runs_the_recommended_config(pool):
    rec = recommended_config()
    trace = Trace.from_dict(generate(pool, "Name two planets.", max_new_tokens=8)[0])
    assert trace.config["pair"] == DEFAULT_PAIR and trace.stats.new_tokens > 0
    assert ({n: trace.config[n] for n in ("k", "k_policy", "confidence_stop", "temperature", "top_k", "top_p", "seed")}
            == {n: getattr(rec, n) for n in ("k", "k_policy", "confidence_stop", "temperature", "top_k", "top_p",
                                             "seed")})


def test_pair_accepts_every_key_of_the_live_selector():
    assert pair_keys() == [key for _, key in pair_choices()] and PAIR_NGRAM in pair_keys()


@pytest.mark.parametrize("bad, message", [
    ("{", "trace is not valid JSON"), ("[1, 2]", "invalid trace"), ({"schema": "other/1"}, "invalid trace"),
    (42, "trace must be JSON text or a JSON object, got int"), ("x" * (5 * 1024 * 1024 + 1), "larger than 5 MB"),
])
def test_validate_trace_refuses_with_the_validation_error(bad, message):
    with pytest.raises(gr.Error, match=message):
        validate_trace(bad)


def test_validate_trace_names_the_broken_field():
    d = json.loads(EXAMPLE.read_text())
    d["iterations"][0]["drafts"][0]["alpha"] = 7
    with pytest.raises(gr.Error, match=r"iterations\[0\]"):
        validate_trace(d)


@pytest.mark.slow
def test_the_api_description_lists_only_the_two_named_endpoints():
    info = app.build_demo(ModelPool()).get_api_info()
    assert set(info["named_endpoints"]) == {f"/{n}" for n in API_NAMES} and not info["unnamed_endpoints"]
    params = [p["parameter_name"] for p in info["named_endpoints"]["/generate"]["parameters"]]
    assert params == ["prompt", "pair", "k", "adaptive_k", "temperature", "top_k", "top_p", "max_new_tokens",
                      "seed", "chat", "baseline", "k_policy", "confidence_stop", "tree_nodes", "tree_top_k", "sampler",
                      "batch_size"]
    gen = info["named_endpoints"]["/generate"]
    assert all(p["python_type"]["description"] for p in gen["parameters"])        # every parameter documented
    assert [r["label"] for r in gen["returns"]] == ["trace", "summary"] and gen["description"]


# --- through gradio_client against the started app -----------------------------------------------------------

@pytest.fixture(scope="module")
def client(app_server):
    from gradio_client import Client
    c = Client(app_server.url, verbose=False)
    yield c
    c.close()


@pytest.mark.slow
def test_generate_and_validate_through_gradio_client(client):
    api = client.view_api(return_format="dict", print_info=False)
    assert set(api["named_endpoints"]) == {"/generate", "/validate_trace"} and not api["unnamed_endpoints"]
    trace_dict, summary = client.predict(prompt=PROMPT, pair="bundled|ngram", k=4, temperature=0.0, max_new_tokens=8,
                                         seed=0, chat=True, baseline=False, api_name="/generate")
    trace = Trace.from_dict(trace_dict)
    assert trace.stats.new_tokens == len(trace.new_token_ids) <= 8 and "new tokens in" in summary
    assert client.predict(trace=json.dumps(trace_dict), api_name="/validate_trace") == summary
    assert client.predict(trace=json.loads(EXAMPLE.read_text()), api_name="/validate_trace").startswith(
        f"{Trace.from_dict(json.loads(EXAMPLE.read_text())).stats.new_tokens} new tokens")


@pytest.mark.slow
def test_wrong_values_through_gradio_client_give_the_ui_message(client):
    from gradio_client.exceptions import AppError
    with pytest.raises(AppError, match="K must be a whole number, got 'four'"):
        client.predict(prompt=PROMPT, k="four", api_name="/generate")
    with pytest.raises(AppError, match="temperature must be a number, got None"):
        client.predict(prompt=PROMPT, temperature=None, api_name="/generate")
    with pytest.raises(AppError, match="invalid trace"):
        client.predict(trace='{"schema": "specdec-trace/1"}', api_name="/validate_trace")


@pytest.mark.slow
def test_generate_with_the_coupled_sampler_keeps_the_baselines_sample(pool):
    """sampler="coupled": the sampled text is the coupled baseline's for the same seed, and the summary says so;
    the standard rule at the same seed draws another sample (the same distribution)."""
    args = dict(prompt="Write a short poem about the sea.", pair="bundled|ngram", temperature=0.8, seed=3,
                max_new_tokens=12, baseline=True, k_policy="fixed", k=3)
    trace, summary = generate(pool, **args, sampler="coupled")
    assert trace["config"]["sampler"] == "coupled"
    assert trace["new_token_ids"] == trace["baseline"]["new_token_ids"] and "identical to baseline: yes" in summary
    standard, _ = generate(pool, **args)
    assert "sampler" not in standard["config"]                  # the standard rule is recorded as before
    with pytest.raises(gr.Error, match=r"sampler must be one of standard, coupled, got 'nope'"):
        generate(pool, prompt=PROMPT, sampler="nope")


@pytest.mark.slow
def test_the_app_serves_its_page_gzipped(app_server):
    """The page (about 1 MB of HTML) goes gzip-compressed to a browser that asks (``serving.compression``)."""
    import gzip
    import urllib.request
    req = urllib.request.Request(app_server.url, headers={"Accept-Encoding": "gzip, deflate, br"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Encoding"] == "gzip"
        body = r.read()
    page = gzip.decompress(body)
    assert b'id="learn-title"' in page or b"learn-title" in page
    assert len(body) < len(page) / 3
