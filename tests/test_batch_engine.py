"""The batched engine: greedy rows equal their solo target-only runs for every drafter (and the batched baseline
equals them too), coupled rows equal their solo coupled runs, rows leave the batch as they finish, the trace's
batch record round-trips and refuses malformed files, the cost model and K policy at batch size B, the batch's
measured prices, and the batch size's limits."""
import dataclasses
import json

import pytest
import torch

from conftest import make_tiny_lm
from specdec_core import FeatureDraft, ModelDrafter, NGramDrafter, SpecConfig, Trace, baseline_generate, encode_prompt
from specdec_core.batch.baseline import attach_batch_baseline, batch_baseline
from specdec_core.batch.engine import batch_generate
from specdec_core.batch.prices import measure_batch_prices, monotone, price_widths
from specdec_core.batch.requests import OTHER_REQUESTS, fill_batch
from specdec_core.drafters.model import model_drafter
from specdec_core.drafters.registry import shipped_draft_for
from specdec_core.limits import InputError, check_batch, check_batch_context
from specdec_core.policy.batch_cost import (BatchKPolicy, BatchPrices, batch_speedup, crossover, make_batch_k_policy,
                                            speedup_table)
from specdec_core.policy.costmodel import AcceptanceProfile

ROWS = ["Repeat exactly: the red fox runs, the red fox runs, the red fox runs.", "Hi",
        "List three colours of the rainbow."]


@pytest.mark.parametrize("name", ["ngram", "trained", "feature"])
def test_greedy_rows_equal_their_solo_runs(bundled, name):
    model, tok = bundled
    ids = [encode_prompt(tok, p) for p in ROWS]
    cfg = SpecConfig(k=3, temperature=0.0, max_new_tokens=12)
    solo = [baseline_generate(model, i, cfg, tok).new_token_ids for i in ids]
    drafter = NGramDrafter() if name == "ngram" else model_drafter(shipped_draft_for(name, model), name=name)
    trace = batch_generate(model, drafter, ids, cfg, tok, texts=ROWS)
    results, batch = batch_baseline(model, ids, cfg, tok)
    assert [r.new_token_ids for r in results] == solo
    assert [r.new_token_ids for r in trace.rows()] == solo
    attach_batch_baseline(trace, results, batch)
    st = trace.batch.stats
    assert st.new_tokens == sum(len(s) for s in solo) and st.speedup > 0 and batch.tokens_per_s > 0
    assert all(f.fed >= len(f.rows) for f in trace.batch.forwards)            # every row feeds its last token
    assert trace.batch.forwards[0].rows == [0, 1, 2]
    assert [r.prompt for r in trace.rows()] == ROWS and trace.rows()[1].config["seed"] == 1


def test_coupled_rows_equal_their_solo_coupled_runs():
    """Row b of a coupled batch is the coupled target-only run with seed + b, whatever the drafter."""
    target, draft = make_tiny_lm(vocab_size=12, seed=1, scale=6.0), make_tiny_lm(vocab_size=12, seed=2, scale=6.0)
    prompts = [[1], [3, 4, 5], [2, 2, 7, 8, 1], [9, 3]]
    cfg = SpecConfig(k=3, temperature=1.0, max_new_tokens=10, seed=5, sampler="coupled")
    for drafter in (NGramDrafter(), ModelDrafter(draft), FeatureDraft(target, 0, torch.arange(10)).make_drafter()):
        trace = batch_generate(target, drafter, prompts, cfg)
        for b, (row, p) in enumerate(zip(trace.rows(), prompts)):
            solo = baseline_generate(target, p, SpecConfig(temperature=1.0, max_new_tokens=10, seed=5 + b,
                                                           sampler="coupled"))
            assert row.new_token_ids == solo.new_token_ids, (drafter.name, b)


def test_rows_leave_the_batch_as_they_finish():
    target, draft = make_tiny_lm(vocab_size=8, seed=3, scale=6.0), make_tiny_lm(vocab_size=8, seed=4, scale=6.0)
    prompts = [[1, 2], [3], [4, 5, 6], [7, 1, 2, 3]]
    cfg = SpecConfig(k=2, temperature=1.0, max_new_tokens=30, seed=2)
    trace = batch_generate(target, ModelDrafter(draft), prompts, cfg, eos_token_id=0)
    rows = trace.rows()
    ends = {r.finish_reason for r in rows}
    assert ends <= {"eos", "length"} and "eos" in ends
    sizes = [len(f.rows) for f in trace.batch.forwards]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 4 and sizes[-1] < 4
    for b, row in enumerate(rows):       # a row takes part in exactly its own iterations
        assert sum(b in f.rows for f in trace.batch.forwards) == len(row.iterations)
        assert row.new_token_ids == [t for it in row.iterations for t in it.emitted]
    results, batch = batch_baseline(target, prompts, cfg, eos_token_id=0)
    assert batch.new_tokens == sum(len(r.new_token_ids) for r in results)


def test_a_batched_trace_round_trips_and_malformed_files_are_refused():
    target, draft = make_tiny_lm(vocab_size=8, seed=3), make_tiny_lm(vocab_size=8, seed=4)
    cfg = SpecConfig(k=2, temperature=0.8, max_new_tokens=6)
    trace = batch_generate(target, ModelDrafter(draft), [[1, 2], [3]], cfg)
    attach_batch_baseline(trace, *batch_baseline(target, [[1, 2], [3]], cfg))
    d = json.loads(json.dumps(trace.to_dict()))
    assert d["schema"] == "specdec-trace/2" and len(d["batch"]["rows"]) == 1
    again = Trace.from_dict(d)
    assert again.to_dict() == d and len(again.rows()) == 2 and again.batch.baseline is not None
    single = trace.rows()[1].to_dict()
    assert single["schema"] == "specdec-trace/1" and "batch" not in single
    bad = [("batch", lambda x: x.pop("batch")),
           ("size", lambda x: x["batch"].update(size=5)),
           ("rows", lambda x: x["batch"]["rows"][0].update(batch=x["batch"])),
           ("rows", lambda x: x["batch"]["forwards"][0].update(rows=[0, 7])),
           ("k_reason", lambda x: x["batch"]["forwards"][0].update(k_reason="x" * 10_000)),
           ("stats", lambda x: x["batch"]["stats"].update(accepted=10**6)),
           ("prices", lambda x: x["batch"].update(prices={"sizes": "abc"})),
           ("batch", lambda x: x.update(schema="specdec-trace/1"))]
    for what, spoil in bad:
        broken = json.loads(json.dumps(d))
        spoil(broken)
        with pytest.raises(ValueError, match="invalid trace"):
            Trace.from_dict(broken)


def _prices(per_token_ms: float = 10.0, fixed_ms: float = 10.0) -> BatchPrices:
    """A compute-bound machine: a forward costs fixed + per token × (rows × width); drafts cost little."""
    sizes, widths = (1, 2, 4, 8, 16), (1, 2, 3, 4, 5)
    verify = tuple(tuple(fixed_ms + per_token_ms * b * w for w in widths) for b in sizes)
    return BatchPrices(sizes, widths, verify, draft_ms=(0.1,) * 5, draft_per_token=False, overhead_ms=(1.0,) * 5,
                       baseline_overhead_ms=(1.0,) * 5)


def test_the_cost_model_at_batch_size_b():
    prices = _prices()
    assert prices.t_verify(3, 2) == pytest.approx(10 + 10 * 3 * 2)            # interpolated between sizes
    assert prices.costs(6, 4).verify_ms == tuple(pytest.approx(10 + 60 * w) for w in range(1, 6))
    assert BatchPrices.from_dict(json.loads(json.dumps(prices.to_dict()))) == prices
    sure = AcceptanceProfile.constant(0.9)
    table = speedup_table(prices, sure, [1, 16], [0, 2, 4])
    assert table[0][0] == pytest.approx(1.0, abs=0.05)                           # K = 0 is a plain decode step
    assert table[0][1] > 1.2 and table[1][1] < 1.0 and table[1][2] < table[1][1]   # drafts pay at B = 1, not at 16
    b_star = crossover(prices, sure, 4, 16)
    assert b_star is not None and 1 < b_star <= 16
    assert batch_speedup(prices, sure, b_star - 1, 1) > 1.0 >= max(batch_speedup(prices, sure, b_star, k)
                                                                    for k in range(1, 5))
    assert crossover(_prices(per_token_ms=0.01), sure, 4, 16) is None             # a flat verify: drafting always pays
    with pytest.raises(ValueError):
        BatchPrices((1, 2), (1,), ((1.0,),), (0.0, 0.0), False, (0.0, 0.0), (0.0, 0.0))


def test_the_cost_aware_k_falls_to_zero_as_the_batch_grows():
    prices = _prices(fixed_ms=30.0)
    policy = make_batch_k_policy(SpecConfig(k=4, k_policy="cost"), None, NGramDrafter(), prices.to_dict())
    assert isinstance(policy, BatchKPolicy)
    k1, why1 = policy.choose(1, 20)
    k16, why16 = policy.choose(16, 20)
    assert k1 >= 1 and k16 == 0 and why16.startswith("batch of 16")
    # at B = 1 on the flatter machine K = 1 predicts 1.5 tokens in 31.1 ms against 1 in 21 ms: 2 % more, within
    # the prices' error (DRAFT_MARGIN), so no drafting; a model draft's catch-up is priced at the widest row's feed
    assert policy.choose(1, 20)[0] == k1 and make_batch_k_policy(
        SpecConfig(k=4, k_policy="cost"), None, NGramDrafter(), _prices()).choose(1, 20)[0] == 0
    behind = dataclasses.replace(prices, catchup_ms=(0.5,) * 5)
    assert behind.catchup(4, 100) == pytest.approx(0.5 * 4 * 100)
    fixed = make_batch_k_policy(SpecConfig(k=3), None, NGramDrafter())
    assert fixed.choose(16, 20)[0] == 3 and fixed.choose(16, 1)[0] == 1


def test_the_batch_prices_are_measured_for_each_size():
    target, draft = make_tiny_lm(vocab_size=40, seed=1), make_tiny_lm(vocab_size=40, seed=2)
    for drafter in (NGramDrafter(), ModelDrafter(draft)):
        prices = measure_batch_prices(target, drafter, SpecConfig(k=3), batch_generate, sizes=(1, 2))
        assert prices.sizes == (1, 2) and prices.widths == price_widths(3) == (1, 2, 3, 4)
        assert all(v > 0 for row in prices.verify_ms for v in row) and prices.draft_per_token == (drafter.name != "ngram")
        assert all(v >= 0 for v in prices.overhead_ms + prices.baseline_overhead_ms)
    assert monotone([(5.0, 9.0), (4.0, 8.0)]) == ((4.0, 8.0), (4.0, 8.0))     # a stalled timing takes a larger's


def test_the_batch_size_is_checked_with_the_shared_words():
    assert check_batch(1) == 1 and check_batch(16.0) == 16
    for bad in (0, 17, 10**6, -1, 2.5, "4", None, True):
        with pytest.raises(InputError, match="batch size must be"):
            check_batch(bad)
    check_batch_context([10, 20], 100, 2048)
    with pytest.raises(InputError, match="Row 2 of the batch: The prompt is 2000 tokens; with 100 new tokens"):
        check_batch_context([10, 2000], 100, 2048)
    assert fill_batch("mine", 3) == ["mine", *OTHER_REQUESTS[:2]] and len(fill_batch("x", 16)) == 16


def test_the_batch_policy_prices_the_widest_row():
    """One copying row among rows without a match: its drafts would be kept, but every row is padded to its width.
    At B = 1 the copy pays; at B = 16 the verify of 16 × (K + 1) does not, whatever one row gains."""
    from specdec_core.drafters.base import DraftOutlook
    copy = DraftOutlook(match_len=8, available=20, copying=True)
    none = DraftOutlook(match_len=0, available=0)
    policy = make_batch_k_policy(SpecConfig(k=4, k_policy="cost"), None, NGramDrafter(), _prices())
    assert policy.choose(1, 20, [copy])[0] == 4
    k16, why = policy.choose(16, 20, [copy] + [none] * 15)
    assert k16 == 0 and "batch of 16" in why
    assert policy.choose(4, 20, [none] * 4) == (0, "batch of 4: cost: no drafts (no row's prompt lookup finds a match)")
    inner = policy.inner
    rows = inner.row_profiles(2, [copy, none])
    tokens, ms = inner.rate(_prices().costs(2, 4), rows, 4)
    assert tokens == pytest.approx((1 + sum(0.98 ** j for j in range(1, 5)) + 1) / 2)
    assert ms == pytest.approx(1.0 + 0.1 + 10 + 10 * 2 * 5)     # overhead + one lookup + a verify 5 tokens wide
