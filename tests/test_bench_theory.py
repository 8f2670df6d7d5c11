"""The cost-model / K-policy bench sections on tiny in-process models (seconds): the interleaved pass,
the rows and summary they print, and the command's settings."""
from dataclasses import replace

import pytest
import torch

from conftest import make_tiny_lm
from specdec_core.bench import command as bench, theory as bt
from specdec_core.bench.measure import BenchPrompt
from specdec_core.policy.hindsight import priced_ms

PROMPT = [3, 7, 1, 9, 3, 7, 1, 4, 3, 7, 1, 9]


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return make_tiny_lm(vocab_size=32, seed=11, scale=6.0, layers=2)


def test_a_run_is_priced_with_the_prefill_and_the_catch_ups_after_its_first():
    from specdec_core.policy.costmodel import Costs
    from specdec_core.trace import IterationRecord, Trace
    its = [IterationRecord(i, 5 + i, k, [], None, None, [0], [], 0.0, 0.0, catchup_ms=cu)
           for i, (k, cu) in enumerate([(1, 6.0), (0, 0.0), (0, 0.0), (1, 4.0), (1, 0.0)])]
    tr = Trace(config={}, prompt="", prompt_ids=[1] * 5, iterations=its)
    costs = Costs((10.0, 12.0), 2.0, True, 1.0, prefill_ms=50.0)
    # the prefill (with the draft's first catch-up, as the sweep measured it), five iterations that each
    # verified one token (asked K but drafted none: no draft forwards priced), the second catch-up as measured
    assert bt.run_priced_ms(tr, costs) == pytest.approx(50.0 + priced_ms(tr, costs) + 4.0)
    assert priced_ms(tr, costs) == pytest.approx(5 * (10.0 + 1.0))


def test_theory_pass_rows_summary_and_markdown(target):
    ts = bt.TheorySettings(ks=(1, 2, 3), max_new_tokens=12, repeats=1, live_k=2)
    p = BenchPrompt("p", "extractive", "unused")
    from specdec_core.policy.calibration import calibrate
    curve = calibrate(target, 4, context=16, repeats=1)
    out = {"settings": {"ks": [1, 2, 3], "max_new_tokens": 12, "repeats": 1, "live_k": 2, "drafters": ["ngram"]},
           "calibration": curve.to_dict(), "sweep": [], "live": [], "policies": []}
    for name, factory in [d for d in bt.DRAFTERS if d[0] not in ("trained", "feature")]:   # those need the bundled target
        bases, traces = bt.measure_drafter(target, None, PROMPT, factory, ts)
        assert set(traces) == {"K=1", "K=2", "K=3", "cost", "heuristic"} and len(bases) == 1
        assert all(t.baseline is bases[0] for ts_ in traces.values() for t in ts_)
        assert {it.k_reason.split(":")[0] for t in traces["cost"] for it in t.iterations} == {"cost"}
        out["sweep"] += bt.sweep_rows(p, name, traces, bases, ts, curve.verify_ms)
        out["live"] += bt.live_rows(p, name, traces, ts, curve.verify_ms)
        out["policies"].append(bt.policy_row(p, name, traces, ts))
    rows = [r for r in out["sweep"] if r["drafter"] == "ngram"]
    assert [r["k"] for r in rows] == [1, 2, 3]
    assert all(r["same_as_baseline"] for r in out["sweep"])          # greedy: every side equals the baseline
    assert all(r["predicted"] > 0 and r["error"] == pytest.approx(r["predicted"] / r["measured"] - 1) for r in rows)
    assert {r["side"] for r in out["live"]} <= {"K=2", "cost"}
    pol = out["policies"][0]
    assert pol["cost_vs_best"] == pytest.approx(pol["cost"] / pol["best_fixed"]) == pytest.approx(pol["cost_vs_best_sweep"])
    # head to head: the sweep's best fixed K, cost and heuristic in paired rounds; ratios are per-round medians
    bases, traces = bt.measure_drafter(target, None, PROMPT, dict(bt.DRAFTERS)["ngram"], ts)
    k = bt.best_fixed_k(traces, ts)
    h2h = bt.head_to_head(target, None, PROMPT, dict(bt.DRAFTERS)["ngram"], replace(ts, h2h_repeats=3), k)
    assert set(h2h) == {f"K={k}", bt.AGAIN, "cost", "heuristic"} and all(len(v) == 3 for v in h2h.values())
    costs = bt.sweep_costs(traces, ts, curve.verify_ms)
    best_ms = bt._hindsight_ms(dict(bt.DRAFTERS)["ngram"](target), PROMPT, traces, None, ts, costs)
    row = bt.policy_row(p, "ngram", traces, ts, h2h, costs, best_ms)
    # prompt lookup has no catch-ups: a run is priced as the prefill every run pays and its decisions
    priced = {n: sorted(costs.prefill_ms + priced_ms(t, costs) for t in h2h[n]) for n in (f"K={k}", "cost", "heuristic")}
    assert row["priced_cost_vs_heuristic"] == pytest.approx(priced["heuristic"][1] / priced["cost"][1])
    assert row["priced_best_vs_heuristic"] == pytest.approx(priced["heuristic"][1] / priced[f"K={k}"][1])
    assert row["priced_cost_vs_best"] == pytest.approx(priced[f"K={k}"][1] / priced["cost"][1])
    assert row["hindsight_vs_heuristic"] == pytest.approx(priced["heuristic"][1] / (costs.prefill_ms + best_ms))
    assert row["hindsight_vs_heuristic"] >= 1.0 - 1e-9            # no schedule beats the best in hindsight
    paired = sorted(c.stats.tokens_per_s / b.stats.tokens_per_s for c, b in zip(h2h["cost"], h2h[f"K={k}"]))
    assert row["cost_vs_best"] == pytest.approx(paired[1]) and row["head_to_head_rounds"] == 3
    oracle = sorted(b.stats.tokens_per_s / h.stats.tokens_per_s for b, h in zip(h2h[f"K={k}"], h2h["heuristic"]))
    assert row["best_vs_heuristic"] == pytest.approx(oracle[1])
    assert row["same_as_baseline"] and len(row["iterations"]) == 3
    again = [a.stats.tokens_per_s / b.stats.tokens_per_s for a, b in zip(h2h[bt.AGAIN], h2h[f"K={k}"])]
    assert row["same_k_again"] == pytest.approx(again) and len(again) == 3
    out["policies"][0] = row
    out["summary"] = bt.summarize_theory(out)
    out["vs_heuristic"] = bt.summarize_vs_heuristic(out["policies"])
    assert out["summary"]["ngram"]["median_k"] == 2
    assert out["summary"]["ngram"]["hindsight_vs_heuristic_geomean"] == pytest.approx(row["hindsight_vs_heuristic"])
    assert out["summary"]["ngram"]["priced_cost_vs_best_min"] == pytest.approx(row["priced_cost_vs_best"])
    assert out["summary"]["self"]["hindsight_vs_heuristic_geomean"] is None       # a draft model: no bound
    md = bt.render_theory(out)
    assert "after the passes" not in md                                  # not measured: not said
    out["t1_end_ms"] = curve.verify_ms[0] * 1.5
    assert "+50 %" in bt.render_theory(out) and "speed moved" in bt.render_theory(out)
    out["t1_end_ms"] = curve.verify_ms[0] * 1.05
    assert "+5 %" in bt.render_theory(out) and "speed moved" not in bt.render_theory(out)
    assert "| p | ngram | 2 |" in md and "cost ÷ best fixed" in md and "n=1:" in md
    ngram_summary = [line for line in md.splitlines() if line.startswith("| ngram | ")][-1]
    assert "best fixed ÷ heuristic" in md
    assert ngram_summary.endswith(f"| {out['summary']['ngram']['best_vs_heuristic_geomean']:.2f} | "
                                  f"{row['priced_cost_vs_best']:.2f} | {row['priced_cost_vs_heuristic']:.2f} | "
                                  f"{row['hindsight_vs_heuristic']:.2f} |")
    ngram_row = [line for line in md.splitlines() if line.startswith("| p | ngram | ")][-1]
    assert f"| {row['priced_cost_vs_best']:.2f} | {row['priced_cost_vs_heuristic']:.2f} |" in ngram_row
    assert "over all 2 (prompt, drafter) pairs" in md and "hindsight ÷ heuristic" in md
    assert f"| {min(again):.2f}–{max(again):.2f} |" in ngram_row and "3 per-round ratios of the two" in md


def test_summary_applies_the_targets():
    sweep = [{"drafter": "d", "k": k, "error": e, "error_loo": e} for k, e in ((1, 0.15), (2, 0.05), (3, -0.25))]
    live = [{"drafter": "d", "error": 0.02}]
    pol = [{"drafter": "d", "cost_vs_best": 0.97, "cost_vs_heuristic": 1.2, "best_vs_heuristic": 1.21},
           {"drafter": "d", "cost_vs_best": 1.0, "cost_vs_heuristic": 1.0, "best_vs_heuristic": 1.0}]
    s = bt.summarize_theory({"sweep": sweep, "live": live, "policies": pol})["d"]
    assert s["median_k"] == 2 and s["error_at_median_k"] == pytest.approx(0.05)
    assert s["error_every_k"] == pytest.approx(0.25) and s["best_vs_heuristic_geomean"] == pytest.approx(1.1)
    assert s["met"] == {"median_k": True, "every_k": False, "live": True, "vs_best_fixed": True}
    pol.append({"drafter": "e", "cost_vs_best": 1.0, "cost_vs_heuristic": 0.9, "best_vs_heuristic": 1.0})
    overall = bt.summarize_vs_heuristic(pol)            # the geometric mean over every (prompt, drafter) pair
    assert overall["pairs"] == 3 and overall["cost_vs_heuristic_geomean"] == pytest.approx((1.2 * 0.9) ** (1 / 3))
    assert not overall["met"]                          # 1.026 < 1.05
    assert bt.summarize_vs_heuristic(pol[:1])["met"] and bt.summarize_vs_heuristic([]) is None


def test_cli_theory_settings_and_refusals(capsys):
    s = bench.settings_from_args(bench.build_parser().parse_args(["--quick"]))
    assert s.theory and s.compare and s.theory_ks == (1, 2, 3, 4) and s.theory_repeats == 1 and s.theory_h2h_repeats == 1
    assert s.theory_drafters == tuple(n for n, _ in bt.DRAFTERS)
    s = bench.settings_from_args(bench.build_parser().parse_args(["--only", "theory"]))
    assert s.theory and not s.compare and s.theory_ks == tuple(range(1, 9)) and s.theory_max_new_tokens == 64
    assert bench.main(["--theory-drafters", "nope"]) == 2
    assert "unknown or no theory drafter" in capsys.readouterr().err
