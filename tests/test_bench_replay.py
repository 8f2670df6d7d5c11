"""Prompt lookup's K policies replayed on recorded answers (``bench_replay``): the summary's ratios on
hand-made rows, the CLI's refusals, one real answer replayed, and (slow) a short real report on the bundled
model."""
import math

import pytest

from specdec_core.bench.replay import (GROUPS, Answer, format_table, main, record, record_all, replay_report,
                                       summarize)


def _row(name, group, cost, heuristic, fixed, hindsight):
    return {"name": name, "group": group, "tokens": 10, "cost": cost, "heuristic": heuristic,
            "fixed": fixed, "hindsight": hindsight}


def test_summary_ratios_from_hand_made_rows():
    rows = [_row("a", "bench open-ended", 100.0, 110.0, {1: 100.0, 2: 120.0}, 90.0),
            _row("b", "bench open-ended", 50.0, 40.0, {1: 40.0, 2: 45.0}, 38.0),
            _row("c", "copy own answer", 20.0, 30.0, {1: 60.0, 2: 25.0}, 20.0)]
    s = {x["group"]: x for x in summarize(rows)}
    assert list(s) == ["bench open-ended", "copy own answer"]            # GROUPS order, empty groups left out
    free = s["bench open-ended"]
    assert free["prompts"] == 2
    assert free["cost_vs_k1"] == pytest.approx(math.sqrt(1.0 * 0.8))       # speed ratios: K = 1's ms over cost's
    assert free["cost_vs_best_fixed_worst"] == pytest.approx(0.8)           # b: best fixed 40 ms, cost 50 ms
    assert free["cost_vs_heuristic"] == pytest.approx(math.sqrt(1.1 * 0.8))
    assert free["hindsight_vs_k1"] == pytest.approx(math.sqrt(100 / 90 * 40 / 38))
    assert s["copy own answer"]["cost_vs_best_fixed_worst"] == pytest.approx(25 / 20)
    table = format_table(summarize(rows))
    assert table.count("\n") == 3 and "| copy own answer | 1 | 3.000 | 1.250 | 1.500 | 3.000 | 1.500 |" in table


@pytest.mark.parametrize("argv, what", [
    (["--heldout", "-1"], "--heldout"), (["--copies", "5", "--heldout", "2"], "--copies"),
    (["--max-new-tokens", "1"], "--max-new-tokens"), (["--k-max", "0"], "--k-max")])
def test_cli_refuses_bad_settings_before_loading_anything(argv, what, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + what) and "Traceback" not in err


@pytest.mark.slow
def test_a_recorded_copy_replayed_under_every_policy(bundled):
    """One real answer (the bundled model copying a passage), recorded and replayed, priced with a given verify
    curve (so the figures do not move with the machine's load): the report's path in the default run; the
    whole short report below is in the slow suite."""
    from specdec_core.bench.prompts import PROMPTS
    model, tok = bundled
    p = next(p for p in PROMPTS if p.name == "copy-passage")
    [answer] = record([(p.name, f"bench {p.kind}", p.text)], 16, model, tok)
    assert answer.group == "bench extractive" and len(answer.output_ids) == 16
    costs, [row] = replay_report(model, tok, [answer], k_max=4, verify_ms=[30.0, 31.0, 33.0, 34.0, 45.0])
    assert costs.verify_ms == (30.0, 31.0, 33.0, 34.0, 45.0) and row["tokens"] == 16
    assert set(row["fixed"]) == {1, 2, 3, 4}
    assert row["hindsight"] <= min(row["cost"], row["heuristic"], *row["fixed"].values()) + 1e-6
    assert row["fixed"][1] / row["cost"] > 1.4                # a copy: deep drafts land, the policy drafts deep


@pytest.mark.slow
def test_short_report_on_the_bundled_model(bundled):
    model, tok = bundled
    answers = record_all(model, tok, heldout=2, copies=1, seed=7, max_new_tokens=24)
    costs, rows = replay_report(model, tok, answers, k_max=4)
    assert [r["group"] for r in rows].count("held-out open-ended") == 2 and len(rows) == 5 + 2 + 1
    assert {r["group"] for r in rows} <= set(GROUPS) and len(costs.verify_ms) >= 5
    for r in rows:
        assert set(r["fixed"]) == {1, 2, 3, 4}
        assert r["hindsight"] <= min(r["cost"], r["heuristic"], *r["fixed"].values()) + 1e-6   # no policy beats it
    copy = next(r for r in rows if r["name"] == "copy-passage")
    assert copy["fixed"][1] / copy["cost"] > 1.5              # a copy: deep drafts land, the policy drafts deep
    empty = Answer("empty", "bench open-ended", answers[0].prompt_ids, [], 24)
    flat, rows = replay_report(model, tok, [answers[0], empty], k_max=4, verify_ms=[10.0, 10.0])
    assert flat.verify_ms == (10.0, 10.0)                     # a given curve replaces the calibrated one
    assert [r["name"] for r in rows] == [answers[0].name]     # nothing to replay in an empty answer


def test_cli_reads_recorded_answers_and_refuses_bad_ones(tmp_path, capsys):
    bad = tmp_path / "answers.json"
    bad.write_text('[{"name": "x"}]')
    assert main(["--answers", str(bad)]) == 2
    assert "cannot read recorded answers" in capsys.readouterr().err
    assert main(["--verify-ms", "30,abc"]) == 2 and "--verify-ms" in capsys.readouterr().err
    assert main(["--verify-ms", "30,-1"]) == 2
