"""Token trees in the UI, without a browser: the figures on hand-made TreeRecords (the tidy layout, the labels
escaped, the sibling walk, the accepted path, the attention mask, the anatomy of a tree iteration, the hints for
chains and empty trees), the viewer's tree outputs, the tree settings of Live and /generate, and the K sweep's
chain-vs-tree rows."""
from __future__ import annotations

import json

import gradio as gr
import pytest

from components.render import palette as pal
from components.render.anatomy import anatomy_figure
from components.render.tree import has_trees, sibling_order, tidy_rows, tree_figure, tree_mask_figure, walk_text
from components.render.figures import positions_figure
from components.render.base import instructive_index
from components.render.lab import ksweep_figure
from components.render.measures import outcome, position_counts, running_acceptance
from components.pages.replay import load_example
from components.serving.inputs import make_config
from components.render.tokens import tokens_html
from components.pages.teaching.ksweep import ksweep_md, ksweep_table
from components.pages.viewer import render_iteration, render_trace
from specdec_core import Trace
from specdec_core.models.tree_attention import visibility
from specdec_core.teaching.sweeps import KRun, KSweep
from specdec_core.trace import (BonusRecord, DraftRecord, IterationRecord, ResampledRecord, TreeNodeRecord,
                                TreeRecord)

NASTY = "<b>x</b>&"


def _node(token_id: int, text: str, parent: int, status: str, q: float = 0.5, p: float = 0.4,
          alpha: float | None = None, u: float | None = None) -> TreeNodeRecord:
    return TreeNodeRecord(token_id, text, parent, q, p, status, alpha, u)


def _draft(nd: TreeNodeRecord) -> DraftRecord:
    return DraftRecord(nd.token_id, nd.text, nd.q, nd.p, min(1.0, nd.p / nd.q), nd.u, True)


def _iteration(index: int, nodes: list[TreeNodeRecord], path: list[int], end: str, rule: str = "recursive_rejection",
               siblings: str = "independent") -> IterationRecord:
    drafts = [_draft(nodes[j]) for j in path]
    resampled = ResampledRecord(90, " resampled", 0.3, position=len(path)) if end == "resampled" else None
    bonus = BonusRecord(91, "bonus", 0.6) if end == "bonus" else None
    emitted = [d.token_id for d in drafts] + [90 if resampled else 91]
    return IterationRecord(index=index, start_len=5 + index, k=len(nodes), drafts=drafts, resampled=resampled,
                           bonus=bonus, emitted=emitted, draft_ms=[1.0], verify_ms=12.0, other_ms=0.5,
                           tree=TreeRecord(nodes, siblings, rule, path))


def _chain(index: int) -> IterationRecord:
    d = DraftRecord(7, "chain", 0.5, 0.5, 1.0, 0.2, True)
    return IterationRecord(index=index, start_len=5, k=1, drafts=[d], resampled=None, bonus=BonusRecord(8, "b", 0.5),
                           emitted=[7, 8], draft_ms=[1.0], verify_ms=10.0, other_ms=0.5, k_reason="a chain pays more")


def _trace(*iterations: IterationRecord) -> Trace:
    its = list(iterations)
    return Trace(config={"k": 4, "temperature": 1.0, "max_new_tokens": 16, "tree_nodes": 6}, prompt="hi",
                 prompt_ids=[1, 2, 3], iterations=its, new_token_ids=[t for it in its for t in it.emitted])


def _branchy() -> IterationRecord:
    """Root -> (a rejected, b accepted); b -> (c accepted, d untested); c -> e rejected; then a resampled token."""
    nodes = [_node(10, " a", -1, "rejected", 0.5, 0.1, alpha=0.2, u=0.7),
             _node(11, NASTY, -1, "accepted", 0.4, 0.6, alpha=1.0, u=0.3),
             _node(12, " c", 1, "accepted", 0.5, 0.5, alpha=1.0, u=0.9),
             _node(13, " d", 1, "untested"),
             _node(14, "\n", 2, "rejected", 0.5, 0.2, alpha=0.4, u=0.8)]
    return _iteration(0, nodes, [1, 2], "resampled")


# --- layout and walk -------------------------------------------------------------------------------------

def test_tidy_rows_give_each_leaf_a_row_and_centre_parents():
    rows, root, n = tidy_rows([-1, -1, 1, 1, 2])
    assert rows[0] == 0 and rows[4] == 1 and rows[3] == 2       # leaves in depth-first order
    assert rows[2] == 1 and rows[1] == 1.5 and root == 0.75 and n == 3
    rows, root, n = tidy_rows([-1, 0, 1], extra_under=2)      # a chain plus the final token: one straight row
    assert rows == [0, 0, 0, 0] and root == 0 and n == 1
    assert tidy_rows([]) == ([], 0.0, 1)
    assert tidy_rows([], extra_under=-1) == ([0.0], 0.0, 1)
    deep = list(range(-1, 2999))                               # deep untrusted trees: no recursion limit
    assert tidy_rows(deep)[1] == 0


def test_sibling_order_and_walk_text():
    it = _branchy()
    assert sibling_order(it.tree) == [1, 2, 1, 2, 1]
    assert walk_text(it.tree.nodes[0], 1) == "try 1: α 0.20 u 0.70 ✗"
    assert walk_text(it.tree.nodes[1], 2) == "try 2: α 1.00 u 0.30 ✓"
    assert walk_text(it.tree.nodes[3], 2) == "not tested"
    assert walk_text(_node(1, "x", -1, "accepted"), 1, "greedy") == "= argmax p ✓"      # rules with no α
    assert walk_text(_node(1, "x", -1, "rejected"), 2, "greedy") == "≠ argmax p ✗"
    assert walk_text(_node(1, "x", -1, "accepted"), 1, "target_draw") == "y ~ p hit it ✓"
    assert walk_text(_node(1, "x", -1, "rejected"), 3, "target_draw") == "y ~ p missed it ✗"


# --- the tree figure ---------------------------------------------------------------------------------------

def _nodes_trace(fig):
    return next(t for t in fig.data if t.mode == "markers+text")


def test_tree_figure_labels_every_node_escaped_with_q_p_and_the_walk():
    fig = tree_figure(_trace(_branchy()), 0)
    nodes = _nodes_trace(fig)
    labels = list(nodes.text)
    assert len(labels) == 1 + 5 + 1                              # root, five nodes, the resampled token
    assert labels[0] == "<b>root</b><br>(the prompt's end)"
    assert "&lt;b&gt;x&lt;/b&gt;&amp;" in labels[2] and "<b>x</b>" not in labels[2]
    assert "q 0.40 · p 0.60" in labels[2] and "try 2: α 1.00 u 0.30 ✓" in labels[2]
    assert "↵" in labels[5]
    assert "resampled" in labels[6]
    assert all("<b>x</b>" not in h for h in nodes.hovertext)
    assert list(nodes.x) == [0, 1, 1, 2, 2, 3, 3]                 # x = depth; the resampled token after c
    colours = list(nodes.textfont.color)
    assert colours[1] == pal.REJECTED and colours[2] == pal.ACCEPTED and colours[4] != pal.ACCEPTED
    assert colours[6] == pal.RESAMPLED
    title = fig.layout.title.text
    assert "iteration 1" in title and "5 nodes drafted" in title and "recursive rejection (SpecInfer)" in title
    assert "4 tested" in title and "accepted path 2 nodes" in title


def test_the_accepted_path_is_drawn_thick_from_the_root_to_the_final_token():
    fig = tree_figure(_trace(_branchy()), 0)
    path = next(t for t in fig.data if t.mode == "lines" and t.line.color == pal.ACCEPTED)
    segments = [(x, y) for x, y in zip(path.x, path.y) if x is not None]
    assert len(segments) == 2 * 3                                # root->b, b->c, c->resampled
    thin = next(t for t in fig.data if t.mode == "lines" and t.line.color != pal.ACCEPTED)
    assert len([x for x in thin.x if x is not None]) == 2 * 3    # root->a, b->d, c->e
    dotted = [s for s in fig.layout.shapes if s.line.dash == "dot"]
    assert len(dotted) == 1                                      # the untested node


def test_a_one_node_tree_and_an_empty_tree_still_draw_root_and_final_token():
    one = _iteration(0, [_node(10, "solo", -1, "accepted", alpha=1.0, u=0.1)], [0], "bonus")
    fig = tree_figure(_trace(one), 0)
    assert list(_nodes_trace(fig).x) == [0, 1, 2] and "bonus" in _nodes_trace(fig).text[2]
    empty = _iteration(0, [], [], "resampled")
    fig = tree_figure(_trace(empty), 0)
    assert list(_nodes_trace(fig).x) == [0, 1] and "0 nodes drafted" in fig.layout.title.text
    assert [list(r) for r in tree_mask_figure(_trace(empty), 0).data[0].z] == [[1]]


def test_a_chain_iteration_shows_a_hint_not_an_empty_tree():
    trace = _trace(_branchy(), _chain(1))
    fig = tree_figure(trace, 1)
    assert not fig.data
    text = fig.layout.annotations[0].text.replace("<br>", " ")
    assert "chain of 1 draft, not a tree" in text and "a chain pays more" in text
    assert "causal mask" in tree_mask_figure(trace, 1).layout.annotations[0].text
    assert has_trees(trace) and not has_trees(_trace(_chain(0))) and not has_trees(None)
    assert "Run a prompt" in tree_figure(_trace(), None).layout.annotations[0].text


def test_root_text_is_the_previous_iterations_last_token():
    trace = _trace(_chain(0), _iteration(1, [_node(10, "x", -1, "accepted", alpha=1.0, u=0.1)], [0], "bonus"))
    assert _nodes_trace(tree_figure(trace, 1)).text[0].startswith("<b>b</b>")   # the chain's bonus token


# --- the attention mask ----------------------------------------------------------------------------------

def test_mask_figure_is_the_engines_mask_with_escaped_labels():
    fig = tree_mask_figure(_trace(_branchy()), 0)
    hm = fig.data[0]
    z = [list(r) for r in hm.z]
    assert z == [[int(v) for v in row] for row in visibility([-1, -1, 1, 1, 2]).tolist()]
    assert z[5] == [1, 0, 1, 1, 0, 1]                          # e sees the root, b, c and itself
    assert z[4] == [1, 0, 1, 0, 1, 0]                          # d: the root, b and itself; not its sibling c
    labels = list(fig.layout.yaxis.ticktext)
    assert labels[0] == "0 root" and "&lt;b&gt;" in labels[2] and "<b>" not in labels[2]
    assert "position +2" in hm.text[3][0]


# --- the numbers and the token stream of a tree iteration -------------------------------------------------------

def test_measures_count_a_tree_by_its_nodes_and_its_depths():
    trace = _trace(_branchy(), _chain(1))
    o = outcome(trace.iterations[0])
    assert (o.accepted, o.rejected, o.discarded, o.resampled, o.bonus, o.drafted) == (2, 2, 1, 1, 0, 5)
    assert running_acceptance(trace) == pytest.approx([2 / 5, 3 / 6])
    rows = position_counts(trace)                 # depth 1: a, b + the chain's draft; 2: c, d; 3: e
    assert [r[:3] for r in rows] == [(3, 3, 2), (2, 1, 1), (1, 1, 0)]
    assert rows[0][3] == pytest.approx((0.2 + 1.0 + 1.0) / 3) and rows[2][3] == pytest.approx(0.4)
    target_draw = _iteration(0, [_node(10, "x", -1, "accepted"), _node(11, "y", -1, "rejected")], [0], "bonus",
                             rule="target_draw", siblings="distinct")
    assert position_counts(_trace(target_draw)) == [(2, 2, 1, None)]      # no α under the target draw
    assert positions_figure(_trace(target_draw)).data[1].y == (None,)


def test_the_token_stream_says_how_many_tree_nodes_an_iteration_drafted():
    html_ = tokens_html(_trace(_branchy()), 0)
    assert "2 of a tree&#x27;s 5 nodes on the accepted path" in html_
    assert "resampled at depth 3, where every child failed" in html_
    assert "&lt;b&gt;x&lt;/b&gt;" in html_ and "<b>x</b>" not in html_


# --- the anatomy of a tree iteration ------------------------------------------------------------------------

def test_anatomy_of_a_tree_shows_the_path_as_a_chain_and_counts_the_nodes():
    trace = _trace(_branchy())
    fig = anatomy_figure(trace, 0)
    title = fig.layout.title.text
    assert "token tree of 5 nodes" in title and "4 tested" in title and "the path of 2" in title
    draft_row = list(fig.data[0].text)
    assert len(draft_row) == 2 and "&lt;b&gt;" in draft_row[0]


@pytest.mark.parametrize("end", ["resampled", "bonus"])
def test_anatomy_of_a_tree_whose_path_is_empty_shows_the_final_token(end):
    nodes = [_node(10, " a", -1, "rejected", 0.5, 0.1, alpha=0.2, u=0.7)]
    fig = anatomy_figure(_trace(_iteration(0, nodes, [], end)), 0)
    assert "proposed nothing" not in str(fig.layout.annotations)
    assert end in fig.data[-1].text[-1] or end in "".join(fig.layout.xaxis.ticktext)


# --- the viewer ----------------------------------------------------------------------------------------------

def test_the_viewer_shows_the_tree_figures_only_for_a_trace_with_trees():
    hint, tree, mask = render_iteration(_trace(_chain(0)), 0)[-3:]
    assert hint.visible is True and tree.visible is False and mask.visible is False
    hint, tree, mask = render_iteration(_trace(_chain(0), _branchy()), 0)[-3:]    # a chain iteration of a tree run
    assert hint.visible is False and tree.visible is True and mask.visible is True
    assert "not a tree" in json.loads(tree.value["plot"])["layout"]["annotations"][0]["text"]
    view = render_trace(_trace(_branchy()), 0)
    assert view[-2].visible and json.loads(view[-2].value["plot"])["layout"]["title"]["text"].startswith(
        "Token tree of iteration 1")


# --- settings ----------------------------------------------------------------------------------------------

def _cfg(**tree):
    return make_config(4, 0.0, 0, 1.0, 16, 0, "fixed", 0.0, **tree)


def test_tree_settings_reach_the_config_and_bad_ones_are_named():
    cfg = _cfg(tree_nodes=8, tree_top_k=3)
    assert cfg.tree_nodes == 8 and cfg.tree_top_k == 3
    assert _cfg().tree_nodes == 0                                   # a chain unless asked
    for tree, message in [({"tree_nodes": -1}, "tree nodes must be between 0"),
                          ({"tree_nodes": 33}, "tree nodes must be between 0 .a chain. and 32"),
                          ({"tree_nodes": 2.5}, "tree nodes must be a whole number"),
                          ({"tree_nodes": "4"}, "tree nodes must be a whole number"),
                          ({"tree_nodes": True}, "tree nodes must be a whole number"),
                          ({"tree_top_k": 0}, "tree top-k .children per node. must be between 1 and 8"),
                          ({"tree_top_k": 9}, "tree top-k"), ({"tree_top_k": None}, "tree top-k .children per node. must be a whole")]:
        with pytest.raises(gr.Error, match=message):
            _cfg(**tree)


# --- the K sweep: chain vs tree at the same node budget ----------------------------------------------------------

def _sweep_with_trees() -> KSweep:
    runs = [KRun(k, tps, 0.5, 0.5, tpi, k, 10, 1000.0, 7, 0, [0.1], True) for k, tps, tpi in ((1, 20.0, 1.5),
                                                                                               (2, 25.0, 2.0))]
    trees = [KRun(k, tps, 0.4, 0.5, tpi, k, 10, 1000.0, 7, 0, [0.1], True) for k, tps, tpi in ((1, 20.0, 1.5),
                                                                                                (2, 24.0, 2.5))]
    return KSweep("feature", runs, 18.0, 50.0, 0.5, 0.01, 2, [30.0, 35.0], tree_runs=trees)


def test_ksweep_shows_the_tree_runs_next_to_the_chains():
    sw = _sweep_with_trees()
    _, rows = ksweep_table(sw)
    assert [r[0] for r in rows] == ["1", "2 ★", "tree N = 1", "tree N = 2"]
    assert rows[3][8] == "2.50" and rows[3][-1] == "yes" and rows[3][6] == "–" and rows[1][6] == "0.500"
    md = ksweep_md(sw)
    assert "+0 % to +25 % tokens per iteration" in md and "N = 2, runs 24.0 tokens/s" in md
    line = next(t for t in ksweep_figure(sw).data if (t.name or "").startswith("token tree of N = K nodes"))
    assert list(line.y) == [20.0, 24.0] and "chain of K = 2: 2.00" in line.hovertext[1]
    sw.tree_runs = []
    assert "Token trees" not in ksweep_md(sw)
    assert not any((t.name or "").startswith("token tree") for t in ksweep_figure(sw).data)


# --- the recorded tree example ---------------------------------------------------------------------------------

def test_the_tree_example_loads_and_every_iteration_draws():
    trace = load_example("token_tree_t07.json")                    # through Trace.from_dict (read_trace_file)
    assert trace.config["tree_nodes"] == 8 and trace.config["drafter"] == "feature" and trace.baseline is not None
    trees = [it for it in trace.iterations if it.tree is not None]
    assert len(trees) >= len(trace.iterations) - 1 and any(len(it.tree.path) >= 2 for it in trees)
    assert any(nd.status == "rejected" for it in trees for nd in it.tree.nodes)
    for it in trace.iterations:
        fig = tree_figure(trace, it.index)
        if it.tree is None:
            assert not fig.data
            continue
        assert len(_nodes_trace(fig).x) == 1 + len(it.tree.nodes) + 1      # root, nodes, the last token
        assert len(tree_mask_figure(trace, it.index).data[0].z) == 1 + len(it.tree.nodes)
        assert f"A token tree of {len(it.tree.nodes)} nodes" in anatomy_figure(trace, it.index).layout.title.text


def test_replay_opens_a_tree_trace_on_a_tree_with_a_path():
    trace = load_example("token_tree_t07.json")
    i = instructive_index(trace)
    assert len(trace.iterations[i].tree.path) >= 2
    assert all(it.tree is None or len(it.tree.path) < 2 for it in trace.iterations[:i])


def test_the_theory_figure_takes_no_chain_alpha_from_tree_paths():
    from components.render.figures import theory_figure
    only_trees = theory_figure(_trace(_branchy()))
    assert "no chain α̂, no closed form" in only_trees.layout.title.text
    assert not any((t.name or "").startswith("naive closed form") for t in only_trees.data)
    assert any(t.name == "measured" for t in only_trees.data)
    mixed = theory_figure(_trace(_branchy(), _chain(1)))
    assert "α̂ = 1.000 (chain iterations only)" in mixed.layout.title.text     # the chain's one draft, α = 1
    assert any(t.name == "naive closed form" for t in mixed.data)
