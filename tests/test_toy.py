"""The toy ten-word models run through the real engine: same loop, same trace, words as token texts;
their acceptance matches the overlap sum_x min(p, q) of their own distributions."""
import math

import pytest
import torch

from specdec_core import SpecConfig, Trace, baseline_generate, speculative_generate
from specdec_core.teaching.sweeps import exact_alphas
from specdec_core.teaching.toy import (WORDS, BigramLM, ToyTokenizer, draft_table, make_toy_pair, next_distributions,
    overlap, pair_from_config, pair_meta, step_view, target_table)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_tokenizer_round_trip_and_errors():
    tok = ToyTokenizer()
    assert len(tok) == len(WORDS) == 10
    ids = tok.encode("The cat sat on a mat.")
    assert [WORDS[i] for i in ids] == ["the", "cat", "sat", "on", "a", "mat", "."]
    assert tok.decode(ids) == " the cat sat on a mat."
    with pytest.raises(ValueError, match="unknown word.*'zebra'.*vocabulary"):
        tok.encode("the zebra")


def test_model_answers_the_engine_call():
    model = BigramLM(target_table())
    out = model(input_ids=torch.tensor([[0, 3, 5]]), past_key_values=None, use_cache=True, logits_to_keep=2)
    assert out.logits.shape == (1, 2, 10)
    assert torch.allclose(out.logits[0, 1], target_table()[5])          # next-token logits = row of the last token
    assert model.get_output_embeddings().weight.shape[0] == 10
    with pytest.raises(ValueError, match="token ids must be in"):
        model(input_ids=torch.tensor([[11]]))
    with pytest.raises(ValueError, match="square"):
        BigramLM(torch.zeros(3, 4))


def test_draft_table_agreement_endpoints():
    assert torch.allclose(draft_table(1.0), target_table())
    assert not torch.allclose(draft_table(0.0), target_table())
    assert torch.allclose(draft_table(0.0, seed=3), draft_table(0.0, seed=3))
    with pytest.raises(ValueError, match="agreement"):
        draft_table(1.5)


def test_same_engine_same_trace_greedy_equals_baseline():
    pair = make_toy_pair(0.5)
    ids = pair.tokenizer.encode("the cat")
    cfg = SpecConfig(k=3, temperature=0.0, max_new_tokens=25, seed=0)
    trace = speculative_generate(pair.target, pair.draft, ids, cfg, pair.tokenizer, prompt="the cat",
                                 meta=pair_meta(pair))
    base = baseline_generate(pair.target, ids, cfg, pair.tokenizer)
    assert trace.new_token_ids == base.new_token_ids
    assert trace.text == base.text and trace.text.split()[0] in WORDS
    assert [d.text.strip() or d.text for it in trace.iterations for d in it.drafts][0] in WORDS
    assert trace.stats.drafted > 0 and 0 < trace.stats.accepted < trace.stats.drafted   # a real mix
    again = Trace.from_dict(trace.to_dict())              # the trace passes the untrusted-input validator
    assert again.new_token_ids == trace.new_token_ids
    assert pair_from_config(again.config).agreement == pytest.approx(0.5)


def test_agreement_one_accepts_everything():
    pair = make_toy_pair(1.0)
    cfg = SpecConfig(k=4, temperature=1.0, max_new_tokens=60, seed=1)
    trace = speculative_generate(pair.target, pair.draft, pair.tokenizer.encode("the"), cfg, pair.tokenizer)
    assert trace.stats.accepted == trace.stats.drafted > 0


@pytest.mark.parametrize("agreement", [0.0, 0.5])
def test_acceptance_matches_overlap(agreement):
    """accepted / tested is, draft by draft, a Bernoulli(sum_x min(p, q)) draw in the draft's context:
    the total accepted must sit within 4 standard deviations of the sum of those overlaps."""
    pair = make_toy_pair(agreement)
    cfg = SpecConfig(k=4, temperature=1.0, max_new_tokens=1500, seed=7, full_trace=False)
    trace = speculative_generate(pair.target, pair.draft, pair.tokenizer.encode("the"), cfg, pair.tokenizer)
    alphas = exact_alphas(pair, trace)
    assert len(alphas) > 500
    expected = sum(alphas)
    sd = math.sqrt(sum(a * (1 - a) for a in alphas))
    z = (trace.stats.accepted - expected) / sd
    assert abs(z) < 4, f"accepted {trace.stats.accepted} vs expected {expected:.1f} (z = {z:.2f})"
    assert 0.2 < expected / len(alphas) < 0.95        # a real mix of acceptances and rejections


def test_overlap_is_expected_min_ratio():
    """sum min(p, q) = E_{x~q}[min(1, p(x)/q(x))]: the two ways of writing alpha agree."""
    pair = make_toy_pair(0.2)
    p, q = next_distributions(pair, WORDS.index("cat"), 1.0)
    via_ratio = float((q * torch.clamp(p / q, max=1.0)).sum())
    assert overlap(p, q) == pytest.approx(via_ratio, abs=1e-6)
    assert 0 < overlap(p, q) < 1


def test_step_view_at_a_rejection_and_at_the_bonus():
    pair = make_toy_pair(0.0)
    cfg = SpecConfig(k=3, temperature=1.0, max_new_tokens=80, seed=2)
    trace = speculative_generate(pair.target, pair.draft, pair.tokenizer.encode("the"), cfg, pair.tokenizer,
                                 meta=pair_meta(pair))
    rej = next((i, j) for i, it in enumerate(trace.iterations) for j, d in enumerate(it.drafts)
               if d.tested and not d.accepted)
    v = step_view(pair, trace, *rej)
    it = trace.iterations[rej[0]]
    assert v.verdict == "rejected" and v.drafted == it.drafts[rej[1]].token_id
    assert v.emitted == it.resampled.token_id
    assert sum(v.residual) == pytest.approx(1.0, abs=1e-5)
    assert v.residual[v.emitted] > 0                   # the resampled word has residual mass
    assert v.alpha == pytest.approx(min(1.0, v.p[v.drafted] / v.q[v.drafted]), abs=1e-5)
    assert len(v.p) == len(v.q) == 10 and sum(v.p) == pytest.approx(1.0, abs=1e-5)
    clean = next(i for i, it in enumerate(trace.iterations) if it.bonus is not None)
    b = step_view(pair, trace, clean, 99)              # clamped to the bonus position
    assert b.verdict == "bonus position" and b.drafted is None
    assert b.emitted == trace.iterations[clean].bonus.token_id
    assert b.position == len(trace.iterations[clean].drafts)
