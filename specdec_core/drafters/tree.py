"""Token trees: what a tree-drafting drafter proposes (``TreeProposal``), and the small pure helpers on
a tree's shape that the engine, the cost model and the figures share.

A tree of N drafted nodes hangs under a root: the iteration's last token, which the target has not seen
yet (the same token a chain's drafts follow). Nodes are listed in topological order (a parent's index is
below its children's); ``parents[i] == -1`` means "child of the root". A chain of K drafts is the tree
whose parents are ``[-1, 0, 1, …, K-2]``.

How siblings were chosen decides which verification rule is exact for them (``decoding.tree_verify``):
- ``"independent"``: each child of a node was drawn independently from q at that node (repeats allowed);
- ``"distinct"``: the children are distinct tokens chosen deterministically (the draft's top candidates).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

SIBLING_MODES = ("independent", "distinct")


@dataclass
class TreeProposal:
    tokens: list[int]                     # N drafted token ids, topological order
    parents: list[int]                    # parent index per node; -1 = the root
    siblings: str                         # "independent" | "distinct" (see the module docstring)
    draft_probs: torch.Tensor | None      # (N, V): row i = the warped q at node i's PARENT, the distribution
                                          # node i was drawn from (independent) or ranked by (distinct);
                                          # None = greedy / point masses
    raw_probs: torch.Tensor | None = None  # (N, V) unwarped q at each node's parent, for display only
    forward_ms: list[float] = field(default_factory=list)  # one entry per draft forward (expansion step)
    forwards: int = 0                     # model forwards actually run (the catch-up included)
    catchup_ms: float = 0.0
    stop: str = ""                        # why fewer than the asked nodes, in one line; "" = not said

    def __post_init__(self) -> None:
        check_tree(self.parents)
        if len(self.tokens) != len(self.parents):
            raise ValueError(f"a tree proposal has {len(self.tokens)} tokens but {len(self.parents)} parents")
        if self.siblings not in SIBLING_MODES:
            raise ValueError(f"siblings must be one of {SIBLING_MODES}, got {self.siblings!r}")


def check_tree(parents: list[int]) -> None:
    """Raise ValueError unless ``parents`` lists a tree in topological order (-1 = the root)."""
    for i, p in enumerate(parents):
        if isinstance(p, bool) or not isinstance(p, int) or not -1 <= p < i:
            raise ValueError(f"node {i}: parent must be -1 (the root) or an earlier node, got {p!r}")


def depths(parents: list[int]) -> list[int]:
    """Depth of each node: 1 for a child of the root."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def children(parents: list[int], node: int) -> list[int]:
    """The children of ``node`` (-1 = the root), in proposal order."""
    return [i for i, p in enumerate(parents) if p == node]
