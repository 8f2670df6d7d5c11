"""The benchmark's held-out section: its settings and their checks, the sides it runs, its table, and one short
real run of the shipped drafts on a held-out prompt (outputs identical to the baseline, a row per side)."""
import pytest

from specdec_core.bench import command as bench
from specdec_core.bench.heldout import (ACCEPTANCE_GOAL, BASELINE, DRAFTS, ONE_DRAFT, HeldoutSettings,
    render_heldout, run_heldout, setting_configs, validate_heldout)
from specdec_core.config import RECOMMENDED_CONFIDENCE_STOP, recommended_config
from specdec_core.training.prompts import heldout_prompts, training_prompts


def test_settings_cover_defaults_the_stop_fixed_k_with_the_stop_and_one_draft():
    cfgs = setting_configs(48)
    assert len(cfgs) == 4 and all(c.max_new_tokens == 48 for c in cfgs.values())
    defaults, unstopped, fixed, one = cfgs.values()
    assert (one.k_policy, one.k, one.confidence_stop) == ("fixed", 1, 0.0) and cfgs[ONE_DRAFT] is one
    assert defaults == recommended_config(max_new_tokens=48)
    assert (defaults.k_policy, defaults.confidence_stop) == ("cost", RECOMMENDED_CONFIDENCE_STOP)
    assert (unstopped.k_policy, unstopped.confidence_stop) == ("cost", 0.0)
    assert (fixed.k_policy, fixed.k, fixed.confidence_stop) == ("fixed", 4, RECOMMENDED_CONFIDENCE_STOP)


def test_heldout_prompts_are_not_training_prompts():
    assert not set(heldout_prompts(40, seed=HeldoutSettings.seed)) & set(training_prompts(4000))


@pytest.mark.parametrize("bad, message", [(dict(prompts=0), "held-out prompts"), (dict(prompts=10**6), "held-out prompts"),
                                          (dict(repeats=0), "repeats"), (dict(drafts=("self",)), "held-out draft"),
                                          (dict(drafts=()), "held-out draft"), (dict(max_new_tokens=0), "max_new_tokens")])
def test_bad_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        validate_heldout(HeldoutSettings(**bad))


def test_cli_only_heldout(capsys):
    s = bench.settings_from_args(bench.build_parser().parse_args(["--only", "heldout", "--heldout-prompts", "4"]))
    assert (s.compare, s.theory, s.heldout.prompts, s.heldout.seed) == (False, False, 4, HeldoutSettings.seed)
    assert bench.settings_from_args(bench.build_parser().parse_args(["--only", "compare"])).heldout is None
    quick = bench.settings_from_args(bench.build_parser().parse_args(["--quick"])).heldout
    assert (quick.prompts, quick.repeats) == (2, 1)
    assert bench.main(["--only", "heldout", "--heldout-prompts", "0"]) == 2     # refused before any model loads
    assert "held-out prompts" in capsys.readouterr().err


def test_render_marks_goals_refusals_and_sides_without_drafts():
    section = {"settings": {"prompts": 2, "seed": 23, "max_new_tokens": 64, "repeats": 3},
               "rows": [{"side": "feature: defaults", "speedup": 1.31, "lo": 1.1, "hi": 1.5, "goal": ">= 1.30",
                         "met": True, "acceptance": 0.41, "tokens_per_iteration": 1.6},
                        {"side": "trained: defaults", "speedup": None, "lo": None, "hi": None, "goal": ">= 1.30",
                         "met": None, "acceptance": None, "tokens_per_iteration": 1.0},
                        {"side": f"feature: {ONE_DRAFT}", "speedup": 1.2, "lo": 1.0, "hi": 1.4, "goal": "",
                         "met": None, "acceptance": 0.55, "drafted": 1200, "accepted": 660,
                         "freeform_drafted": 600, "freeform_accepted": 306,
                         "acceptance_goal": ">= 0.60", "acceptance_met": False, "tokens_per_iteration": 1.55}],
               "refusals": ["heldout-2: trained: defaults: outputs differ at token 3"]}
    text = render_heldout(section)
    assert "| feature: defaults | 1.31x [1.10–1.50] | >= 1.30 | yes | 0.41 |  |  | 1.60 |" in text
    assert "| trained: defaults | refused | >= 1.30 | not measured | no drafts |  |  | 1.00 |" in text
    assert (f"| feature: {ONE_DRAFT} | 1.20x [1.00–1.40] |  |  | 0.55 (660 / 1,200); free-form 0.51 (306 / 600) "
            "| >= 0.60 | NO | 1.55 |" in text)
    assert "outputs differ at token 3" in text and "seed=23" in text


@pytest.mark.slow
def test_a_short_real_run(bundled):
    """One shipped draft and prompt lookup (each model draft's sides are built alike; the other shipped draft's
    runs are tested in test_trained_draft_bundled.py)."""
    target, tok = bundled
    hs = HeldoutSettings(prompts=2, max_new_tokens=4, repeats=1, drafts=(DRAFTS[0], "ngram"))
    section = run_heldout(target, tok, hs, log=lambda _: None)
    sides = [r["side"] for r in section["rows"]]
    assert sides == [f"{DRAFTS[0]}: {label}" for label in setting_configs(4)] + ["ngram: defaults"]
    assert not section["refusals"] and BASELINE not in sides
    assert all(r["speedup"] > 0 and r["prompts"] == 2 for r in section["rows"])
    assert [bool(r["goal"]) for r in section["rows"]] == [True, False, False, False, False]
    one = [r for r in section["rows"] if r["acceptance_goal"]]
    assert [r["side"] for r in one] == [f"{DRAFTS[0]}: {ONE_DRAFT}"]
    for r in one:
        assert r["drafted"] > 0 and r["acceptance"] == r["accepted"] / r["drafted"]
        # the draw alternates: a free-form prompt, then a template pair; both draft at K = 1
        assert 0 < r["freeform_drafted"] < r["drafted"] and r["freeform_accepted"] <= r["accepted"]
        assert r["acceptance_met"] == (r["acceptance"] >= ACCEPTANCE_GOAL)
    assert section["prompts"] == heldout_prompts(2, seed=hs.seed)
    assert render_heldout(section).count("\n| ") == len(sides) + 1
