"""Engine behaviour on tiny in-process models: greedy equality, KV-cache discipline, stopping,
determinism, adaptive K, trace invariants, JSON round trip, bad input."""
import json

import pytest
import torch

from conftest import make_tiny_lm
from specdec_core import (ModelDrafter, NGramDrafter, SpecConfig, Trace, baseline_generate, speculative_generate,
                          stream_baseline, stream_speculative)
from specdec_core.decoding.record import RunningText, cut_at_eos, new_records
from specdec_core.decoding.verify import Verdict

VOCAB = 32


class Recorder(torch.nn.Module):
    """Wraps a causal LM and records, for every forward, (tokens already in the cache, tokens fed)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.calls: list[tuple[int, int]] = []

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, past_key_values=None, **kw):
        self.calls.append((past_key_values.get_seq_length() if past_key_values is not None else 0,
                           input_ids.shape[1]))
        return self.inner(input_ids=input_ids, past_key_values=past_key_values, **kw)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lms():
    return make_tiny_lm(vocab_size=VOCAB, seed=11, scale=6.0, layers=2), make_tiny_lm(vocab_size=VOCAB, seed=12,
                                                                                      scale=6.0, layers=2)


PROMPT = [3, 7, 1, 9, 3, 7, 1, 4, 3, 7]


def check_trace_invariants(trace: Trace, cfg: SpecConfig) -> None:
    emitted = [t for it in trace.iterations for t in it.emitted]
    assert emitted == trace.new_token_ids
    st = trace.stats
    assert st.new_tokens == len(trace.new_token_ids) and st.iterations == len(trace.iterations)
    assert st.drafted == sum(len(it.drafts) for it in trace.iterations)
    assert st.accepted == sum(d.accepted for it in trace.iterations for d in it.drafts)
    seq_len = len(trace.prompt_ids)
    for i, it in enumerate(trace.iterations):
        assert it.index == i and it.start_len == seq_len
        assert len(it.drafts) <= it.k
        n_acc = 0
        for d in it.drafts:
            if d.tested:
                assert d.alpha == pytest.approx(min(1.0, d.p / d.q) if d.q > 0 else 1.0, abs=1e-6)
                if cfg.greedy:
                    assert d.u is None and d.accepted == (d.alpha == 1.0)
                else:
                    assert d.accepted == (d.u < d.alpha)
            else:
                assert not d.accepted and d.u is None
            n_acc += d.accepted
        assert it.emitted[:n_acc] == [d.token_id for d in it.drafts[:n_acc]]
        assert (it.resampled is None) or (it.bonus is None)
        if it.resampled is not None:
            assert it.resampled.position == n_acc and it.emitted[n_acc] == it.resampled.token_id
        if it.bonus is not None:
            assert n_acc == len(it.drafts) and it.emitted[-1] == it.bonus.token_id
        if trace.config["drafter"] == "ngram":
            assert len(it.draft_ms) <= 1          # one lookup (none when k was clipped to 0)
        else:
            assert len(it.draft_ms) == len(it.drafts)   # one draft forward per drafted token
        seq_len += len(it.emitted)
    assert len(trace.new_token_ids) <= cfg.max_new_tokens


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_greedy_equals_baseline(lms, k, drafter):
    target, draft = lms
    cfg = SpecConfig(k=k, temperature=0.0, max_new_tokens=40)
    trace = speculative_generate(target, draft if drafter == "model" else NGramDrafter(), PROMPT, cfg)
    base = baseline_generate(target, PROMPT, cfg)
    assert trace.new_token_ids == base.new_token_ids
    assert len(base.new_token_ids) == 40
    check_trace_invariants(trace, cfg)


def test_kv_cache_discipline(lms):
    """The target sees each token once: prefill of prompt[:-1], then per iteration ONE forward over the
    last token + the drafts, starting from a cache cropped to the accepted prefix. The draft model
    feeds only tokens its cache has not seen."""
    target, draft = Recorder(lms[0]), Recorder(lms[1])
    cfg = SpecConfig(k=4, temperature=1.0, max_new_tokens=30, seed=5)
    trace = speculative_generate(target, draft, PROMPT, cfg)
    check_trace_invariants(trace, cfg)
    assert target.calls[0] == (0, len(PROMPT) - 1)
    assert len(target.calls) == 1 + len(trace.iterations) == trace.stats.target_forwards
    for it, (cached, fed) in zip(trace.iterations, target.calls[1:]):
        assert cached == it.start_len - 1, "target cache not cropped to the accepted prefix"
        assert fed == 1 + len(it.drafts), "verification must be ONE forward over last token + drafts"
    assert len(draft.calls) == trace.stats.draft_forwards == 1 + sum(len(it.drafts) for it in trace.iterations)
    assert draft.calls[0] == (0, len(PROMPT) - 1)
    calls = iter(draft.calls[1:])
    rejected_somewhere = False
    for it in trace.iterations:
        cached, fed = next(calls)
        assert cached + fed == it.start_len, "first draft forward must absorb exactly the unseen tokens"
        assert fed in (1, 2), "draft cache must be rolled back, not reset"
        for _ in it.drafts[1:]:
            assert next(calls)[1] == 1
        rejected_somewhere |= it.resampled is not None
    assert rejected_somewhere and any(it.bonus is not None for it in trace.iterations)


def test_kv_cache_discipline_self_draft_all_accepted(lms):
    target = Recorder(lms[0])
    cfg = SpecConfig(k=3, temperature=0.0, max_new_tokens=12)
    trace = speculative_generate(target, lms[0], PROMPT, cfg)
    assert trace.stats.acceptance_rate == 1.0 and trace.stats.iterations == 3
    assert [c for c in target.calls[1:]] == [(9, 4), (13, 4), (17, 4)]


@pytest.mark.parametrize("max_new", [1, 2, 5, 13])
def test_stops_exactly_at_max_new_tokens(lms, max_new):
    for draft in (lms[1], NGramDrafter()):
        for temperature in (0.0, 1.0):
            cfg = SpecConfig(k=4, temperature=temperature, max_new_tokens=max_new, seed=1)
            trace = speculative_generate(lms[0], draft, PROMPT, cfg)
            assert len(trace.new_token_ids) == max_new and trace.finish_reason == "length"
            assert all(it.k <= max_new - 1 for it in trace.iterations)


def test_stops_right_after_eos(lms):
    target, draft = lms
    cfg = SpecConfig(k=4, temperature=0.0, max_new_tokens=40)
    free = baseline_generate(target, PROMPT, cfg).new_token_ids
    eos = free[6]
    first = free.index(eos)
    for d in (draft, NGramDrafter()):
        trace = speculative_generate(target, d, PROMPT, cfg, eos_token_id=eos)
        assert trace.new_token_ids == free[:first + 1] and trace.finish_reason == "eos"
    base = baseline_generate(target, PROMPT, cfg, eos_token_id=eos)
    assert base.new_token_ids == free[:first + 1]



def test_a_new_token_cut_off_by_eos_has_no_record():
    """An EOS among the accepted drafts cuts the emitted tokens before the resampled (or bonus) token. That token
    was not emitted, so the iteration records no resampled (or bonus) token, even when its id is the id of an
    accepted draft that was emitted."""
    eos = 2
    # drafts 5, EOS accepted, 7 rejected; 5 drawn from the residual (the id of the first, emitted, draft)
    v = Verdict(n_accepted=2, token=5, emitted=[5, 2, 5], p=[0.6, 0.5, 0.1], q=[0.6, 0.5, 0.8],
                alpha=[1.0, 1.0, 0.125], u=[0.3, 0.2, 0.9], token_p=0.4, token_residual_prob=0.7)
    emitted = cut_at_eos(v.emitted, eos)
    drafts, resampled, bonus = new_records(v, [5, 2, 7], emitted, lambda t: "", show=False)
    assert emitted == [5, 2] and resampled is None and bonus is None
    assert [d.accepted for d in drafts] == [True, True, False]
    # all accepted, EOS the last draft: the bonus (again an emitted draft's id) was cut off too
    v = Verdict(n_accepted=2, token=5, emitted=[5, 2, 5], p=[0.6, 0.5], q=[0.6, 0.5], alpha=[1.0, 1.0],
                u=[0.3, 0.2], token_p=0.4, token_residual_prob=None)
    assert new_records(v, [5, 2], cut_at_eos(v.emitted, eos), lambda t: "", show=False)[1:] == (None, None)
    # no EOS: the resampled token is recorded at its position
    v = Verdict(n_accepted=1, token=5, emitted=[5, 5], p=[0.6, 0.1], q=[0.6, 0.8], alpha=[1.0, 0.125],
                u=[0.3, 0.9], token_p=0.4, token_residual_prob=0.7)
    _, resampled, bonus = new_records(v, [5, 7], cut_at_eos(v.emitted, eos), lambda t: "", show=False)
    assert resampled is not None and (resampled.token_id, resampled.position) == (5, 1) and bonus is None

def test_same_seed_same_trace_and_global_rng_untouched(lms):
    target, draft = lms
    cfg = SpecConfig(k=3, temperature=0.9, top_k=10, top_p=0.95, max_new_tokens=25, seed=42)
    state = torch.get_rng_state()
    a = speculative_generate(target, draft, PROMPT, cfg)
    b = speculative_generate(target, draft, PROMPT, cfg)
    assert torch.equal(state, torch.get_rng_state()), "the engine must not use the global RNG"
    strip = lambda t: [(it.emitted, [(d.token_id, d.u, d.accepted) for d in it.drafts]) for it in t.iterations]  # noqa: E731
    assert strip(a) == strip(b)
    c = speculative_generate(target, draft, PROMPT, SpecConfig(**{**cfg.to_dict(), "seed": 43}))
    assert strip(c) != strip(a)


def test_adaptive_k_follows_heuristic(lms):
    target, draft = lms
    cfg = SpecConfig(k=6, temperature=1.0, max_new_tokens=60, adaptive_k=True, seed=3)
    trace = speculative_generate(target, draft, PROMPT, cfg)
    k = 6
    for it in trace.iterations:
        remaining = 60 - (it.start_len - len(PROMPT))
        assert it.k == min(k, remaining - 1)
        all_acc = len(it.drafts) > 0 and all(d.accepted for d in it.drafts)
        k = min(6, k + 2) if all_acc else max(1, k - 1)
    assert len({it.k for it in trace.iterations}) > 1


def test_streaming_yields_each_iteration_and_can_stop_early(lms):
    target, draft = lms
    cfg = SpecConfig(k=2, temperature=1.0, max_new_tokens=30)
    gen = stream_speculative(target, draft, PROMPT, cfg)
    seen = []
    for trace in gen:
        seen.append(len(trace.iterations))
        if len(seen) == 3:
            break
    gen.close()
    assert seen == [1, 2, 3]
    assert trace.stats.iterations == 3 and trace.finish_reason == ""
    check_trace_invariants(trace, cfg)


def test_json_round_trip(lms):
    target, draft = lms
    cfg = SpecConfig(k=3, temperature=0.8, max_new_tokens=20, seed=9)
    trace = speculative_generate(target, draft, PROMPT, cfg)
    trace.baseline = baseline_generate(target, PROMPT, cfg)
    d = json.loads(json.dumps(trace.to_dict()))
    assert d["schema"] == "specdec-trace/1"
    again = Trace.from_dict(d)
    assert again.to_dict() == trace.to_dict()
    for key in ("k", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "drafter", "adaptive_k",
                "device", "dtype"):
        assert key in d["config"]


def test_ngram_lookup():
    from specdec_core.drafters.base import DraftPolicy
    policy = DraftPolicy(0.0, 0, 1.0, None)

    def lookup(ids: list[int], k: int, max_ngram: int) -> list[int]:
        return NGramDrafter(max_ngram).propose(ids, k, policy).tokens
    assert lookup([5, 6, 7, 8, 1, 5, 6, 9, 2, 5, 6], 3, max_ngram=3) == [9, 2, 5]     # most recent "5 6" wins
    assert lookup([1, 2, 3, 4], 3, max_ngram=3) == []
    assert lookup([1, 2, 3, 2], 5, max_ngram=2) == [3, 2]   # falls back to the 1-gram "2"
    assert lookup([4, 4], 2, max_ngram=3) == [4]


def test_ngram_says_why_it_offers_fewer_than_k():
    from specdec_core.drafters.base import DraftPolicy
    policy = DraftPolicy(0.0, 0, 1.0, None, eos_token_id=0)
    assert NGramDrafter().propose([1, 2, 3, 4], 3, policy).stop == "no n-gram match"
    short = NGramDrafter().propose([1, 2, 3, 2], 5, policy)
    assert short.tokens == [3, 2] and short.stop == "the match's source has only 2 token(s) after it"
    eos = NGramDrafter().propose([1, 2, 0, 7, 2], 3, policy)
    assert eos.tokens == [0] and eos.stop == "the copy reached the end-of-sequence token"
    assert NGramDrafter().propose([5, 6, 7, 5, 6], 1, policy).stop == ""        # K drafts: nothing to say


def test_ngram_trace_uses_point_mass(lms):
    cfg = SpecConfig(k=4, temperature=1.0, max_new_tokens=30, seed=2)
    trace = speculative_generate(lms[0], NGramDrafter(), PROMPT, cfg)
    drafts = [d for it in trace.iterations for d in it.drafts if d.tested]
    assert drafts and all(d.q == 1.0 and d.alpha == pytest.approx(d.p) for d in drafts)
    assert trace.stats.draft_forwards == 0
    for it in trace.iterations:
        if it.resampled is not None:
            rejected = it.drafts[it.resampled.position].token_id
            assert all(row[0] != rejected for row in it.resampled.residual_top)


@pytest.mark.parametrize("kwargs,message", [
    (dict(k=0), "k must be between 1 and 64"), (dict(k=65), "k must be between 1 and 64"),
    (dict(temperature=-0.1), "temperature must be >= 0"), (dict(top_p=0.0), "top_p must be in (0, 1]"),
    (dict(top_p=1.5), "top_p must be in (0, 1]"), (dict(top_k=-1), "top_k must be >= 0"),
    (dict(max_new_tokens=0), "max_new_tokens must be between 1 and 2048"),
    (dict(max_new_tokens=5000), "max_new_tokens must be between 1 and 2048"),
    (dict(k=2.5), "k must be an integer"), (dict(seed=-1), "seed must be between 0 and 9007199254740991, got -1"),
])
def test_bad_config_raises(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SpecConfig(**kwargs)


def test_bad_inputs_raise(lms):
    target, draft = lms
    cfg = SpecConfig(max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt is empty"):
        speculative_generate(target, draft, [], cfg)
    with pytest.raises(ValueError, match="shape"):
        speculative_generate(target, draft, torch.zeros((2, 3), dtype=torch.long), cfg)
    other = make_tiny_lm(vocab_size=VOCAB + 1, seed=3)
    with pytest.raises(ValueError, match="vocabulary size"):
        speculative_generate(target, other, PROMPT, cfg)
    with pytest.raises(ValueError, match="drafter"):
        speculative_generate(target, "not a model", PROMPT, cfg)


def test_tensor_inputs_accepted(lms):
    target, draft = lms
    cfg = SpecConfig(k=2, max_new_tokens=6)
    a = speculative_generate(target, draft, torch.tensor(PROMPT), cfg).new_token_ids
    b = speculative_generate(target, draft, torch.tensor([PROMPT]), cfg).new_token_ids
    assert a == b == speculative_generate(target, ModelDrafter(draft), PROMPT, cfg).new_token_ids


# --- the output text, decoded as it grows --------------------------------------------------------------

TEXTS = ["Hello, world! The cat sat on the mat.",
         "Café crème, naïve façade — « déjà vu » à Zürich.",
         "日本語のテキスト、絵文字も 🎉🚀 混ぜる。Ελληνικά, русский.",
         "tabs\tand  double  spaces\n\nand ﬁ ligatures ½"]


@pytest.mark.parametrize("chunk", [1, 3])
def test_running_text_equals_a_full_decode_at_every_step(bundled, chunk):
    """Fed the ids one or three at a time (a baseline token, an iteration), the running text is the full
    decode at every step, also where a step ends inside a multi-byte character (checked: such steps occur)."""
    _, tok = bundled
    split_chars = 0
    for s in TEXTS:
        ids = tok.encode(s) + [tok.eos_token_id]
        running = RunningText(tok)
        for n in range(chunk, len(ids) + chunk, chunk):
            full = tok.decode(ids[:n])
            split_chars += full.endswith("\ufffd")
            assert running.update(ids[:n]) == full, (s, n)
        assert running.final(ids) == tok.decode(ids)
    assert split_chars > 0


class _ReversingTokenizer:
    """Decoding is not local (the text comes out reversed): the running text must fall back to full decodes."""
    eos_token_id = None

    def decode(self, ids):
        return "".join(f"<{i}>" for i in ids)[::-1]


def test_running_text_falls_back_where_decoding_is_not_local():
    running, ids = RunningText(_ReversingTokenizer()), [5, 12, 7, 30, 2]
    for n in range(1, len(ids) + 1):
        assert running.update(ids[:n]) == _ReversingTokenizer().decode(ids[:n])
    assert RunningText(None).update(ids) == RunningText(None).final(ids) == ""


@pytest.mark.parametrize("full_trace", [True, False])
@pytest.mark.slow
def test_both_sides_keep_the_text_the_same_way(bundled, full_trace):
    """The speculative loop and the baseline: with a full trace the text is the decode of the tokens so far at
    every step, otherwise it is decoded once at the end; a run closed early still has its text."""
    model, tok = bundled
    ids = tok.encode("Écris « café » trois fois : café, café, café, ")
    cfg = SpecConfig(k=3, temperature=0.0, max_new_tokens=12, full_trace=full_trace)
    seen = [t.text == tok.decode(t.new_token_ids) for t in stream_speculative(model, NGramDrafter(), ids, cfg, tok)]
    base = [b.text == tok.decode(b.new_token_ids) for b in stream_baseline(model, ids, cfg, tok)]
    assert len(seen) > 1 and seen[-1] and base[-1]
    if full_trace:
        assert all(seen) and all(base)
    else:
        assert not any(seen[:-1]) and not any(base[:-1])
    stream = stream_speculative(model, NGramDrafter(), ids, cfg, tok)
    first = next(stream)
    stream.close()
    assert first.text == tok.decode(first.new_token_ids) != ""
