"""Pricing a token tree with the calibrated cost model's costs (``costs``; ``costmodel`` prices chains with them
and calls this module for the trees of a run).

A tree iteration drafts N nodes and verifies them in one target forward over N + 1 tokens; it emits the
accepted path and one more token. With a(d, r) = P(the r-th best child of a reached node at depth d − 1 is
accepted | that node was reached) (siblings are mutually exclusive: at most one child of a node is accepted),

  P(node reached)         = product of a(depth, rank) over the path to it
  tokens of one iteration = 1 + Σ_nodes P(node reached)
  time of one iteration   = draft(depth of the tree) + t_verify(N + 1) + t_overhead

A model draft grows a tree one level per forward (``drafters.tree_build``), so a tree of depth D costs D draft
forwards whatever its width, as a chain of D drafts does; prompt lookup costs one lookup. A chain is the tree
with one child per node, and priced so it gives exactly ``costmodel``'s chain figures (a(j, 1) = a_j).

Before drafting, the shape is not known: ``best_tree`` prices the best tree the acceptance table allows (the
N nodes of highest reach in the tree of ``top_k`` children per node, depth ≤ the cap), the shape a drafter
that ranks its candidates well approaches. ``Costs.flat()`` gives the same figures with a GPU-like verify.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from .costs import Costs, fed_tokens
from ..drafters.tree import children, depths
from ..trace import IterationRecord

# a(d, r): acceptance of the rank-r child (1 = best) at depth d (1 = a child of the root), given its parent reached
BranchAccept = Callable[[int, int], float]


def reach(parents: Sequence[int], accept: Sequence[float]) -> list[float]:
    """P(each node is on the accepted path): the product of ``accept`` (each node's acceptance given its
    parent reached) along the path to it. ``parents`` topological, -1 = the root."""
    out: list[float] = []
    for p, a in zip(parents, accept):
        out.append(a * (out[p] if p >= 0 else 1.0))
    return out


def tree_tokens(parents: Sequence[int], accept: Sequence[float]) -> float:
    """Expected tokens emitted by an iteration verifying this tree: the accepted path, then one more."""
    return 1.0 + sum(reach(parents, accept))


def best_tree(accept: BranchAccept, n_nodes: int, top_k: int, max_depth: int) -> tuple[list[int], list[float]]:
    """The ``n_nodes`` nodes of highest reach in the tree where every node has ``top_k`` children (the r-th
    reached with ``accept(depth, r)`` of its parent's reach), depth ≤ ``max_depth``: (parents, reaches), in the
    order taken (parents first). Taking the highest reach first keeps every node's ancestors (a child never
    reaches more than its parent), so this is the most tokens any tree of that size offers under ``accept``."""
    parents: list[int] = []
    reaches: list[float] = []
    depth_of: list[int] = []
    heap: list[tuple[float, int, int, int, int]] = []   # (-reach, tie, parent, depth, rank)
    tie = 0

    def offer(parent: int, depth: int, parent_reach: float) -> None:
        nonlocal tie
        if depth > max_depth:
            return
        for r in range(1, top_k + 1):
            heapq.heappush(heap, (-parent_reach * accept(depth, r), tie, parent, depth, r))
            tie += 1

    offer(-1, 1, 1.0)
    while heap and len(parents) < n_nodes:
        neg, _, parent, depth, _ = heapq.heappop(heap)
        parents.append(parent)
        reaches.append(-neg)
        depth_of.append(depth)
        offer(len(parents) - 1, depth + 1, -neg)
    return parents, reaches


def tree_depth(parents: Sequence[int]) -> int:
    """The deepest node's depth (0 for no nodes)."""
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    return max(depth, default=0)


def tree_iteration_ms(costs: Costs, n_nodes: int, depth: int) -> float:
    """Expected time of one iteration verifying a tree of ``n_nodes`` nodes and this depth: the draft's
    expansion forwards (one per level) or one lookup, one verify over n_nodes + 1 tokens, the overhead."""
    return costs.overhead_ms + costs.draft_cost(depth, n_nodes) + costs.t_verify(n_nodes + 1)


def best_tree_rate(costs: Costs, accept: BranchAccept, n_max: int, top_k: int, max_depth: int,
                   n_min: int = 2) -> tuple[int, float, float, float]:
    """The tree size in n_min..n_max with the most predicted tokens per second (the smallest on ties), each
    size priced as ``best_tree`` of that size: (nodes, tokens/s, tokens per iteration, ms per iteration).
    (0, 0, 1, 0) when no size is allowed."""
    parents, reaches = best_tree(accept, n_max, top_k, max_depth)
    best = (0, 0.0, 1.0, 0.0)
    depth: list[int] = []
    tokens = 1.0
    for n, (p, r) in enumerate(zip(parents, reaches), 1):
        depth.append(1 if p < 0 else depth[p] + 1)
        tokens += r
        if n < n_min:
            continue
        ms = tree_iteration_ms(costs, n, max(depth))
        rate = 1000.0 * tokens / ms if ms > 0 else float("inf")
        if rate > best[1] + 1e-9:
            best = (n, rate, tokens, ms)
    return best


def branch_observations(it: IterationRecord) -> list[tuple[int, int, float]]:
    """(depth, rank, acceptance) of every child of a node a tree iteration's verification reached (the root
    and the accepted path): 1 if accepted, else 0, or under the target-draw rule its p (the probability it had
    of being the target's draw, the same mean with less noise; not under the coupled rule, whose first child is
    drawn with the target's own noise and matches more often than its p). Empty for a chain iteration."""
    tree = it.tree
    if tree is None:
        return []
    parents = [node.parent for node in tree.nodes]
    depth = depths(parents)
    out = []
    for node in [-1] + list(tree.path):
        for r, c in enumerate(children(parents, node), 1):
            x = tree.nodes[c].p if tree.rule == "target_draw" else float(tree.nodes[c].status == "accepted")
            out.append((depth[c], r, x))
    return out


def branch_table(iterations: Sequence[IterationRecord]) -> dict[tuple[int, int], float]:
    """Mean acceptance by (depth, rank) over the tree iterations (``branch_observations``)."""
    sums: dict[tuple[int, int], list[float]] = {}
    for it in iterations:
        for d, r, x in branch_observations(it):
            sums.setdefault((d, r), []).append(x)
    return {key: sum(v) / len(v) for key, v in sums.items()}


def table_accept(table: dict[tuple[int, int], float]) -> BranchAccept:
    """a(d, r) from a table: a depth not in it takes the deepest measured one above it for that rank; a rank
    never measured, 0."""
    def a(d: int, r: int) -> float:
        for depth in range(d, 0, -1):
            if (depth, r) in table:
                return table[depth, r]
        return 0.0
    return a


def tree_prediction(it: IterationRecord, costs: Costs, table: dict[tuple[int, int], float]
                    ) -> tuple[float, float, float]:
    """(draft ms, verify ms, tokens) the cost model predicts for a tree iteration: its draft forwards (one
    lookup for prompt lookup), a verify over its nodes + 1 tokens, and its tree's expected tokens under the
    run's acceptance by depth and rank (``branch_table``)."""
    tree = it.tree
    parents = [node.parent for node in tree.nodes]
    accept = table_accept(table)
    depth = depths(parents)
    ranks: list[int] = [0] * len(parents)
    for node in [-1] + list(range(len(parents))):
        for r, c in enumerate(children(parents, node), 1):
            ranks[c] = r
    tokens = tree_tokens(parents, [accept(d, r) for d, r in zip(depth, ranks)])
    draft = costs.draft_cost(len(it.draft_ms), len(parents)) if costs.draft_per_token else costs.draft_cost(1, 1)
    return draft, costs.t_verify(fed_tokens(it)), tokens
