"""95 % intervals and the verdict: Wilson against published values, the bootstrap's determinism, the rounds'
t interval by hand, and what a trace (old or new) carries."""
import copy
import json
import math

import pytest

from conftest import make_tiny_lm
from specdec_core import SpecConfig, Trace, baseline_generate, speculative_generate
from specdec_core.stats.intervals import (BOOTSTRAP, CANT_TELL, ROUNDS, Interval, bootstrap_speedup, fill_stats,
                                    position_intervals, rounds_interval, speedup_interval, t975, verdict, wilson)

pytestmark = pytest.mark.usefixtures("one_thread")


# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Stat. Med. 17: 857-872, Table I,
# method 3 (Wilson score, no continuity correction; R: prop.test(x, n, correct = FALSE)$conf.int). By hand for
# 81/263: p = 0.30798, z^2/n = 3.84146/263 = 0.014606; centre = (p + z^2/2n) / (1 + z^2/n) = 0.31081;
# half = z/(1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2) = 1.93175 * 0.028745 = 0.055528 -> 0.2553 .. 0.3662.
@pytest.mark.parametrize("x, n, low, high", [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605),
                                             (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718), (29, 29, 0.8830, 1.0)])
def test_wilson_matches_published_values(x, n, low, high):
    lo, hi = wilson(x, n)
    assert lo == pytest.approx(low, abs=6e-5) and hi == pytest.approx(high, abs=6e-5)


def test_wilson_is_scipys_binomtest_interval():
    from scipy.stats import binomtest
    for x, n in ((81, 263), (0, 20), (29, 29), (1, 1), (7, 8), (500, 1000)):
        ci = binomtest(x, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson(x, n) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_wilson_edges():
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(0, 10)[1] == pytest.approx(1.959963984540054 ** 2 / (10 + 1.959963984540054 ** 2))  # x = 0
    with pytest.raises(ValueError):
        wilson(5, 4)


def test_rounds_interval_by_hand():
    # logs 0.1 and 0.3: mean 0.2, sd 0.141421, t(0.975, 1) = 12.706 -> half = 12.706 * 0.141421 / sqrt(2) = 1.2706
    iv = rounds_interval([math.exp(0.1), math.exp(0.3)])
    assert iv.method == ROUNDS and not iv.enough                      # two rounds decide nothing
    assert iv.point == pytest.approx(math.exp(0.2))
    assert (iv.low, iv.high) == pytest.approx((math.exp(0.2 - 1.2706), math.exp(0.2 + 1.2706)), rel=1e-4)
    assert rounds_interval([1.3]) is None
    assert rounds_interval([1.30, 1.32, 1.31, 1.29]).enough


def test_verdict_reads_the_interval_not_the_point():
    assert verdict(Interval(1.42, 1.31, 1.53, BOOTSTRAP)) == \
        "pays here: ×1.42 (95 % CI 1.31–1.53, bootstrap over iterations)"
    assert verdict(Interval(0.81, 0.74, 0.88, ROUNDS)).startswith("does not pay here: ×0.81")
    assert verdict(Interval(1.42, 0.95, 1.9, BOOTSTRAP)).startswith(CANT_TELL)      # straddles ×1
    assert verdict(Interval(1.42, 1.31, 1.53, BOOTSTRAP, enough=False)).startswith(CANT_TELL)
    assert verdict(None) == CANT_TELL


def test_bootstrap_is_deterministic_and_narrows_with_more_data():
    tok, ms = [3, 1, 2, 4, 1] * 4, [30.0, 22.0, 25.0, 33.0, 21.0] * 4
    base = [20.0, 21.0, 19.5, 22.0] * 10
    a = bootstrap_speedup(tok, ms, 50.0, base, 60.0, 1)
    assert a == bootstrap_speedup(tok, ms, 50.0, base, 60.0, 1)
    point = (sum(tok) / (50 + sum(ms))) / ((len(base) + 1) / (60 + sum(base)))
    assert a[0] < point < a[1]
    wide = bootstrap_speedup(tok[:5], ms[:5], 50.0, base[:4], 60.0, 1)
    assert wide[1] - wide[0] > a[1] - a[0]



def test_t_quantile_has_no_step_after_30_degrees_of_freedom():
    # t(0.975, 30) = 2.0423, t(0.975, 31) = 2.0395 (tables); a table that switched to the normal's 1.96 at 31 jumped
    assert t975(30) == pytest.approx(2.0423, abs=1e-4) and t975(31) == pytest.approx(2.0395, abs=1e-4)
    assert t975(1000) == pytest.approx(1.9623, abs=1e-4)
    with pytest.raises(ValueError):
        t975(0)


def test_bootstrap_degenerate_samples():
    """One iteration and one baseline token: nothing to resample, the interval is the point; no spread in the
    times: the same; one side with one observation still resamples the other."""
    one = bootstrap_speedup([3], [30.0], 10.0, [20.0], 0.0)
    assert one[0] == one[1] == pytest.approx((3 / 40) / (1 / 20))
    flat = bootstrap_speedup([2] * 12, [30.0] * 12, 10.0, [20.0] * 30, 5.0, 1)
    assert flat[0] == pytest.approx(flat[1]) == pytest.approx((24 / 370) / (31 / 605))
    lo, hi = bootstrap_speedup([3], [30.0], 10.0, [18.0, 22.0, 20.0, 25.0], 0.0)
    # the run's side fixed at 3 tokens / 40 ms; the baseline's 4 tokens take 72 ms (all 18) to 100 ms (all 25)
    assert (3 / 40) / (4 / 72) - 1e-12 <= lo < hi <= (3 / 40) / (4 / 100) + 1e-12

@pytest.fixture(scope="module")
def tiny_trace():
    t, d = make_tiny_lm(vocab_size=16, seed=4, scale=6.0), make_tiny_lm(vocab_size=16, seed=5, scale=6.0)
    cfg = SpecConfig(k=3, temperature=1.0, max_new_tokens=60, seed=1)
    trace = speculative_generate(t, d, [1, 2, 3, 4], cfg)
    trace.baseline = baseline_generate(t, [1, 2, 3, 4], cfg)
    return fill_stats(trace)


def test_trace_stats_carry_the_intervals(tiny_trace):
    st = tiny_trace.stats
    lo, hi = st.acceptance_ci
    assert lo <= st.acceptance_rate <= hi and (lo, hi) == wilson(st.accepted, st.drafted)
    assert st.speedup_ci[0] <= st.speedup <= st.speedup_ci[1] and st.speedup_ci_method == BOOTSTRAP
    assert st.verdict.split(":")[0] in ("pays here", "does not pay here", CANT_TELL)
    rows = position_intervals(tiny_trace)
    assert rows[0][0] == tiny_trace.stats.iterations - sum(1 for it in tiny_trace.iterations if not it.drafts)
    assert all(lo <= acc / n <= hi for n, acc, lo, hi in rows if n)
    d = json.loads(json.dumps(tiny_trace.to_dict()))
    assert Trace.from_dict(d).to_dict() == d


def test_clear_timings_give_clear_verdicts(tiny_trace):
    """The same tokens with made-up times: twice as fast per token, steady -> pays; twice as slow -> does not."""
    for factor, word in ((0.5, "pays here"), (2.0, "does not pay here")):
        tr = copy.deepcopy(tiny_trace)
        per_token = 20.0
        for it in tr.iterations:
            it.draft_ms, it.catchup_ms, it.other_ms = [0.0] * len(it.draft_ms), 0.0, 0.0
            it.verify_ms = per_token * factor * len(it.emitted)
        tr.stats.wall_ms = sum(it.verify_ms for it in tr.iterations)
        tr.stats.tokens_per_s = tr.stats.new_tokens / tr.stats.wall_ms * 1000
        n = len(tr.baseline.token_ms)
        tr.baseline.token_ms = [per_token] * n
        tr.baseline.wall_ms = per_token * n
        tr.baseline.tokens_per_s = n / tr.baseline.wall_ms * 1000
        iv = speedup_interval(tr)
        assert iv.point == pytest.approx(1 / factor, rel=0.02) and verdict(iv).startswith(word)


def test_old_traces_load_and_bad_intervals_are_refused(tiny_trace):
    d = json.loads(json.dumps(tiny_trace.to_dict()))
    old = copy.deepcopy(d)
    for f in ("acceptance_ci", "speedup", "speedup_ci", "speedup_ci_method", "verdict"):
        del old["stats"][f]
    st = Trace.from_dict(old).stats
    assert st.acceptance_ci == [] and st.speedup == 0.0 and st.verdict == ""
    bad = copy.deepcopy(d)
    bad["stats"]["speedup_ci"] = [1.0, "x"]
    with pytest.raises(ValueError, match="speedup_ci"):
        Trace.from_dict(bad)


@pytest.mark.slow
def test_an_eight_token_run_cannot_tell(bundled):
    from components.render.summary import summary_line, summary_rows
    from specdec_core.cli import summary_lines
    from specdec_core import encode_prompt, load_feature_draft
    model, tok = bundled
    ids = encode_prompt(tok, "Write a short poem about the sea at night.")
    cfg = SpecConfig(k=3, max_new_tokens=8)
    trace = speculative_generate(model, load_feature_draft(model).make_drafter(), ids, cfg, tokenizer=tok)
    trace.baseline = baseline_generate(model, ids, cfg, tokenizer=tok)
    fill_stats(trace)
    assert trace.stats.verdict.startswith(CANT_TELL)
    assert any(CANT_TELL in b for a, b, c in summary_rows(trace))
    assert CANT_TELL in summary_line(trace)
    assert any(CANT_TELL in line for line in summary_lines(trace, trace.baseline))


def test_comparison_ranks_carry_a_rounds_interval_and_the_k_sweep_a_bootstrap(tiny_pair):
    from specdec_core.teaching.sweeps import DraftRun, Ranked, k_sweep
    runs = [DraftRun("d", i, 10.0, s, 0.5, 0.5, 2.0, 5, 10, 20, None) for i, s in enumerate((1.2, 1.3, 1.25))]
    iv = Ranked("d", 1.25, 10.0, 0.5, 5, 10, runs).interval
    assert iv.method == ROUNDS and iv.point == pytest.approx(rounds_interval([1.2, 1.3, 1.25]).point)
    one = Ranked("d", 1.2, 10.0, 0.5, 5, 10, runs[:1]).interval
    assert one is None                              # one prompt and no bootstrap recorded: nothing made up
    t, d = tiny_pair
    sw = k_sweep(t, d, [1, 2, 3], SpecConfig(max_new_tokens=24), [1, 3])
    for r in sw.runs:
        point = r.tokens_per_s / sw.baseline_tokens_per_s
        assert r.speedup.method == BOOTSTRAP and r.speedup.low <= point <= r.speedup.high * 1.0001


def test_bench_aggregate_has_an_interval_over_prompts():
    from specdec_core.bench.measure import Comparison, Spread, aggregate
    comps = [Comparison("j", "A vs B", "a", "b", f"p{i}", "extractive", Spread.of([r, r * 1.01]), None)
             for i, r in enumerate((1.40, 1.45, 1.50))]
    agg = aggregate(comps, "j", "A vs B")
    iv = rounds_interval([c.ratio.median for c in comps])
    assert agg.ci == iv.to_list() and agg.verdict.startswith("pays here: ×")


def test_the_interval_of_a_difference():
    """Welch's t interval of two means (scipy's ttest_ind(equal_var=False)); a constant sample on both sides has
    no spread."""
    from scipy import stats

    from specdec_core.stats.intervals import mean_difference
    a, b = [1.0, 2.0, 3.0, 4.5], [2.0, 3.0, 4.0, 5.0, 6.5]
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert mean_difference(a, b) == pytest.approx((-1.475, ci.low, ci.high))
    assert mean_difference([4, 4, 4], [3, 3]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        mean_difference([1.0], [1.0, 2.0])
