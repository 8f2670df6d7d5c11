"""The best K schedule in hindsight (``hindsight``): exact against brute force on hand-made outcomes, the
obvious schedules where they must be, prompt lookup's outcomes read off a real sequence, and no real run
priced below it."""
import itertools
import random

import pytest
import torch

from conftest import make_tiny_lm
from specdec_core.config import SpecConfig
from specdec_core.drafters.model import ModelDrafter
from specdec_core.drafters.ngram import NGramDrafter
from specdec_core.decoding.engine import speculative_generate
from specdec_core.policy.hindsight import (MAX_REPLAY_TOKENS, best_schedule, hindsight_split, iteration_cost,
    outcomes, priced_ms, replay_policy)
from specdec_core.policy.kpolicy import CostAwareK, FixedK, HeuristicK
from specdec_core.policy.costmodel import Costs, costs_from_traces

RISING = Costs(verify_ms=(10.0, 11.0, 12.0, 20.0, 30.0), draft_ms=0.1, draft_per_token=False,
               overhead_ms=1.0)


def _brute_force(rows, costs):
    """Every sequence of K choices, walked to the end: the least total time."""
    best = float("inf")
    for ks in itertools.product(*(range(len(r)) for r in rows)):   # one K per position, used if reached
        i, total = 0, 0.0
        while i < len(rows):
            proposed, accepted = rows[i][ks[i]]
            total += iteration_cost(costs, ks[i], proposed)
            i += accepted + 1
        best = min(best, total)
    return best


def test_best_schedule_is_exact_against_brute_force():
    rng = random.Random(0)
    for _ in range(30):
        n = rng.randint(1, 6)
        rows = []
        for i in range(n):
            row = [(0, 0)]
            for k in range(1, min(3, n - i - 1) + 1):
                proposed = rng.randint(0, k)
                row.append((proposed, rng.randint(0, proposed)))
            rows.append(row)
        ms, ks = best_schedule(rows, RISING)
        assert ms == pytest.approx(_brute_force(rows, RISING))
        i, total = 0, 0.0                                  # the schedule it returns takes that time
        for k in ks:
            total += iteration_cost(RISING, k, rows[i][k][0])
            i += rows[i][k][1] + 1
        assert i == n and total == pytest.approx(ms)


def test_obvious_schedules():
    n = 12
    copy = [[(k, k) for k in range(min(4, n - i - 1) + 1)] for i in range(n)]       # every draft right
    wrong = [[(k, 0) for k in range(min(4, n - i - 1) + 1)] for i in range(n)]      # every draft wrong
    flat = Costs(verify_ms=(10.0, 10.0), draft_ms=0.0, draft_per_token=False)
    ms, ks = best_schedule(copy, flat)                     # flat verify, sure drafts: three iterations
    assert len(ks) == 3 and ms == pytest.approx(30.0)
    ms, ks = best_schedule(wrong, RISING)                  # drafts that never land: never draft
    assert ks == [0] * n and ms == pytest.approx(n * 11.0)


def test_prompt_lookup_outcomes_read_off_the_sequence():
    prompt = [5, 6, 7, 8, 9, 1, 2]
    output = [5, 6, 7, 3, 4]          # after "... 1 2 5" lookup continues with 6 7 8 9: 6 and 7 are confirmed
    rows = outcomes(NGramDrafter(), prompt, output, k_max=4)
    assert [len(r) for r in rows] == [5, 4, 3, 2, 1]       # K never asks for more drafts than tokens left - 1
    assert rows[1] == [(0, 0), (1, 1), (2, 2), (3, 2)]     # after "5": 6 7 8 proposed, 6 7 confirmed
    assert rows[2][2] == (2, 1)                            # after "5 6": 7 8 proposed, 7 confirmed
    with pytest.raises(ValueError, match="prompt lookup"):
        outcomes(ModelDrafter(make_tiny_lm(vocab_size=16, seed=0)), prompt, output, k_max=2)


PROMPT = [3, 7, 1, 9, 3, 7, 1, 4, 3, 7, 1, 9]
COSTS = Costs(verify_ms=(10.0, 10.5, 11.0, 14.0, 18.0, 22.0), draft_ms=0.05, draft_per_token=False, overhead_ms=0.5)


def _tiny_runs(policies):
    """Greedy prompt-lookup runs of a tiny target on PROMPT, K = 5, one per K policy, and the target."""
    target = make_tiny_lm(vocab_size=32, seed=11, scale=6.0, layers=2)
    return target, {p: speculative_generate(target, NGramDrafter(), PROMPT,
                                            SpecConfig(k=5, max_new_tokens=24, k_policy=p, full_trace=False))
                    for p in policies}


def test_no_real_run_is_priced_below_the_hindsight_bound():
    torch.manual_seed(0)
    prompt, costs = PROMPT, COSTS
    target, runs = _tiny_runs(("fixed", "heuristic", "cost"))
    out = runs["fixed"].new_token_ids
    assert all(r.new_token_ids == out for r in runs.values())
    best, ks = best_schedule(outcomes(NGramDrafter(), prompt, out, k_max=5), costs)
    assert all(priced_ms(r, costs) >= best - 1e-9 for r in runs.values())
    assert sum(len(it.drafts) for it in runs["fixed"].iterations) > 0      # the bound was not trivially met
    # the "where the time went" row: the best schedule's split, priced by the run's own costs
    for r in runs.values():
        own = costs_from_traces([r], costs.verify_ms)
        split = hindsight_split(r, own)
        assert split is not None and split.tokens == len(out) and split.prefill == pytest.approx(own.prefill_ms)
        assert split.total <= own.prefill_ms + priced_ms(r, own) + 1e-6
    sampled = speculative_generate(target, NGramDrafter(), prompt, SpecConfig(k=2, max_new_tokens=8, temperature=1.0))
    assert hindsight_split(sampled, costs) is None                      # sampled: the output depends on K
    runs["fixed"].new_token_ids = [1] * (MAX_REPLAY_TOKENS + 1)
    assert hindsight_split(runs["fixed"], costs) is None                 # too long to replay for a figure


def test_replay_makes_the_engines_decisions_without_a_model():
    """A fixed or heuristic K replayed on a greedy run's output decides and is priced as the run was; the
    cost-aware policy replayed is never priced below the best schedule in hindsight."""
    prompt, costs = PROMPT, COSTS
    _, runs = _tiny_runs(("fixed", "heuristic"))
    out = runs["fixed"].new_token_ids
    for name, policy in (("fixed", FixedK(5)), ("heuristic", HeuristicK(5))):
        ms, ks = replay_policy(policy, prompt, out, costs)
        assert ks == [it.k for it in runs[name].iterations]
        assert ms == pytest.approx(priced_ms(runs[name], costs))
    best, _ = best_schedule(outcomes(NGramDrafter(), prompt, out, k_max=5), costs)
    ms, ks = replay_policy(CostAwareK(5, costs.verify_ms, None, False), prompt, out, costs)
    assert ms >= best - 1e-9 and len(ks) <= len(out)
    copy = [5, 6, 7, 8, 9, 10, 11, 12]             # an output that copies the prompt: the cost policy drafts deep
    ms, ks = replay_policy(CostAwareK(5, costs.verify_ms, None, False), copy + [1], copy, costs)
    assert max(ks) >= 3 and ms < replay_policy(FixedK(1), copy + [1], copy, costs)[0]
    # an output that ended (end-of-sequence) before the run's limit: the policy still plans for the limit
    ms_eos, ks_eos = replay_policy(FixedK(5), prompt, out[:6], costs, max_new_tokens=24)
    assert sum(ks_eos) > 0 and ms_eos > 0


def test_an_output_that_ends_with_end_of_sequence_may_be_drafted_to_its_end():
    """The engine lets K reach past the tokens left when the run's limit is further: a draft of the
    end-of-sequence token that lands ends the run with no token of the target's. Where feeding one token more
    costs less (this CPU's verify curve dips at some sizes), that is the fastest schedule, and the bound
    must know it: no policy's replay may be priced below it."""
    eos, prompt, out = 2, [1, 5, 6, 7, 8, 2, 3, 5], [6, 7, 8, 2]          # the output copies the prompt, EOS included
    dip = Costs(verify_ms=(10.0, 11.0, 12.0, 20.0, 14.0, 30.0), draft_ms=0.1, draft_per_token=False,
                overhead_ms=1.0)
    cut = outcomes(NGramDrafter(), prompt, out, k_max=5, eos_token_id=eos)          # the limit unknown: K <= 3
    assert [len(r) for r in cut] == [4, 3, 2, 1]
    rows = outcomes(NGramDrafter(), prompt, out, k_max=5, eos_token_id=eos, max_new_tokens=16)
    assert rows[0][4] == rows[0][5] == (4, 4) and [len(r) for r in rows] == [6, 6, 6, 6]  # proposals stop at the EOS
    best, ks = best_schedule(rows, dip)
    assert ks == [4] and best == pytest.approx(iteration_cost(dip, 4, 4))         # verify of 5 tokens: 14 ms
    assert best_schedule(cut, dip)[0] == pytest.approx(iteration_cost(dip, 3, 3))  # 20 ms
    ms, replayed = replay_policy(FixedK(4), prompt, out, dip, eos, max_new_tokens=16)
    assert replayed == [4] and ms >= best - 1e-9
    # an output that stopped at the limit (no EOS at its end) is never drafted past it
    assert [len(r) for r in outcomes(NGramDrafter(), prompt, out[:3], k_max=5, eos_token_id=eos,
                                     max_new_tokens=3)] == [3, 2, 1]
