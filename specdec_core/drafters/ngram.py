"""Prompt lookup: draft the tokens that followed an earlier occurrence of the sequence's last n tokens
(q is a point mass, so alpha = p(x))."""
from __future__ import annotations

from typing import NamedTuple
import numpy as np
import torch
from ..timing import now_ms
from .base import DraftOutlook, DraftPolicy, Proposal
from .tree import TreeProposal
from .tree_build import best_subtree


class NGramDrafter:
    """Prompt lookup: find an earlier occurrence of the sequence's last n tokens (n from ``max_ngram``
    down to ``min_ngram``) in prompt + generated text and propose the tokens that followed it. Of several
    occurrences it takes the one whose match reaches furthest back (a copy keeps following its source
    rather than jumping to another place with the same last few tokens), the most recent among equals.
    q is a point mass, so alpha = p(x) and the residual is p with x removed."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = "ngram"
        self._match: tuple[tuple, list[Match]] | None = None   # (key of ids, its matches, best first)
        self._prompt_len: int | None = None

    def fresh(self) -> "NGramDrafter":
        """The same lookup with a state of its own (runs side by side need one each)."""
        return NGramDrafter(self.max_ngram, self.min_ngram)

    def start(self, prompt_ids: list[int]) -> int:
        self._match = None
        self._prompt_len = len(prompt_ids)
        return 0

    def _find_all(self, ids: list[int]) -> list[Match]:
        key = (len(ids), tuple(ids[-8:]))        # outlook and propose of one iteration share the lookup
        if self._match is None or self._match[0] != key:
            self._match = (key, find_matches(np.asarray(ids), self.max_ngram, self.min_ngram))
        return self._match[1]

    def _find(self, ids: list[int]) -> Match:
        found = self._find_all(ids)
        return found[0] if found else NO_MATCH

    def outlook(self, ids: list[int], eos_token_id: int | None = None) -> DraftOutlook:
        m = self._find(ids)
        if not m.length:
            return DraftOutlook(match_len=0, available=0)
        generated = len(ids) - self._prompt_len if self._prompt_len is not None else 0
        source = ids[m.start:m.start + MAX_MATCH]
        return DraftOutlook(match_len=m.length, available=len(ids) - m.start,
                            copying=m.length > generated if generated > 0 else None,
                            to_eos=source.index(eos_token_id) + 1 if eos_token_id in source else None)

    def propose(self, ids: list[int], k: int, policy: DraftPolicy) -> Proposal:
        t0 = now_ms(torch.device("cpu"))
        m = self._find(ids)
        tokens = ids[m.start:m.start + k] if m.length and k > 0 else []
        stop = "no n-gram match" if not m.length else (
            f"the match's source has only {len(tokens)} token(s) after it" if len(tokens) < k else "")
        if policy.eos_token_id is not None and policy.eos_token_id in tokens[:-1]:
            tokens = tokens[: tokens.index(policy.eos_token_id) + 1]
            stop = "the copy reached the end-of-sequence token"
        return Proposal(tokens, None, None, [now_ms(torch.device("cpu")) - t0], 0, stop=stop if k > 0 else "")

    def propose_tree(self, ids: list[int], n_nodes: int, top_k: int, policy: DraftPolicy,
                     max_depth: int) -> TreeProposal:
        """A tree of the continuations of every earlier occurrence of the last n tokens (``lookup_tree``):
        it branches where they continue differently. Point masses, distinct siblings."""
        t0 = now_ms(torch.device("cpu"))
        found = self._find_all(ids)
        tokens, parents = lookup_tree(ids, found, n_nodes, top_k, max_depth, policy.eos_token_id)
        stop = "no n-gram match" if not found else (
            f"the matches' sources offer only {len(tokens)} node(s)" if len(tokens) < n_nodes else "")
        return TreeProposal(tokens, parents, "distinct", None, forward_ms=[now_ms(torch.device("cpu")) - t0],
                            forwards=0, stop=stop if n_nodes > 0 else "")

    def rollback(self, valid_len: int) -> None:
        pass

    def rollback_tree(self, valid_len: int, path: list[int]) -> None:
        pass


MAX_MATCH = 64   # how far back a prompt-lookup match is followed (and the longest match length reported)


class Match(NamedTuple):
    """Prompt lookup's match (``find_match``)."""
    start: int         # where the continuation it proposes starts (-1: no match)
    length: int        # how many of the sequence's last tokens it matches (0: none)


NO_MATCH = Match(-1, 0)


def find_match(ids: np.ndarray, max_ngram: int, min_ngram: int = 1) -> Match:
    """Where prompt lookup's continuation starts and the length of its match: the earlier occurrence of the
    last n tokens (longest n first) whose agreement with the sequence's end reaches furthest back (counted
    up to ``MAX_MATCH`` tokens), the most recent among equals."""
    found = find_matches(ids, max_ngram, min_ngram)
    return found[0] if found else NO_MATCH


def find_matches(ids: np.ndarray, max_ngram: int, min_ngram: int = 1) -> list[Match]:
    """Every earlier occurrence of the sequence's last n tokens, for the longest n that has one, best first:
    the furthest-reaching agreement with the sequence's end first (``find_match``'s), the most recent
    among equals."""
    n_ids = len(ids)
    for n in range(min(max_ngram, n_ids - 1), min_ngram - 1, -1):
        pattern = ids[n_ids - n:]
        # windows starting at 0 .. n_ids-n-1 (the trailing occurrence itself is excluded)
        windows = np.lib.stride_tricks.sliding_window_view(ids[:n_ids - 1], n)
        hits = np.flatnonzero((windows == pattern).all(axis=1))
        if not len(hits):
            continue
        back = np.arange(1, MAX_MATCH - n + 1)                     # compare ids[h - b] with ids[n_ids - n - b]
        before = hits[:, None] - back[None, :]
        ref_at = n_ids - n - back
        ok = (before >= 0) & (ref_at >= 0)[None, :]
        same = ok & (ids[np.clip(before, 0, None)] == ids[np.clip(ref_at, 0, None)][None, :])
        extra = np.cumprod(same, axis=1).sum(axis=1)               # tokens of agreement beyond the n-gram
        order = np.lexsort((-hits, -extra))                        # furthest-reaching, then most recent
        return [Match(int(hits[h]) + n, n + int(extra[h])) for h in order]
    return []


def lookup_tree(ids: list[int], matches: list[Match], n_nodes: int, top_k: int, max_depth: int,
                eos_token_id: int | None = None) -> tuple[list[int], list[int]]:
    """Prompt lookup as a tree: the continuations (up to ``max_depth`` tokens, ending at the end-of-sequence
    token) of every match, merged where they agree, so the tree branches where they differ. Each match
    weighs its match length (a match that agrees further back is likelier the source being copied); a
    node's score is the weight of the matches through it. The ``n_nodes`` best-scored nodes are kept, at
    most ``top_k`` children per node (the heaviest; the best match's first among equals). The first match's
    continuation is the chain prompt lookup drafts; the tree holds it as far as no other continuation
    outweighs it. Returns (tokens, parents)."""
    tokens: list[int] = []
    parents: list[int] = []
    weight: list[float] = []
    index: dict[tuple[int, int], int] = {}
    for m in matches:
        node = -1
        for tok in ids[m.start:m.start + max_depth]:
            key = (node, tok)
            if key not in index:
                index[key] = len(tokens)
                tokens.append(tok)
                parents.append(node)
                weight.append(0.0)
            node = index[key]
            weight[node] += m.length
            if tok == eos_token_id:
                break
    kept = _top_children(parents, weight, top_k)
    at = {old: j for j, old in enumerate(kept)}
    layout, new_parents = best_subtree([at.get(parents[i], -1) for i in kept], [weight[i] for i in kept], n_nodes)
    return [tokens[kept[j]] for j in layout], new_parents


def _top_children(parents: list[int], weight: list[float], top_k: int) -> list[int]:
    """The nodes left when every node keeps only its ``top_k`` heaviest children (first created among
    equals), and their subtrees: their indices, in topological order."""
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    dropped: set[int] = set()
    for p, cs in kids.items():
        dropped.update(sorted(cs, key=lambda i: (-weight[i], i))[top_k:])
    keep = []
    for i, p in enumerate(parents):
        if i in dropped or (p >= 0 and p in dropped):
            dropped.add(i)
        else:
            keep.append(i)
    return keep
