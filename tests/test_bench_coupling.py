"""The benchmark's coupling section (``bench --only coupling``): settings, refusals, the report, one real run."""
from __future__ import annotations

import pytest

from specdec_core.bench import command as bench
from specdec_core.bench.coupling import GOAL, CouplingSettings, render_coupling, run_coupling, validate_coupling


def test_cli_only_coupling():
    s = bench.settings_from_args(bench.build_parser().parse_args(["--only", "coupling", "--coupling-prompts", "3"]))
    assert (s.compare, s.theory, s.heldout, s.tree) == (False, False, None, None)
    assert (s.coupling.prompts, s.coupling.temperatures, s.coupling.draft) == (3, (0.7, 1.0), "feature")
    assert bench.settings_from_args(bench.build_parser().parse_args(["--only", "tree"])).coupling is None
    quick = bench.settings_from_args(bench.build_parser().parse_args(["--quick", "--only", "coupling"])).coupling
    assert (quick.prompts, quick.max_new_tokens, quick.repeats) == (2, 24, 1)
    assert bench.main(["--only", "coupling", "--coupling-prompts", "0"]) == 2     # refused before any model loads


@pytest.mark.parametrize("bad", [dict(prompts=0), dict(repeats=0), dict(draft="ngram"), dict(temperatures=(0.0,)),
                                 dict(max_new_tokens=0)])
def test_bad_coupling_settings_are_refused(bad):
    with pytest.raises(ValueError):
        validate_coupling(CouplingSettings(**bad))


def _row(rule: str, acc: float, **kw) -> dict:
    return {"temperature": 0.7, "rule": rule, "tested": 100, "accepted": int(100 * acc), "acceptance": acc,
            "acceptance_ci": [acc - 0.1, acc + 0.1], "mean_alpha": acc, "mean_coupled_alpha": kw.get("c"),
            "mean_one_minus_tv": kw.get("tv"), "mean_floor": kw.get("floor"), "speedup": 1.2,
            "speedup_ci": [1.1, 1.3], "same_as_baseline": kw.get("same", 0), "runs": 4, "tokens_per_iteration": 2.0}


def test_the_report_states_the_goal():
    section = {"settings": {"prompts": 2, "seed": 23, "draft": "feature", "max_new_tokens": 24, "repeats": 2,
                            "temperatures": [0.7]},
               "rows": [_row("standard", 0.5), _row("coupled", 0.45, c=0.46, tv=0.52, floor=0.37, same=4)],
               "goals": [{"temperature": 0.7, "ratio": 0.9, "same_positions_ratio": 0.885, "met": True}]}
    text = render_coupling(section)
    assert "| 0.7 | coupled | 0.450 [0.350–0.550] (45/100) | 0.450 | 0.520 | 0.460 | 0.370 | 1.20x [1.10–1.30] | 4/4 |" \
        in text
    assert f">= {GOAL}" in text and "observed ratio 0.900 (met)" in text and "0.885" in text


@pytest.mark.slow
def test_coupling_bench_runs_on_the_bundled_model(bundled):
    target, tok = bundled
    cs = CouplingSettings(prompts=1, max_new_tokens=12, repeats=1, temperatures=(0.8,))
    section = run_coupling(target, tok, cs, log=lambda _: None)
    rows = {r["rule"]: r for r in section["rows"]}
    assert rows["coupled"]["same_as_baseline"] == rows["coupled"]["runs"] == 1     # invariance, measured
    assert rows["coupled"]["mean_floor"] <= rows["coupled"]["mean_one_minus_tv"]
    assert rows["standard"]["mean_coupled_alpha"] is None and rows["standard"]["tested"] > 0
    assert "| 0.8 | coupled |" in render_coupling(section)
