"""Growing a token tree from a draft model, shared by every model drafter (``ModelDrafter``, the trained
token-only draft through it, and the feature-reading ``FeatureDrafter``).

The dynamic tree of EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic
Draft Trees", §4): a node's score is the draft's joint probability of the path to it (the product of its
unwarped top probabilities, as the chain's ``chain_confidence``), which tracks how likely the target is to
accept the whole path. Level by level:
 - the root's children are the draft's ``top_k`` candidates after the root;
 - *expand*: the ``top_k`` best-scored nodes of the newest level are fed to the draft in ONE forward (each
   sees the prefix and its own ancestors: ``models.tree_attention``), and each gets ``top_k`` children;
 - *rerank*: the tree proposed is the ``n_nodes`` best-scored nodes of all candidates. A child never scores
   above its parent, so the best nodes always include their ancestors (ties go to the shallower node).
Expansion stops at the depth cap, when no node of the newest level could still enter the best
``n_nodes`` (every deeper node scores at most its ancestor), or when no node is worth expanding (the
end-of-sequence token, a score below the run's confidence stop).

Siblings (``drafters.tree``): greedy and top-k trees have ``"distinct"`` siblings, the draft's best
candidates by q; under sampling a drafter may instead draw ``"independent"`` siblings, ``top_k`` i.i.d. draws
from the warped q at the parent (repeats allowed, as the recursive-rejection rule needs; kept as drawn: chosen
by their parent's score, in draw order). Row i of ``draft_probs`` is the warped q at node i's parent (None
when greedy); the greedy top-1 path is the chain the same draft drafts greedily.

Coupled sampling (``DraftPolicy.coupled``): siblings are distinct, the first the draft's coupled draw
x = argmax(q / E_t) at the children's absolute position t (the token the chain would draft there), then the best
other candidates by q. The coupled tree rule (descend into the child equal to the target's y_t) is exact for
any children; the coupled draw is the one most likely to equal y_t when q is close to p.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..sampling import sample, warp_logits
from ..timing import now_ms
from .base import DraftPolicy
from .tree import TreeProposal

# step(nodes, tokens, parents): feed ``nodes`` (indices into the growing ``tokens``/``parents``) to the draft in
# one forward; return their (len(nodes), V) draft logits.
ExpandStep = Callable[[list[int], list[int], list[int]], torch.Tensor]


@dataclass
class _Growth:
    """The candidates so far: every node ever created, its parent, score, and the distribution it hangs off."""
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)        # 1 for a child of the root
    dist: list[int] = field(default_factory=list)          # index into ``qs`` / ``raws``: the parent's distribution
    qs: list[torch.Tensor] = field(default_factory=list)    # warped q per expanded parent (sampling only)
    raws: list[torch.Tensor] = field(default_factory=list)  # unwarped softmax per expanded parent


def _children(logits: torch.Tensor, top_k: int, policy: DraftPolicy, siblings: str, offset: int = 0
              ) -> tuple[list[int], torch.Tensor, torch.Tensor | None]:
    """The children of one expanded node (``offset``: their depth − 1, places after the tree's first level):
    their tokens, the unwarped softmax and the warped q (None when greedy). Distinct: the ``top_k`` best by warped
    q (greedy: by the unwarped softmax), never a token q gives no mass; coupled: the coupled draw first (module
    docstring); independent: ``top_k`` i.i.d. draws from q."""
    raw = logits.float().softmax(-1)
    if policy.greedy:
        order = _top(raw, top_k)
        return order, raw, None
    q = warp_logits(logits, policy.temperature, policy.top_k, policy.top_p)
    if policy.coupled:
        first = int(policy.draw(q, offset))
        return [first] + [t for t in _top(q, min(top_k, int((q > 0).sum()))) if t != first][:top_k - 1], raw, q
    if siblings == "independent":
        draws = sample(q.expand(top_k, -1), policy.generator).tolist()
        return [int(x) for x in draws], raw, q
    return _top(q, min(top_k, int((q > 0).sum()))), raw, q


def _top(probs: torch.Tensor, k: int) -> list[int]:
    """The k most probable tokens, best first."""
    return torch.topk(probs, k).indices.tolist() if k > 0 else []


def grow_tree(root_logits: torch.Tensor, step: ExpandStep, n_nodes: int, top_k: int, max_depth: int,
              policy: DraftPolicy, device: torch.device, siblings: str = "distinct",
              first_ms: float = 0.0) -> tuple[TreeProposal, list[int]]:
    """The EAGLE-2 dynamic tree of at most ``n_nodes`` nodes, at most ``top_k`` children per node and depth at
    most ``max_depth`` (module docstring), from the draft's logits after the root and the ``step`` that runs
    one expansion forward. ``first_ms``: the time of the forward that gave ``root_logits`` (its first entry
    of ``forward_ms``). Returns the proposal and, for each of its nodes, the index ``step`` knew it by."""
    if policy.greedy or policy.coupled:
        siblings = "distinct"
    if n_nodes <= 0 or max_depth <= 0 or top_k <= 0:
        return TreeProposal([], [], siblings, None, forward_ms=[first_ms], forwards=1), []
    g = _Growth()
    stop = ""
    t0 = now_ms(device)
    _add_children(g, -1, 1.0, root_logits, top_k, policy, siblings)
    times = [first_ms + now_ms(device) - t0]         # a level's time: its forward and choosing its children
    level = list(range(len(g.tokens)))
    for _ in range(1, max_depth):               # levels 2 … max_depth
        worth = [i for i in level if _expandable(g, i, policy)]
        worth = sorted(worth, key=lambda i: -g.scores[i])[:top_k]
        if not worth:
            stop = "no node of the newest level is worth expanding"
            break
        bar = _nth_best(g.scores, n_nodes)
        if bar is not None and g.scores[worth[0]] <= bar:   # nothing deeper can enter the best n_nodes
            break
        t0 = now_ms(device)
        logits = step(worth, g.tokens, g.parents)
        level = []
        for row, node in enumerate(worth):
            start = len(g.tokens)
            _add_children(g, node, g.scores[node], logits[row], top_k, policy, siblings)
            level += range(start, len(g.tokens))
        times.append(now_ms(device) - t0)
    # independent siblings must stay draws from q, tested in draw order: chosen by their PARENT's score (known
    # before they were drawn), siblings in draw order; ranking them by their own draws would bias the
    # recursive rejection (tests/test_tree_exactness.py)
    keys = g.scores if siblings == "distinct" else [1.0 if p < 0 else g.scores[p] for p in g.parents]
    layout, parents = best_subtree(g.parents, keys, n_nodes)
    q = torch.stack([g.qs[g.dist[i]] for i in layout]) if (layout and not policy.greedy) else None
    raw = torch.stack([g.raws[g.dist[i]] for i in layout]) if (layout and policy.raw_probs) else None
    prop = TreeProposal([g.tokens[i] for i in layout], parents, siblings, q, raw, forward_ms=times,
                        forwards=len(times), stop=stop if len(layout) < n_nodes else "")
    return prop, layout


def _add_children(g: _Growth, parent: int, parent_score: float, logits: torch.Tensor,
                  top_k: int, policy: DraftPolicy, siblings: str) -> None:
    depth = 1 if parent < 0 else g.depths[parent] + 1
    tokens, raw, q = _children(logits, top_k, policy, siblings, depth - 1)
    g.raws.append(raw)
    g.qs.append(q)
    conf = raw[tokens].tolist()
    for tok, c in zip(tokens, conf):
        g.tokens.append(tok)
        g.parents.append(parent)
        g.scores.append(parent_score * c)
        g.depths.append(depth)
        g.dist.append(len(g.raws) - 1)


def _expandable(g: _Growth, i: int, policy: DraftPolicy) -> bool:
    if policy.eos_token_id is not None and g.tokens[i] == policy.eos_token_id:
        return False
    return not (policy.confidence_stop > 0 and g.scores[i] < policy.confidence_stop)


def _nth_best(scores: list[float], n: int) -> float | None:
    if len(scores) < n:
        return None
    return sorted(scores, reverse=True)[n - 1]


def best_subtree(parents: list[int], scores: list[float], n_nodes: int) -> tuple[list[int], list[int]]:
    """The ``n_nodes`` best-scored nodes of a candidate tree (``parents`` topological, -1 = the root) whose
    scores never rise from parent to child: (their old indices laid out breadth-first, siblings best first;
    their parents in the new numbering). Ties go to the shallower node, then the earlier one, so the choice
    holds its ancestors."""
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    order = sorted(range(len(parents)), key=lambda i: (-scores[i], depth[i], i))
    kids: dict[int, list[int]] = {}
    for i in sorted(order[:max(0, n_nodes)], key=lambda i: (-scores[i], i)):
        kids.setdefault(parents[i], []).append(i)
    layout: list[int] = []
    new: dict[int, int] = {-1: -1}
    frontier = [-1]
    while frontier:                       # breadth-first from the root: a node whose parent was not kept is not
        nxt = []
        for parent in frontier:
            for i in kids.get(parent, []):
                new[i] = len(layout)
                layout.append(i)
                nxt.append(i)
        frontier = nxt
    return layout, [new[parents[i]] for i in layout]


class FedNodes:
    """Which tree nodes a draft model has been fed, in its cache's rows after the prefix: the attention
    mask and positions of each expansion, and the rows of an accepted path afterwards."""

    def __init__(self, prefix_len: int) -> None:
        self.prefix_len = prefix_len      # cached tokens before the tree, its root the last of them
        self.row: dict[int, int] = {}     # node (as ``grow_tree``'s step knows it) -> its row in the cache
        self.parents: list[int] = []      # parent of each fed node, in fed order (-1 = the root)
        self.depths: list[int] = []

    def feed(self, nodes: list[int], parents: list[int], dtype: torch.dtype, device: torch.device
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """Register ``nodes`` (their ``parents`` as the step knows them; each parent fed before) as fed next:
        the (1, 1, len(nodes), cache length after the feed) additive mask by which each sees the prefix, its
        fed ancestors and itself, and the (1, len(nodes)) position ids (the root's + depth)."""
        from ..models.tree_attention import additive_mask, visibility
        for n in nodes:
            p = parents[n]
            fed_parent = self.row[p] - self.prefix_len if p >= 0 else -1
            self.row[n] = self.prefix_len + len(self.parents)
            self.parents.append(fed_parent)
            self.depths.append(1 if fed_parent < 0 else self.depths[fed_parent] + 1)
        w = len(nodes)
        vis = visibility(self.parents, 1)[-w:, 1:]        # the root is in the prefix: drop its column
        mask = additive_mask(vis, self.prefix_len, dtype, device)
        pos = torch.tensor([[self.prefix_len - 1 + d for d in self.depths[-w:]]], device=device)
        return mask, pos

    def path_rows(self, path: list[int], layout: list[int]) -> list[int]:
        """The cache rows of the accepted ``path`` (proposal node indices; ``layout`` maps them to the step's),
        as far as its nodes were fed (a fed node's ancestors all were)."""
        rows = []
        for node in path:
            r = self.row.get(layout[node])
            if r is None:
                break
            rows.append(r)
        return rows
