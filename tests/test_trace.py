"""Trace.from_dict is the gate for untrusted files: everything malformed raises ValueError."""
import copy
import json

import pytest

from conftest import make_tiny_lm
from specdec_core import SpecConfig, Trace, baseline_generate, speculative_generate


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def good():
    t, d = make_tiny_lm(vocab_size=16, seed=4, scale=6.0), make_tiny_lm(vocab_size=16, seed=5, scale=6.0)
    cfg = SpecConfig(k=3, temperature=1.0, max_new_tokens=20, seed=1)
    trace = speculative_generate(t, d, [1, 2, 3, 4], cfg)
    trace.baseline = baseline_generate(t, [1, 2, 3, 4], cfg)
    d = json.loads(json.dumps(trace.to_dict()))
    assert any(it["resampled"] for it in d["iterations"]) and any(it["bonus"] for it in d["iterations"])
    return d


def first_draft(d):
    return next(x for it in d["iterations"] for x in it["drafts"] if x["tested"])


def uncertain_draft(d):
    """A tested draft whose alpha < 1, so that some u in [0, 1) accepts it and another rejects it."""
    return next(x for it in d["iterations"] for x in it["drafts"] if x["tested"] and x["alpha"] < 0.99)


def contradict_u(x):
    x["u"] = 0.999 if x["accepted"] else 0.0


def mutate(d, fn):
    d = copy.deepcopy(d)
    fn(d)
    return d


CASES = {
    "not an object": (lambda d: None, "expected an object"),
    "wrong schema": (lambda d: d.update(schema="other/9"), "schema"),
    "missing iterations": (lambda d: d.pop("iterations"), "missing field 'iterations'"),
    "emitted mismatch": (lambda d: d["new_token_ids"].append(3), "concatenate"),
    "alpha wrong": (lambda d: first_draft(d).update(alpha=0.123456), "alpha"),
    "accepted contradicts u": (lambda d: contradict_u(uncertain_draft(d)), "contradicts"),
    "probability > 1": (lambda d: first_draft(d).update(p=1.7), r"outside \[0, 1\]"),
    "nan": (lambda d: first_draft(d).update(q=float("nan")), "finite|outside"),
    "negative token": (lambda d: d["prompt_ids"].__setitem__(0, -4), "non-negative integers"),
    "string token": (lambda d: d["new_token_ids"].__setitem__(0, "x"), "non-negative integers"),
    "bool as number": (lambda d: d["iterations"][0].update(verify_ms=True), "expected a number"),
    "negative time": (lambda d: d["iterations"][0].update(verify_ms=-1.0), ">= 0"),
    "stats disagree": (lambda d: d["stats"].update(new_tokens=999), "stats"),
    "more accepted than drafted": (lambda d: d["stats"].update(accepted=d["stats"]["drafted"] + 1), "accepted"),
    "config nested": (lambda d: d["config"].update(evil={"a": 1}), "short scalars"),
    "too many drafts": (lambda d: d["iterations"][0].update(drafts=[first_draft(d)] * 65), "more than 64"),
    "bad finish": (lambda d: d.update(finish_reason="exploded"), "finish_reason"),
    "bad top list": (lambda d: next(it for it in d["iterations"] if it["resampled"])["resampled"].update(
        residual_top=[[1, "a"]]), "token_id, text, probability"),
    "baseline times": (lambda d: d["baseline"].update(token_ms=["slow"]), "non-negative numbers"),
}


def test_good_trace_round_trips(good):
    assert Trace.from_dict(good).to_dict() == good


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_traces_are_refused(good, case):
    fn, msg = CASES[case]
    bad = None if case == "not an object" else mutate(good, fn)
    with pytest.raises(ValueError, match=msg):
        Trace.from_dict(bad)
