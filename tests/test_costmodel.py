"""The calibrated cost model (theory), the calibration pass and the K policies, on hand-made timings
and tiny in-process models."""
import json

import pytest

from conftest import make_tiny_lm
from specdec_core import NGramDrafter, SpecConfig, speculative_generate
from specdec_core.policy.calibration import CalibrationCache, calibrate, measure_verify_curve, model_key
from specdec_core.drafters.base import DraftOutlook
from specdec_core.policy.kpolicy import (COPY_PRIOR, EXPLORE_BUDGET, PRIOR_ALPHA, CostAwareK, FixedK, HeuristicK,
    make_k_policy, probe_wait)
from specdec_core.policy.costmodel import (AcceptanceProfile, Costs, acceptance_profile, baseline_split, best_k,
    costs_from_traces, expected_tokens_profile, iteration_ms, merge_verify_curve, predict_speedup, predicted_speedup,
    predicted_split, predicted_tokens_per_s, finish_plan, proposal_lengths, time_split, tokens_distribution)
from specdec_core.policy.closed_form import expected_tokens, speedup
from specdec_core.trace import (BaselineResult, DraftRecord, IterationRecord, Stats, Trace)

CPU_CURVE = (39.7, 61.4, 76.4, 58.8, 53.5, 53.6, 53.7, 53.8, 55.0)   # this CPU: 2-3 tokens are slow


@pytest.mark.parametrize("alpha", [0.0, 0.4, 0.9, 1.0])
@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("c", [0.0, 0.05, 0.5])
def test_flat_verify_reduces_to_the_closed_form(alpha, k, c):
    costs = Costs((1.0,), draft_ms=c).flat()
    prof = AcceptanceProfile.constant(alpha)
    assert expected_tokens_profile(prof, k) == pytest.approx(expected_tokens(alpha, k))
    assert predicted_speedup(costs, prof, k) == pytest.approx(speedup(alpha, k, c))
    assert predicted_speedup(Costs(CPU_CURVE, draft_ms=c * 39.7), prof, k) <= speedup(alpha, k, c) + 1e-9


def test_per_position_acceptance_and_proposals():
    prof = AcceptanceProfile((0.5, 1.0, 0.0), (1.0, 0.5))
    # L = 0 never, L = 1 w.p. 0.5, L >= 2 w.p. 0.5 (then 0.25 / 0.25 for 2 / 3 at K = 3)
    assert proposal_lengths(prof, 3) == pytest.approx([0.0, 0.5, 0.25, 0.25])
    # tokens: L=1 -> 1 + .5 ; L=2 -> 1 + .5 + .5 ; L=3 -> 1 + .5 + .5 + 0
    assert expected_tokens_profile(prof, 3) == pytest.approx(0.5 * 1.5 + 0.25 * 2.0 + 0.25 * 2.0)
    costs = Costs((10.0, 20.0, 30.0, 40.0), draft_ms=1.0, draft_per_token=True, overhead_ms=2.0)
    assert iteration_ms(costs, prof, 3) == pytest.approx(2.0 + 0.5 * (1 + 20) + 0.25 * (2 + 30) + 0.25 * (3 + 40))
    lookup = Costs((10.0, 20.0, 30.0, 40.0), draft_ms=1.0, draft_per_token=False)
    assert iteration_ms(lookup, prof, 3) == pytest.approx(1.0 + 0.5 * 20 + 0.25 * 30 + 0.25 * 40)
    assert costs.t_verify(6) == pytest.approx(60.0)      # the last slope, extrapolated


def test_prefill_and_baseline_enter_the_prediction():
    costs = Costs((10.0,), prefill_ms=100.0, baseline_prefill_ms=50.0, baseline_overhead_ms=5.0)
    prof = AcceptanceProfile.constant(1.0)
    # K = 1, every draft accepted: 2 tokens per 10 ms iteration; 20 tokens = 10 iterations = 100 ms + 100 prefill
    assert predicted_tokens_per_s(costs, prof, 1, n_tokens=20) == pytest.approx(1000 * 20 / 200)
    assert predicted_speedup(costs, prof, 1, n_tokens=20) == pytest.approx((20 / 200) / (20 / (50 + 20 * 15)))


def test_the_cpu_curve_makes_k_3_to_7_cheaper_than_1_and_2():
    prof = AcceptanceProfile.constant(0.6)
    costs = Costs(CPU_CURVE, draft_ms=0.05, draft_per_token=False)
    k = best_k(costs, prof, 8)
    assert k >= 3
    assert predicted_tokens_per_s(costs, prof, 3) > predicted_tokens_per_s(costs, prof, 1)
    # with a flat verify and a costly draft the optimum moves as the closed form says
    assert best_k(Costs((1.0,), draft_ms=0.3).flat(), prof, 8) == max(range(1, 9), key=lambda k: speedup(0.6, k, 0.3))


def test_merge_prefers_the_runs_own_times_and_rescales_the_calibration():
    curve = merge_verify_curve({1: [20.0] * 3, 3: [35.0]}, [10.0, 12.0, 14.0, 16.0], 5)
    assert curve[0] == 20.0                       # own mean (3 samples)
    assert curve[1] == pytest.approx(24.0)        # calibration x 2 (the run is twice as slow)
    assert curve[2] == pytest.approx(28.0)        # one own sample is too few: the scaled calibration wins
    assert curve[4] == pytest.approx(36.0)        # beyond the calibration and the run: the last slope
    with pytest.raises(ValueError, match="no verify timing"):
        merge_verify_curve({}, None, 2)


def _d(alpha, accepted, tested=True):
    return DraftRecord(0, "", 1.0, alpha, alpha, None, accepted, tested)


def _hand_trace():
    """Two iterations at K = 2 with exact timings: verify 30 ms (3 tokens), 1 ms lookups, 4 ms other."""
    its = [IterationRecord(0, 5, 2, [_d(1.0, True), _d(1.0, True)], None, None, [0, 0, 1], [1.0], 30.0, 4.0),
           IterationRecord(1, 8, 2, [_d(1.0, True), _d(0.0, False)], None, None, [0, 1], [1.0], 30.0, 4.0)]
    st = Stats(new_tokens=5, iterations=2, drafted=4, accepted=3, wall_ms=100.0 + 2 * 35.0, prefill_ms=100.0,
               tokens_per_s=5 / 0.17)
    base = BaselineResult([1] * 5, "", [110.0, 15.0, 15.0, 15.0, 15.0], 170.0, 5 / 0.17)
    return Trace(config={"k": 2}, prompt="", prompt_ids=[1] * 5, iterations=its, new_token_ids=[0, 0, 1, 0, 1],
                 stats=st, baseline=base)


def test_prediction_is_the_identity_on_a_run_that_matches_its_model():
    tr = _hand_trace()
    prof = acceptance_profile([tr])
    assert prof.accept == (1.0, 0.5)
    costs = costs_from_traces([tr], calibrated_verify=[10.0, 20.0, 30.0])
    assert costs.t_verify(3) == 30.0 and costs.draft_ms == 1.0 and not costs.draft_per_token
    assert costs.overhead_ms == pytest.approx(4.0) and costs.prefill_ms == 100.0
    # 2.5 tokens per 35 ms iteration: exactly what was measured, and so is the baseline
    sp = time_split(tr)
    assert (sp.prefill, sp.draft, sp.verify, sp.overhead) == (100.0, 2.0, 60.0, 8.0)
    assert predict_speedup(tr, [10.0, 20.0, 30.0]) == pytest.approx(1.0)
    b = baseline_split(tr, t1=10.0)
    assert (b.prefill, b.verify, b.overhead) == (95.0, 50.0, 25.0)
    flat = predict_speedup(tr, [10.0, 20.0, 30.0], flat=True)
    assert flat == pytest.approx((5 / (100 + 2 * (1 + 10 + 4))) / (5 / 170))   # verify at t1 = 10 ms


def test_a_runs_tokens_are_priced_by_the_acceptance_at_the_k_it_chose():
    """A K policy drafts deep where it expects drafts to land (a copy) and shallow where they fail (free
    text): pooled over the run, per-position acceptance would charge the copy's iterations with the free
    text's failures. Priced per K, each iteration's expected tokens are what iterations at its K gave."""
    free = [IterationRecord(i, 5 + i, 1, [_d(0.0, False)], None, None, [0], [1.0], 10.0, 1.0) for i in range(4)]
    copy = [IterationRecord(4 + i, 9 + 8 * i, 7, [_d(1.0, True)] * 7, None, None, [0] * 7 + [1], [1.0], 30.0, 1.0)
            for i in range(3)]
    st = Stats(new_tokens=28, iterations=7, drafted=25, accepted=21, wall_ms=200.0, prefill_ms=50.0)
    tr = Trace(config={"k": 7}, prompt="", prompt_ids=[1] * 5, iterations=free + copy, new_token_ids=[0] * 28, stats=st)
    assert acceptance_profile([tr]).a(1) == pytest.approx(3 / 7)          # pooled: the copy looks unsure
    split = predicted_split(tr, costs_from_traces([tr], calibrated_verify=[10.0] * 8 + [30.0]))
    assert split.tokens == pytest.approx(4 * 1 + 3 * 8)                   # per K: exactly what the run emitted


def test_trace_round_trip_with_k_reason_and_calibration(tiny_pair):
    target, draft = tiny_pair
    cfg = SpecConfig(k=3, max_new_tokens=12, k_policy="cost")
    tr = speculative_generate(target, draft, [1, 2, 3, 4], cfg)
    assert all(it.k_reason.startswith("cost:") for it in tr.iterations)
    assert tr.calibration is not None and len(tr.calibration["verify_ms"]) >= 4
    back = Trace.from_dict(json.loads(json.dumps(tr.to_dict())))
    assert back.to_dict() == tr.to_dict()
    old = tr.to_dict()                                  # an older trace: no k_reason, no calibration, no k_policy
    del old["calibration"]
    del old["config"]["k_policy"]
    for it in old["iterations"]:
        del it["k_reason"]
    assert Trace.from_dict(old).iterations[0].k_reason == ""
    bad = tr.to_dict()
    bad["calibration"]["verify_ms"] = [-1.0]
    with pytest.raises(ValueError, match="calibration.verify_ms"):
        Trace.from_dict(bad)


def test_config_k_policy_and_adaptive_k():
    assert SpecConfig().k_policy in ("fixed", "cost", "heuristic")
    assert SpecConfig(adaptive_k=True).k_policy == "heuristic"
    assert SpecConfig(k_policy="heuristic").adaptive_k is True
    assert SpecConfig(k_policy="cost").adaptive_k is False
    cfg = SpecConfig(k_policy="cost")
    assert SpecConfig(**cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="k_policy"):
        SpecConfig(k_policy="fast")
    with pytest.raises(ValueError, match="adaptive_k=True"):
        SpecConfig(adaptive_k=True, k_policy="cost")
    from specdec_core.config import recommended_config
    assert (recommended_config().k, recommended_config().k_policy, recommended_config().confidence_stop) == (10, "cost", 0.3)
    assert recommended_config(confidence_stop=0.0).confidence_stop == 0.0
    assert recommended_config(k_policy="", k=3).k_policy == "cost"
    assert recommended_config(adaptive_k=True).k_policy == "heuristic"
    assert recommended_config(k_policy="fixed").k_policy == "fixed"


def test_heuristic_policy_matches_the_plus_two_minus_one_schedule():
    pol = HeuristicK(6)
    seen = []
    for accepted in ([True, True, True, True, True, True], [True, False], [False], [True, True, True, True]):
        k, why = pol.choose(100)
        seen.append(k)
        drafts = [_d(1.0 if a else 0.0, a) for a in accepted][:k]
        pol.observe(IterationRecord(0, 1, k, drafts, None, None, [0], [], 1.0, 0.0))
    assert seen == [6, 6, 5, 4] and pol.why == "heuristic: all 4 drafts accepted, K 4 → 6 (+2, cap 6)"
    assert FixedK(4).choose(2) == (2, "fixed K = 4, clipped to 2: 3 token(s) left")


def _observe(pol, k, accepted, verify_ms, proposed=None):
    n = k if proposed is None else proposed
    drafts = []
    for j in range(n):
        ok = j < accepted
        drafts.append(_d(1.0 if ok else 0.0, ok, tested=j <= accepted))
    pol.observe(IterationRecord(0, 1, k, drafts, None, None, [0], [0.05], verify_ms, 1.0))


def test_cost_policy_picks_the_obviously_right_k():
    # always accepted, flat verify, free drafts: the cap
    pol = CostAwareK(8, [10.0] * 9, 0.05, draft_per_token=False)
    for _ in range(5):
        k, _ = pol.choose(100)
        _observe(pol, k, k, 10.0)
    assert pol.choose(100)[0] == 8
    # never accepted: K = 0 (one target forward) beats paying for longer verifies; drafting resumes now
    # and then, less often the more it is predicted to lose
    pol = CostAwareK(8, list(CPU_CURVE), 0.05, draft_per_token=False)
    ks, whys = [], []
    for _ in range(40):
        k, why = pol.choose(100)
        ks.append(k), whys.append(why)
        _observe(pol, k, 0, CPU_CURVE[k] if k else CPU_CURVE[0])
    late = ks[20:]
    assert late.count(0) >= 13 and any(late)                    # ~6 % predicted loss: one iteration in 3
    assert not any(a and b for a, b in zip(late, late[1:]))       # drafting ones never back to back
    probes = [i for i, w in enumerate(whys) if "explore" in w]
    assert probes and all("more than K = 0 would for its tokens, so draft one iteration in" in whys[i] for i in probes)
    # acceptance 0.6 on the CPU curve: K >= 3 (2-3 token verifies are slower than 4-8 token ones)
    pol = CostAwareK(8, list(CPU_CURVE), 0.05, draft_per_token=False)
    pol.acc.num, pol.acc.den = {j: 6.0 for j in range(1, 9)}, {j: 10.0 for j in range(1, 9)}
    k, why = pol.choose(100)
    assert k >= 3 and f"K = {k} predicts" in why
    # an expensive model draft (c = 1) on a flat GPU-like curve: drafting never pays, K = 0, and since not
    # even perfect acceptance could pay, it never explores either
    pol = CostAwareK(8, [10.0] * 9, 10.0, draft_per_token=True)
    choices = [pol.choose(100) for _ in range(100)]
    assert all(k == 0 for k, _ in choices) and "cannot pay even if every draft were accepted" in choices[-1][1]
    assert pol.choose(0) == (0, "cost: no drafts (the last token is the target's own)")


def test_cost_policy_prices_with_what_it_was_given_never_with_the_runs_clock():
    """Prices are fixed before the run: two policies that see the same drafts' fates with other times (a loaded
    machine: verifies 3 x slower, drafts and host time 10 x) make the same choices, for the same reasons, and
    their costs stay those given; a trace's calibration prices a new policy the same (a replay)."""
    prices = dict(verify_ms=list(CPU_CURVE), draft_ms=0.05, draft_per_token=False, overhead_ms=1.5, catchup_ms=0.0)
    quiet = CostAwareK.from_calibration(8, prices)
    busy = CostAwareK.from_calibration(8, prices)
    before = quiet.costs()
    for i in range(30):
        (k, why), (k2, why2) = quiet.choose(100), busy.choose(100)
        assert (k, why) == (k2, why2)
        accepted = min(k, i % 3)
        _observe(quiet, k, accepted, CPU_CURVE[k])
        busy.observe(IterationRecord(0, 1, k, [_d(1.0 if j < accepted else 0.0, j < accepted, tested=j <= accepted)
                                               for j in range(k)], None, None, [0], [0.5] * k, 3 * CPU_CURVE[k],
                                     15.0, catchup_ms=40.0))
    assert quiet.costs() == busy.costs() == before
    assert before.verify_ms == tuple(CPU_CURVE[:9]) and (before.draft_ms, before.overhead_ms) == (0.05, 1.5)
    assert CostAwareK.from_calibration(8, {"verify_ms": [10.0, 12.0]}).costs(3).verify_ms == (10.0, 12.0, 12.0)
    flat = CostAwareK(4, None, None, True)                  # nothing given: every verify 1, drafts free
    assert flat.costs().verify_ms == (1.0,) * 5 and flat.costs().draft_ms == 0.0


def test_untested_deep_positions_back_off_to_the_shallower_estimate():
    """A model draft whose first drafts are accepted 0.3 of the time, never yet tested deeper: positions 2+
    are priced at the same 0.3 (not at an optimistic fixed prior), so one accepted draft does not send K
    to 3 on a CPU where K = 1 pays best (seen with the feature draft on the copy prompts)."""
    pol = CostAwareK(8, [22.0, 22.3, 22.6, 23.0, 23.5, 24.0, 25.0, 26.0, 27.0], 2.3, draft_per_token=True)
    pol.acc.num, pol.acc.den = {1: 0.3 * 21 - PRIOR_ALPHA}, {1: 20.0}
    assert pol.profile().accept == pytest.approx((0.3,) * 8)
    assert pol.choose(100)[0] == 1
    pol.acc.num[2], pol.acc.den[2] = 0.9 * 11 - 0.3, 10.0                     # tested: its own estimate
    assert pol.profile().accept[:3] == pytest.approx((0.3, 0.9, 0.9))


def test_exploration_costs_at_most_its_budget():
    """Where K = 0 is predicted best, the policy still drafts one iteration in w + 1, w chosen so that the
    extra time stays within EXPLORE_BUDGET of the time spent (seen with the feature draft: a1 fell to 0.09
    after hard first tokens, and a doubling wait then kept it from seeing a1 recover to 0.45)."""
    assert probe_wait(0.0, 11, 10) == 0 and probe_wait(-1.0, 11, 10) == 0
    assert probe_wait(0.3, 10, 10) == 0 and probe_wait(0.4, 10, 10) == 1     # 3 %: every time; 4 %: one in 2
    assert probe_wait(60.0, 107, 24) == 79                                  # drafting is hopeless: rarely
    for extra in (0.5, 1.0, 2.0, 5.0, 10.0):
        w = probe_wait(extra, 12, 10)
        assert extra / (w * 10 + 12) <= EXPLORE_BUDGET + 1e-9 < extra / ((w - 1) * 10 + 12) or w == 0

    def policy(a1: float) -> CostAwareK:
        pol = CostAwareK(4, [10.0] * 5, 1.0, draft_per_token=True)     # K = 0: 10 ms; K = 1: 11 ms, 1 + a1 tokens
        pol.acc.num, pol.acc.den = {1: a1 * 101 - PRIOR_ALPHA}, {1: 100.0}
        return pol
    k, why = policy(0.08).choose(100)          # 0.2 ms more than K = 0 for its 1.08 tokens (1.8 %): draft every time
    assert k == 1 and "costs 0.2 ms more than K = 0 would for its tokens, so draft one iteration in 1" in why
    pol = policy(0.02)                         # 0.8 ms more (7 %): two iterations at K = 0, then one drafting
    assert [pol.choose(100)[0] for _ in range(6)] == [0, 0, 1, 0, 0, 1]


def test_a_model_draft_that_sat_out_pays_its_catch_up():
    """A model draft with more than two tokens unseen (its prompt, or after K = 0 iterations) first runs a
    catch-up forward, timed apart: its price per token fed (calibrated, ``decoding.prices``) is priced into
    drafting now, apart from the per-step draft cost; the run's own catch-up time changes nothing."""
    pol = CostAwareK(4, [10.0] * 5, 1.0, draft_per_token=True, catchup_ms=2.0)
    pol.acc.num, pol.acc.den = {1: 0.3 * 101 - PRIOR_ALPHA}, {1: 100.0}        # a1 = 0.3: K = 1 wins
    one = [_d(1.0, True)]
    assert pol.choose(100, DraftOutlook(unseen=2))[0] == 1                   # nothing to catch up: K = 1 wins
    assert pol.choose(100, DraftOutlook(unseen=41))[0] == 0                  # the prompt's 40 tokens first: 80 ms
    pol.observe(IterationRecord(0, 1, 1, one, None, None, [0, 1], [7.0], 10.0, 0.0, catchup_ms=800.0))
    assert pol.catchup_ms == pytest.approx(2.0) and pol.draft_ms == pytest.approx(1.0)
    costs, prof = pol.costs(), pol.profile()
    pol.unseen = 2                                                           # bonus + last draft: the step's own
    assert pol.iteration_ms(costs, prof, 1) == pytest.approx(11.0)
    pol.unseen = 6                                                           # after K = 0 iterations: 5 tokens fed
    assert pol.iteration_ms(costs, prof, 1) == pytest.approx(21.0)
    assert pol.iteration_ms(costs, prof, 0) == pytest.approx(10.0)
    pol.unseen = 4                                                           # 3 tokens: never below one step
    pol.catchup_ms = 0.1
    assert pol.iteration_ms(costs, prof, 1) == pytest.approx(12.0)


def test_catch_up_forward_is_timed_apart(tiny_pair):
    """A model draft fills its cache on its first draft, not at start (a run that never drafts never pays
    for it), in a forward of its own that the trace records as catchup_ms and the cost model counts with
    the prefill."""
    target, draft = tiny_pair
    prompt = [1, 2, 3, 4, 5, 6, 7] * 3
    tr = speculative_generate(target, draft, prompt, SpecConfig(k=3, max_new_tokens=12))
    first, rest = tr.iterations[0], tr.iterations[1:]
    assert first.catchup_ms > 0 and all(it.catchup_ms == 0 for it in rest)
    assert tr.stats.draft_forwards == 1 + sum(len(it.draft_ms) for it in tr.iterations)
    assert time_split(tr).prefill == pytest.approx(tr.stats.prefill_ms + first.catchup_ms)
    assert Trace.from_dict(json.loads(json.dumps(tr.to_dict()))).iterations[0].catchup_ms == first.catchup_ms
    from specdec_core import ModelDrafter
    lazy = ModelDrafter(draft)
    assert lazy.start(prompt) == 0 and lazy.cache_len == 0 and lazy.outlook(prompt).unseen == len(prompt)


def test_tokens_distribution_and_the_finish_plan():
    prof = AcceptanceProfile((0.9, 0.6, 0.5), (1.0, 1.0, 0.5))
    for k in range(5):
        dist = tokens_distribution(prof, k)
        assert sum(dist) == pytest.approx(1.0) and len(dist) == k + 1
        assert sum(m * p for m, p in enumerate(dist, 1)) == pytest.approx(expected_tokens_profile(prof, k))
    # perfect acceptance, every verify 10 ms: 18 tokens are two iterations at K = 8, not K = 7's three
    sure = AcceptanceProfile((1.0,))
    ms = [10.0] * 9
    dists = [tokens_distribution(sure, k) for k in range(9)]
    assert finish_plan(ms, ms, dists, 18) == (8, pytest.approx(20.0))
    assert finish_plan(ms, ms, dists, 4) == (3, pytest.approx(10.0))      # never more drafts than tokens left - 1
    # a 9-token verify dearer than an 8-token one, as on this CPU: K = 7 has the better rate, yet 58 tokens
    # go fastest as 2 x 9 + 5 x 8 (74 ms), not 7 x 8 + 2 (80 ms)
    cpu = [10.0] * 8 + [12.0]
    k, t = finish_plan(cpu, cpu, dists, 58)
    assert k in (7, 8) and t == pytest.approx(2 * 12.0 + 5 * 10.0)
    assert 9 / 12.0 < 8 / 10.0
    # the next iteration's own price (a catch-up, say) counts once
    first = [10.0] * 8 + [30.0]
    k, t = finish_plan(first, ms, dists, 18)
    assert k != 8 and t == pytest.approx(30.0)            # three 10 ms iterations (e.g. 8 + 9 + 1), not 30 + 10


def test_prompt_lookup_learns_that_its_drafts_fail_and_never_asks_beyond_its_source():
    """Prompt lookup's drafts are priced by the running acceptance by position like any drafter's: drafts that
    keep failing in free text bring K to 0; no match means no drafts, and K never exceeds what the source
    offers."""
    pol = CostAwareK(8, list(CPU_CURVE), 0.05, draft_per_token=False)
    assert pol.profile(DraftOutlook(match_len=1, available=50)).a(1) == pytest.approx(PRIOR_ALPHA)
    assert pol.choose(100, DraftOutlook(match_len=0, available=0)) == (0, "cost: no drafts (prompt lookup finds no match)")
    ks = []
    for _ in range(30):
        k, _ = pol.choose(100, DraftOutlook(match_len=1, available=50))
        ks.append(k)
        _observe(pol, k, 0, CPU_CURVE[k])
    assert ks[0] >= 1 and ks[-10:].count(0) >= 7                          # mostly K = 0 once it has learnt
    fresh = CostAwareK(8, list(CPU_CURVE), 0.05, draft_per_token=False)
    assert fresh.choose(100, DraftOutlook(match_len=20, available=3))[0] <= 3   # nothing asked beyond the source


def test_prompt_lookup_follows_the_match_that_reaches_furthest_back():
    import numpy as np
    from specdec_core.drafters.ngram import find_match
    ids = np.array([1, 2, 3, 4, 5, 9, 9, 3, 4, 5, 7, 7, 1, 2, 3, 4, 5])
    assert find_match(ids, 3) == (5, 5)        # "3 4 5" at 2 (preceded by "1 2") beats the later one at 7
    assert ids[5:8].tolist() == [9, 9, 3]      # what it proposes from there
    assert NGramDrafter().outlook(ids.tolist()) == DraftOutlook(match_len=5, available=12)
    assert find_match(np.array([7, 1, 8, 1, 9, 1]), 3) == (4, 1)   # "1" twice, neither reaching further: the most recent
    assert find_match(np.array([1, 8, 1, 8, 5, 1]), 3) == (3, 1)   # both "1"s: the most recent
    assert find_match(np.array([3, 4]), 3) == (-1, 0)


def test_prompt_lookup_tells_a_copy_from_the_answers_start_and_where_its_source_ends():
    """The outlook says whether the match reaches back past the first generated token (all generated so far
    copies the source) and, told the end-of-sequence token, after how many tokens the source reaches it."""
    eos = 2
    prompt = [3, 5, 6, 7, 8, 9, 10, 11, eos, 3]         # a passage after a line break, the turn's end, a line break
    dr = NGramDrafter()
    dr.start(prompt)
    copy = dr.outlook(prompt + [5, 6], eos)             # the answer so far: the passage's first two tokens
    assert copy.copying is True and copy.match_len == 3 and copy.to_eos == 6   # 7 8 9 10 11, then the EOS
    assert dr.outlook(prompt + [5, 6], None).to_eos is None
    later = dr.outlook(prompt + [4, 9, 10], eos)         # "9 10" matches, but the answer began elsewhere
    assert later.copying is False and later.match_len == 2 and later.to_eos == 2
    assert dr.outlook(prompt, eos).copying is None       # nothing generated yet
    assert NGramDrafter().outlook(prompt + [5, 6], eos).copying is None       # never started: prompt unknown
    assert dr.outlook(prompt + [12], eos) == DraftOutlook(match_len=0, available=0)


def test_an_outlook_without_the_eos_keyword_still_works():
    """A custom drafter's ``outlook(ids)``, written before the end-of-sequence token was passed, is called
    without it; the engine's own drafters get it."""
    from specdec_core.drafters.base import outlook_of

    class Old:
        def outlook(self, ids):
            return DraftOutlook(match_len=len(ids))

    assert outlook_of(Old())([1, 2, 3], 2) == DraftOutlook(match_len=3)
    assert outlook_of(object()) is None
    dr = NGramDrafter()
    dr.start([3, 5, 6, 2, 3])
    assert outlook_of(dr)([3, 5, 6, 2, 3, 5], 2).to_eos == 2


def test_prompt_lookup_drafts_a_copy_from_the_answers_start_deep_and_not_past_its_end():
    """Drafts of a copy that began with the answer, the first included, are priced at least COPY_PRIOR, so a
    fresh two-token match is drafted deeper than the same match in free text; a source that reaches the
    end-of-sequence token bounds K and the finish plan (a copy that holds ends the run there)."""
    quiet = [20.4, 21.3, 23.2, 23.2, 31.2, 35.7, 41.5, 40.5, 47.0]      # this CPU on a quiet day
    fresh = dict(match_len=2, available=200)
    free, copying = DraftOutlook(**fresh, copying=False), DraftOutlook(**fresh, copying=True)
    pol = CostAwareK(8, quiet, 0.05, draft_per_token=False)
    assert pol.profile(copying).a(2) == pytest.approx(COPY_PRIOR) and pol.profile(free).a(2) < COPY_PRIOR
    assert pol.profile(copying).a(1) == pytest.approx(COPY_PRIOR)
    assert pol.profile(free).a(1) == pytest.approx(PRIOR_ALPHA)       # untested: the prior
    assert pol.choose(100, free)[0] == 3
    k, why = pol.choose(100, copying)
    assert k == 7 and "match of 2 tokens (all generated so far copies its source)" in why
    k, why = pol.choose(100, DraftOutlook(match_len=30, available=200, to_eos=4, copying=True))
    assert k == 3 and "finishes the last 4 tokens soonest" in why and "the source ends the sequence in 4)" in why
    # not a copy from the answer's start (a match in free text that points near the prompt's end): K stops
    # short of the source's end, but the run is not planned to end there
    k, why = pol.choose(100, DraftOutlook(match_len=30, available=200, to_eos=4, copying=False))
    assert k == 3 and "finishes" not in why and "the source ends the sequence in 4)" in why
    k, why = pol.choose(100, DraftOutlook(match_len=30, available=200, to_eos=1))
    assert (k, why) == (0, "cost: no drafts (the match's source ends the sequence next: the target's own token decides)")
    assert pol.choose(2, DraftOutlook(match_len=30, available=200, to_eos=9))[0] == 2


def test_calibration_times_each_size_and_is_cached(one_thread):
    model = make_tiny_lm(vocab_size=32, seed=3, layers=2)
    cache = CalibrationCache()
    curve = calibrate(model, 5, context=16, repeats=2, cache=cache)
    assert len(curve.verify_ms) == 5 and all(v > 0 for v in curve.verify_ms)
    assert curve.key == model_key(model) and curve.key[1:] == ("cpu", "float32")
    assert calibrate(model, 3, cache=cache) is curve                 # covered: no new measurement
    assert cache.get(model, 6) is None
    assert calibrate(model, 6, context=16, repeats=1, cache=cache).verify_ms.__len__() == 6
    other = make_tiny_lm(vocab_size=32, seed=3, layers=2)
    assert cache.get(other) is None                                   # another in-process model
    with pytest.raises(ValueError):
        measure_verify_curve(model, 0)


def test_a_draft_built_from_its_targets_config_gets_its_own_calibration():
    """Keyed by path, class and size: a draft made from its target's config (same ``_name_or_path``) is timed
    on its own, while the same checkpoint loaded twice shares one calibration."""
    target, draft, again = (make_tiny_lm(vocab_size=32, seed=s, hidden=h) for s, h in ((1, 32), (2, 16), (3, 32)))
    for m in (target, draft, again):
        m.config._name_or_path = "some/checkpoint"
    assert model_key(target) != model_key(draft) and model_key(target) == model_key(again)
    assert model_key(target)[0].startswith("some/checkpoint [LlamaForCausalLM, ")
    cache = CalibrationCache()
    cal = calibrate(target, 3, context=8, repeats=1, cache=cache)
    assert cache.get(draft) is None and cache.get(again) is cal


def test_calibration_separates_the_curves_shape_from_a_drifting_level():
    from specdec_core.policy.calibration import level_and_shape
    shape = {1: 1.0, 2: 1.0, 3: 1.5, 4: 1.3}
    rounds = [{n: v * level for n, v in shape.items()} for level in (50.0, 85.0, 52.0)]   # a slow middle round
    rounds[2][3] *= 1.4                                                             # one noisy point
    curve = level_and_shape(rounds)
    assert curve[0] == pytest.approx(curve[1])
    assert curve[2] / curve[0] == pytest.approx(1.5) and curve[3] / curve[0] == pytest.approx(1.3)
    # (per-size medians would give n = 3 at 109 ms against n = 1 at 52: 2.1 x, not 1.5 x)
    assert 60.0 <= sum(curve) / 4 <= 102.0                                            # a level among the rounds'
    one = [{1: 3.0, 2: 4.0}]
    assert level_and_shape(one) == pytest.approx((3.0, 4.0))


def test_cost_policy_keeps_greedy_outputs_exact(tiny_pair):
    target, draft = tiny_pair
    from specdec_core import baseline_generate
    base = baseline_generate(target, [1, 2, 3, 4], SpecConfig(max_new_tokens=24))
    for drafter in (draft, NGramDrafter()):
        tr = speculative_generate(target, drafter, [1, 2, 3, 4], SpecConfig(k=5, max_new_tokens=24, k_policy="cost"))
        assert tr.new_token_ids == base.new_token_ids
        assert all(0 <= it.k <= 5 for it in tr.iterations)
    pol = make_k_policy(SpecConfig(k=3, k_policy="heuristic"), target, NGramDrafter())
    assert isinstance(pol, HeuristicK)


def test_interior_sizes_are_interpolated_and_the_baseline_keeps_its_own_time():
    curve = merge_verify_curve({1: [10.0] * 3, 5: [50.0] * 3}, None, 6)
    assert curve == pytest.approx((10.0, 20.0, 30.0, 40.0, 50.0, 60.0))
    tr = _hand_trace()
    tr.iterations[1].verify_ms = 30.0
    # the baseline's own per-token time (15 ms) prices the baseline even when the run's t1 is larger
    costs = costs_from_traces([tr], calibrated_verify=[40.0, 50.0, 30.0])
    assert costs.t1 == pytest.approx(40.0) and costs.baseline_per_token == pytest.approx(15.0)
    assert predict_speedup(tr, [40.0, 50.0, 30.0]) == pytest.approx(1.0)
