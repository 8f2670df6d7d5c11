"""Pricing token trees (``policy.tree_cost``) and the cost-aware policy's choice between a tree and a chain
(``CostAwareK.choose_tree``), on hand-computed values."""
from __future__ import annotations

import pytest

from specdec_core.policy.costmodel import (AcceptanceProfile, Costs, acceptance_profile, predicted_split,
    tokens_given_length)
from specdec_core.policy.kpolicy import CostAwareK, FixedK, HeuristicK
from specdec_core.policy.tree_cost import (best_tree, best_tree_rate, branch_observations, branch_table, reach,
    tree_iteration_ms, tree_prediction, tree_tokens)
from specdec_core.trace import (BonusRecord, DraftRecord, IterationRecord, Trace, TreeNodeRecord, TreeRecord)

CPU = Costs(verify_ms=(10.0, 10.0, 15.0, 20.0), draft_ms=1.0)     # a verify of 3-4 tokens costs 1.5-2 one-token ones
FLAT = CPU.flat()


def by_rank(*per_rank: float):
    return lambda d, r: per_rank[r - 1] if r <= len(per_rank) else 0.0


def test_reach_and_expected_tokens_of_a_given_tree():
    # root -> 0 (0.6) -> 2 (0.5); root -> 1 (0.3)
    assert reach([-1, -1, 0], [0.6, 0.3, 0.5]) == pytest.approx([0.6, 0.3, 0.3])
    assert tree_tokens([-1, -1, 0], [0.6, 0.3, 0.5]) == pytest.approx(2.2)
    assert tree_tokens([], []) == 1.0


def test_best_tree_takes_the_highest_reach_first():
    parents, reaches = best_tree(by_rank(0.8, 0.1), n_nodes=4, top_k=2, max_depth=3)
    # 0.8, then its best child 0.64, then 0.512 (depth 3, the cap), then the root's second child 0.1 (not 0.08)
    assert parents == [-1, 0, 1, -1]
    assert reaches == pytest.approx([0.8, 0.64, 0.512, 0.1])


def test_a_chain_is_the_one_child_tree():
    prof = AcceptanceProfile((0.9, 0.7, 0.5))
    parents, reaches = best_tree(lambda d, r: prof.a(d), 3, 1, 10)
    assert parents == [-1, 0, 1]
    assert tree_tokens(parents, [prof.a(1), prof.a(2), prof.a(3)]) == pytest.approx(tokens_given_length(prof, 3))
    assert 1 + sum(reaches) == pytest.approx(1 + 0.9 + 0.63 + 0.315)


def test_tree_iteration_ms_counts_one_draft_forward_per_level():
    costs = Costs(verify_ms=(10.0, 10.0, 12.0, 14.0, 20.0), draft_ms=1.0, overhead_ms=2.0)
    assert tree_iteration_ms(costs, 4, 3) == pytest.approx(2 + 3 * 1.0 + 20)
    lookup = Costs(verify_ms=(10.0, 10.0, 12.0, 14.0, 20.0), draft_ms=0.5, draft_per_token=False)
    assert tree_iteration_ms(lookup, 4, 3) == pytest.approx(0.5 + 20)


def test_best_tree_rate_on_a_rising_and_a_flat_verify():
    accept = by_rank(0.5, 0.25)
    # best tree: 0.5 (root's best), 0.25 (root's second, before the 0.25 at depth 2), 0.25: tokens 1.75, 2.0
    n, rate, tokens, ms = best_tree_rate(CPU, accept, n_max=3, top_k=2, max_depth=2)
    assert (n, tokens, ms) == (2, pytest.approx(1.75), pytest.approx(1 + 15))   # 109.4 tok/s beats 2.0 / 22 ms
    assert rate == pytest.approx(1750 / 16)
    n, rate, tokens, ms = best_tree_rate(FLAT, accept, 3, 2, 2)
    assert (n, tokens, ms, rate) == (3, pytest.approx(2.0), pytest.approx(12), pytest.approx(2000 / 12))
    assert best_tree_rate(CPU, accept, 1, 2, 2)[0] == 0            # one node is a chain, not a tree


def test_cost_policy_falls_back_to_a_chain_where_a_tree_does_not_pay():
    # priors: the best child 0.5 (PRIOR_ALPHA) at every depth, the second 0.3 x (1 - 0.5) = 0.15
    pol = CostAwareK(2, CPU.verify_ms, 1.0, True)
    # chain: K = 1: 1.5 / 11 ms = 136.4 tok/s beats K = 2: 1.75 / 17 and K = 0: 1 / 10;
    # trees: 2 nodes = the chain of 2; 3 nodes: 1.9 / 22 ms = 86.4
    nodes, depth, why = pol.choose_tree(100, n_nodes=3, top_k=2)
    assert (nodes, depth) == (0, 1) and "K = 1" in why and "a tree: at most" in why
    flat = CostAwareK(2, FLAT.verify_ms[:1] * 4, 1.0, True)
    # flat: chain K = 2: 1.75 / 12 = 145.8; the tree of 3 nodes: 1.9 / 12 = 158.3
    nodes, depth, why = flat.choose_tree(100, 3, 2)
    assert (nodes, depth) == (3, 2) and "158.3 tok/s" in why and "K = 2, 145.8" in why
    assert flat.choose_tree(100, 1, 2)[0] == 0                     # a one-node budget: a chain
    assert flat.choose_tree(0, 3, 2) == (0, 0, flat.choose(0)[1])  # the last token is the target's own


def node(parent: int, status: str, p: float = 1.0) -> TreeNodeRecord:
    return TreeNodeRecord(token_id=5, text="x", parent=parent, q=1.0, p=p, status=status)


def tree_iteration(rule: str = "greedy") -> IterationRecord:
    # root -> 0 (rejected), 1 (accepted) -> 2 (rejected, p 0.2), 3 (rejected, p 0.1); 4 under 0 never reached
    nodes = [node(-1, "rejected", 0.3), node(-1, "accepted", 0.6), node(1, "rejected", 0.2), node(1, "rejected", 0.1),
             node(0, "untested")]
    tree = TreeRecord(nodes=nodes, siblings="distinct", rule=rule, path=[1])
    return IterationRecord(index=0, start_len=10, k=5, drafts=[DraftRecord(5, "x", 1.0, 1.0, 1.0, None, True)],
                           resampled=None, bonus=BonusRecord(7, "y", 1.0), emitted=[5, 7], draft_ms=[1.0, 1.0],
                           verify_ms=20.0, other_ms=0.0, tree=tree)


def test_tree_observations_by_depth_and_rank():
    assert branch_observations(tree_iteration()) == [(1, 1, 0.0), (1, 2, 1.0), (2, 1, 0.0), (2, 2, 0.0)]
    assert branch_observations(tree_iteration("target_draw")) == [(1, 1, 0.3), (1, 2, 0.6), (2, 1, 0.2), (2, 2, 0.1)]
    table = branch_table([tree_iteration(), tree_iteration("target_draw")])
    assert table == {(1, 1): pytest.approx(0.15), (1, 2): pytest.approx(0.8), (2, 1): pytest.approx(0.1),
                     (2, 2): pytest.approx(0.05)}
    pol = CostAwareK(4, CPU.verify_ms, 1.0, True)
    pol.observe(tree_iteration())
    a = pol.branch_accept(2, 2)
    assert a(1, 1) == pytest.approx((0.0 + 0.5) / 2)       # one observation (0) and the prior 0.5, weight 1
    assert a(1, 2) == pytest.approx((1.0 + 0.3 * (1 - 0.25)) / 2)   # its prior: 0.3 of what the best child misses
    assert pol.acc.num == {}                                # the tree's accepted path is not a chain's acceptance
    it = tree_iteration()
    it.other_ms, it.draft_ms = 10.0, [3.0]
    pol.observe(it)                                         # times are not read: the prices stay as given
    assert (pol.tree_costs(4).draft_ms, pol.tree_costs(4).overhead_ms) == (1.0, 0.0)      # none given: a chain's
    priced = CostAwareK(4, CPU.verify_ms, 1.0, True, overhead_ms=2.0, tree_draft_ms=1.5, tree_overhead_ms=4.0)
    costs = priced.tree_costs(4)
    assert (costs.draft_ms, costs.overhead_ms) == (1.5, 4.0) and priced.costs(4).overhead_ms == 2.0


def test_a_run_with_trees_is_priced_as_its_trees():
    it = tree_iteration()
    draft, verify, tokens = tree_prediction(it, CPU, branch_table([it]))
    # a(1,1) = 0, a(1,2) = 1, a(2,r) = 0: tokens = 1 + 1; two draft forwards; a verify over 6 tokens
    assert (draft, verify, tokens) == (pytest.approx(2.0), pytest.approx(20 + 5 * 2), pytest.approx(2.0))
    trace = Trace(config={}, prompt="", prompt_ids=[1], iterations=[it])
    split = predicted_split(trace, FLAT)
    assert (split.draft, split.verify, split.tokens) == (pytest.approx(2.0), pytest.approx(10.0), pytest.approx(2.0))
    assert acceptance_profile([trace]).accept == (0.0, 0.0)   # trees alone: their best children by depth


def test_fixed_and_heuristic_policies_always_draft_their_tree():
    assert FixedK(3).choose_tree(10, 8, 2)[:2] == (8, 3)
    assert FixedK(3).choose_tree(0, 8, 2)[:2] == (0, 0)
    h = HeuristicK(4)
    assert h.choose_tree(10, 8, 2)[:2] == (8, 4)
    h.observe(tree_iteration())     # the path stopped at depth 1 of a depth-2 tree: not all accepted
    assert h.k_now == 3
