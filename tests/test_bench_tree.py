"""The benchmark's tree section (``bench --only tree``): settings, refusals, the report, and one real run."""
from __future__ import annotations

import pytest

from specdec_core.bench import command as bench
from specdec_core.bench.tree import (BASELINE, FIXED_DEPTH, TreeSettings, render_tree, run_tree_bench, setting_configs,
    validate_tree)


def test_cli_only_tree():
    s = bench.settings_from_args(bench.build_parser().parse_args(
        ["--only", "tree", "--tree-prompts", "2", "--tree-drafts", "feature,ngram", "--tree-nodes", "8"]))
    assert (s.compare, s.theory, s.heldout) == (False, False, None)
    assert (s.tree.prompts, s.tree.drafts, s.tree.nodes, s.tree.top_k) == (2, ("feature", "ngram"), 8, 4)
    assert bench.settings_from_args(bench.build_parser().parse_args(["--only", "heldout"])).tree is None
    quick = bench.settings_from_args(bench.build_parser().parse_args(["--quick", "--only", "tree"])).tree
    assert (quick.prompts, quick.max_new_tokens, quick.repeats) == (1, 24, 1)
    assert bench.main(["--only", "tree", "--tree-drafts", "nope"]) == 2        # refused before any model loads


@pytest.mark.parametrize("bad", [dict(prompts=0), dict(repeats=0), dict(drafts=()), dict(drafts=("x",)),
                                 dict(nodes=1), dict(top_k=0), dict(max_new_tokens=0)])
def test_bad_tree_settings_are_refused(bad):
    with pytest.raises(ValueError):
        validate_tree(TreeSettings(**bad))


def test_settings_compare_a_chain_and_a_tree_of_the_same_depth():
    cfgs = setting_configs(TreeSettings(nodes=12, top_k=3), 0.7)
    chain, tree, chain_d, tree_d = cfgs.values()
    assert (chain.k, chain.tree_nodes, tree.k, tree.tree_nodes, tree.tree_top_k) == (FIXED_DEPTH, 0, FIXED_DEPTH, 12, 3)
    assert chain_d.k_policy == tree_d.k_policy == "cost" and (chain_d.tree_nodes, tree_d.tree_nodes) == (0, 12)
    assert all(c.temperature == 0.7 for c in cfgs.values())


def row(side: str, speedup: float | None, tpi: float, share: float = 0.0) -> dict:
    return {"side": side, "speedup": speedup, "lo": speedup and speedup - 0.1, "hi": speedup and speedup + 0.1,
            "prompts": 2, "refused": [] if speedup else ["heldout-1: outputs differ"], "tokens_per_iteration": tpi,
            "verify_ms_per_iteration": 40.0, "fed_per_iteration": 5.0, "tree_share": share, "acceptance": 0.5,
            "predicted": 1.2, "predicted_flat": 1.9, "priced": 1.1}


def test_report_states_the_goals():
    ts = TreeSettings(drafts=("feature",), temperatures=(0.0,))
    labels = list(setting_configs(ts, 0.0))
    rows = [row(f"feature T 0: {labels[0]}", 1.2, 2.0), row(f"feature T 0: {labels[1]}", 1.1, 2.5, 1.0),
            row(f"feature T 0: {labels[2]}", 1.3, 2.1), row(f"feature T 0: {labels[3]}", None, 2.2, 0.2)]
    from specdec_core.bench.tree import _goals
    goals = _goals(rows, ts)
    assert goals[0]["tokens_gain"] == pytest.approx(1.25) and goals[0]["tokens_met"] is True
    assert goals[0]["speed_met"] is None                               # refused: no verdict
    text = render_tree({"settings": vars(ts) | {"fixed_depth": FIXED_DEPTH}, "rows": rows, "goals": goals})
    assert "| feature, T 0 | 1.25 | > 1 | yes |" in text
    assert "refused" in text and "heldout-1: outputs differ" in text
    assert text.count("\n| feature T 0") == 4


def test_runs_are_priced_alike():
    from specdec_core.bench.tree import _price
    run = dict(curve=[10.0, 10.0, 15.0, 20.0], model_draft=True, tokens=6)
    chain = dict(run, plan=[(3, 2), (3, 2)], draft_ms=[1.0, 1.0, 9.0, 1.0])           # 2 iterations: 2 drafts each
    tree = dict(run, plan=[(4, 2), (1, 0)], draft_ms=[1.0, 3.0], curve=None)           # a tree, then K = 0
    lookup = dict(run, plan=[(4, 1)], draft_ms=[0.5], model_draft=False, curve=None)
    sides = {"d T 0: chain": {"runs": [chain]}, "d T 0.7: tree": {"runs": [tree]}, "n T 0: x": {"runs": [lookup]}}
    _price(sides)
    # draft d's median forward: median(1, 1, 9, 1, 1, 3) = 1; the baseline: 6 tokens x 10 ms
    assert chain["priced"] == pytest.approx(60 / (2 * (15 + 2)))
    assert tree["priced"] == pytest.approx(60 / ((20 + 2) + 10))
    assert lookup["priced"] == pytest.approx(60 / (20 + 0.5))                        # one lookup per iteration


@pytest.mark.slow
def test_tree_bench_runs_on_the_bundled_model(bundled):
    target, tok = bundled
    ts = TreeSettings(prompts=1, max_new_tokens=12, repeats=1, drafts=("ngram",), nodes=6, top_k=2)
    section = run_tree_bench(target, tok, ts, log=lambda _: None)
    sides = [r["side"] for r in section["rows"]]
    assert len(sides) == 8 and BASELINE not in sides                   # 4 settings x 2 temperatures
    greedy = [r for r in section["rows"] if " T 0:" in r["side"]]
    assert all(r["speedup"] is not None for r in greedy), [r["refused"] for r in greedy]   # outputs equal
    fixed_tree = next(r for r in greedy if "tree of 6, fixed" in r["side"])
    assert fixed_tree["tree_share"] > 0 and fixed_tree["predicted_flat"] is not None
    assert render_tree(section).count("\n| ngram T") == 8
