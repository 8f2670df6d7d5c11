"""The exactness lab with token trees: each run drafts a tree (the toy draft through ModelDrafter's tree
growth), the verdict covers the tree's verification, and the "p/q ratio on top-k siblings" bug is flagged
where it can bias and honestly explained where it cannot."""
from __future__ import annotations

import pytest

from specdec_core import InjectedBugs
from specdec_core.bugs import NO_BUGS
from specdec_core.teaching.lab import LabSettings, bug_notes, run_exactness
from specdec_core.teaching.toy import make_toy_pair

pytestmark = pytest.mark.usefixtures("one_thread")

TOPK_BUG = InjectedBugs(topk_ratio_rule=True)


@pytest.fixture(scope="module")
def toy():
    return make_toy_pair(0.5)


def _lab(toy, bugs=NO_BUGS, setup="toy", n_runs=2000, **kw):
    s = LabSettings(n_tokens=2, k=2, temperature=1.0, n_runs=n_runs, seed=0, tree_nodes=4, tree_top_k=2, **kw)
    draft = toy.target if setup == "self" else toy.draft
    return run_exactness(toy.target, draft, toy.tokenizer.encode("the cat"), s, setup, toy.tokenizer, bugs)


def test_a_short_tree_lab_run_drafts_trees(toy):
    r = _lab(toy, n_runs=150)
    o = r.outcomes
    assert o.tree_runs == o.drafted_runs == 150 and 0 < o.accepted < o.tested
    assert r.comparison.p_value is not None
    assert not any("drafted a chain" in n for n in r.notes)


@pytest.mark.slow
def test_the_ratio_rule_on_top_k_siblings_is_flagged_quickly(toy):
    """The target drafting for itself: its top child is p's argmax, which the ratio rule always accepts
    (p = q), so the runs emit p's favourite far too often."""
    r = _lab(toy, TOPK_BUG, setup="self", n_runs=150)
    assert r.comparison.verdict == "biased", r.comparison.message
    assert r.bugs == ["topk_ratio_rule"] and any("Expect a bias" in n for n in r.notes)


@pytest.mark.slow
def test_the_correct_tree_engine_passes_and_the_bug_is_caught_on_the_toy_draft(toy):
    ok = _lab(toy)
    assert ok.comparison.verdict == "exact", ok.comparison.message
    bad = _lab(toy, TOPK_BUG)
    assert bad.comparison.verdict == "biased", bad.comparison.message


def test_topk_ratio_notes_are_honest():
    def note(setup="toy", temperature=1.0, tree_nodes=4):
        return bug_notes(TOPK_BUG, setup, temperature, 1, 2, tree_nodes)[0]
    assert "does not apply to a chain" in note(tree_nodes=0)
    assert "no effect in greedy mode" in note(temperature=0.0)
    assert "no effect with prompt lookup" in note(setup="ngram")
    assert "Expect a bias" in note()


def test_tree_settings_are_validated():
    with pytest.raises(ValueError, match="tree_nodes"):
        LabSettings(tree_nodes=-1)
    with pytest.raises(ValueError, match="tree_top_k"):
        LabSettings(tree_top_k=0)
