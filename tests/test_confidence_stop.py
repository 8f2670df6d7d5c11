"""The confidence stop (``SpecConfig.confidence_stop``): a model draft stops after a draft whose chained
top probability falls below the threshold (that draft is still offered). Hand-built logits for the rule; tiny models for the engine
(greedy equality; the statistical exactness test is in test_exactness.py)."""
import json
import math

import pytest
import torch

from conftest import make_tiny_lm
from specdec_core import SpecConfig, Trace, baseline_generate, speculative_generate
from specdec_core.drafters.base import DraftPolicy, chain_confidence, proposal_from_steps

pytestmark = pytest.mark.usefixtures("one_thread")


def logits_with_top(prob: float, token: int, vocab: int = 4) -> torch.Tensor:
    """(vocab,) logits whose softmax gives ``token`` probability ``prob`` and the rest equal shares."""
    rest = (1 - prob) / (vocab - 1)
    out = torch.full((vocab,), math.log(rest))
    out[token] = math.log(prob)
    return out


def propose(tops: list[float], k: int, stop: float):
    steps = [logits_with_top(p, i % 4) for i, p in enumerate(tops)]
    policy = DraftPolicy(0.0, 0, 1.0, None, confidence_stop=stop)
    return proposal_from_steps(lambda i, prev: steps[i], k, policy, torch.device("cpu"))


def test_chain_confidence_multiplies_the_top_probabilities():
    assert chain_confidence(1.0, logits_with_top(0.9, 0)) == pytest.approx(0.9)
    assert chain_confidence(0.5, logits_with_top(0.8, 2)) == pytest.approx(0.4)


@pytest.mark.parametrize("stop, drafted", [(0.0, 3), (0.42, 3), (0.5, 2), (0.95, 1)])
def test_the_draft_stops_after_the_draft_where_the_chain_falls_below_the_threshold(stop, drafted):
    # chain: 0.9, 0.45, 0.405 (the last draft's is never needed: K = 3 stops there anyway)
    prop = propose([0.9, 0.5, 0.9], k=3, stop=stop)
    assert prop.tokens == [0, 1, 2][:drafted]
    assert len(prop.forward_ms) == prop.forwards == drafted        # no forward is run and then thrown away
    if drafted < 3:
        which, chain = ("draft 1 is", 0.9) if drafted == 1 else ("drafts 1–2 are all", 0.45)
        assert prop.stop == (f"the draft's confidence that {which} accepted, {chain:.2f}, fell below the "
                             f"confidence stop {stop:g}")
    else:
        assert prop.stop == ""


def test_a_stopped_draft_still_offers_its_first_token():
    assert propose([0.3, 0.9], k=2, stop=0.9).tokens == [0]


def test_k_still_caps_the_drafts():
    assert propose([0.99] * 5, k=2, stop=0.5).tokens == [0, 1]


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2, True, "0.3", float("nan")])
def test_config_refuses_a_bad_threshold(bad):
    with pytest.raises(ValueError, match="confidence_stop"):
        SpecConfig(confidence_stop=bad)


def test_greedy_output_is_the_targets_and_drafts_are_fewer():
    target, draft = make_tiny_lm(vocab_size=16, seed=1, scale=3.0), make_tiny_lm(vocab_size=16, seed=2, scale=3.0)
    prompt = [1, 2, 3, 4]
    base = baseline_generate(target, prompt, SpecConfig(max_new_tokens=24))
    full = speculative_generate(target, draft, prompt, SpecConfig(k=4, max_new_tokens=24))
    stopped = speculative_generate(target, draft, prompt, SpecConfig(k=4, max_new_tokens=24, confidence_stop=0.5))
    assert stopped.new_token_ids == full.new_token_ids == base.new_token_ids
    assert stopped.stats.drafted < full.stats.drafted
    assert stopped.config["confidence_stop"] == 0.5
    assert all(it.drafts for it in stopped.iterations if it.k > 0)        # every iteration offers a draft
    assert any(it.draft_stop.startswith("the draft's confidence") for it in stopped.iterations)


def test_the_stop_reason_round_trips_and_older_traces_read_without_it():
    target, draft = make_tiny_lm(vocab_size=16, seed=1, scale=3.0), make_tiny_lm(vocab_size=16, seed=2, scale=3.0)
    tr = speculative_generate(target, draft, [1, 2, 3, 4], SpecConfig(k=4, max_new_tokens=12, confidence_stop=0.5))
    d = json.loads(json.dumps(tr.to_dict()))
    assert Trace.from_dict(d).to_dict() == tr.to_dict()
    for it in d["iterations"]:
        del it["draft_stop"]
    assert all(it.draft_stop == "" for it in Trace.from_dict(d).iterations)
    d["iterations"][0]["draft_stop"] = "x" * 501
    with pytest.raises(ValueError, match="draft_stop"):
        Trace.from_dict(d)
