"""Checks an untrusted trace's parts must pass (``Trace.from_dict`` calls them): types, ranges, sizes, and
each record's invariants (alpha = min(1, p/q), accepted iff u < alpha; a token tree in topological order whose
path descends from the root and whose statuses the rule could have produced). Each raises ValueError
("invalid trace: <where>: <what>") naming the first problem."""
from __future__ import annotations

import math
from typing import Any

from ..config import MAX_K, MAX_TREE_NODES
from .records import (ALPHA_TOL, MAX_REASON, MAX_TEXT, MAX_TOKENS, MAX_TOP, NODE_STATUSES, TREE_RULES,
                      TREE_SIBLINGS, BonusRecord, DraftRecord, IterationRecord, ResampledRecord, TreeNodeRecord,
                      TreeRecord)


def _fail(where: str, msg: str) -> None:
    raise ValueError(f"invalid trace: {where}: {msg}")


def _get(d: dict, key: str, where: str, kind: type | tuple, optional: bool = False, default: Any = None) -> Any:
    if key not in d:
        if optional:
            return default
        _fail(where, f"missing field '{key}'")
    v = d[key]
    if v is None and optional:
        return default
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if isinstance(v, bool) and kind in (int, float, (int, float)):
        _fail(f"{where}.{key}", f"expected a number, got {v!r}")
    if not isinstance(v, kind):
        _fail(f"{where}.{key}", f"expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        _fail(f"{where}.{key}", f"must be finite, got {v}")
    if isinstance(v, str) and len(v) > MAX_TEXT:
        _fail(f"{where}.{key}", "text too long")
    return v


def _prob(d: dict, key: str, where: str, optional: bool = False) -> float | None:
    v = _get(d, key, where, float, optional=optional)
    if v is not None and not -1e-6 <= v <= 1 + 1e-6:
        _fail(f"{where}.{key}", f"probability outside [0, 1]: {v}")
    return v


def _token_list(v: Any, where: str, limit: int = MAX_TOKENS) -> list[int]:
    if not isinstance(v, list) or len(v) > limit:
        _fail(where, f"expected a list of at most {limit} token ids")
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 10_000_000 for t in v):
        _fail(where, "token ids must be non-negative integers")
    return list(v)


def _top_list(v: Any, where: str) -> list[list]:
    if v is None:
        return []
    if not isinstance(v, list) or len(v) > MAX_TOP:
        _fail(where, f"expected a list of at most {MAX_TOP} [token_id, text, prob] rows")
    out = []
    for i, row in enumerate(v):
        if (not isinstance(row, (list, tuple)) or len(row) != 3 or not isinstance(row[0], int)
                or isinstance(row[0], bool) or not isinstance(row[1], str) or len(row[1]) > 1000
                or not isinstance(row[2], (int, float)) or isinstance(row[2], bool)
                or not (-1e-6 <= row[2] <= 1 + 1e-6)):
            _fail(f"{where}[{i}]", "expected [token_id, text, probability]")
        out.append([row[0], row[1], float(row[2])])
    return out


def _dict(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        _fail(where, f"expected an object, got {type(v).__name__}")
    return v


def _parse_draft(d: Any, where: str, check_alpha: bool = True) -> DraftRecord:
    d = _dict(d, where)
    r = DraftRecord(
        token_id=_token_list([_get(d, "token_id", where, int)], f"{where}.token_id")[0],
        text=_get(d, "text", where, str), q=_prob(d, "q", where), p=_prob(d, "p", where),
        alpha=_prob(d, "alpha", where), u=_prob(d, "u", where, optional=True),
        accepted=_get(d, "accepted", where, bool), tested=_get(d, "tested", where, bool, True, True),
        p_raw=_prob(d, "p_raw", where, optional=True), q_raw=_prob(d, "q_raw", where, optional=True),
        target_token=None if d.get("target_token") is None else _token_list([d["target_token"]], f"{where}.target_token")[0],
        coupled_alpha=_prob(d, "coupled_alpha", where, optional=True), tv=_prob(d, "tv", where, optional=True))
    expected = min(1.0, r.p / r.q) if r.q > 0 else (1.0 if r.p > 0 else 0.0)
    if check_alpha and r.tested and abs(r.alpha - expected) > ALPHA_TOL:
        _fail(where, f"alpha {r.alpha} != min(1, p/q) = {expected}")
    if r.u is not None and r.accepted != (r.u < r.alpha):
        _fail(where, f"accepted={r.accepted} contradicts u={r.u} < alpha={r.alpha}")
    if not r.tested and r.accepted:
        _fail(where, "an untested draft cannot be accepted")
    return r


def _parse_iteration(d: Any, where: str) -> IterationRecord:
    d = _dict(d, where)
    drafts_raw = _get(d, "drafts", where, list)
    if len(drafts_raw) > 64:
        _fail(f"{where}.drafts", "more than 64 drafts")
    tree_raw = _get(d, "tree", where, dict, optional=True)
    # a tree path's drafts were tested by the tree's rule (checked on the tree), not by min(1, p/q)
    drafts = [_parse_draft(x, f"{where}.drafts[{i}]", tree_raw is None) for i, x in enumerate(drafts_raw)]
    rs = _get(d, "resampled", where, dict, optional=True)
    resampled = None
    if rs is not None:
        w = f"{where}.resampled"
        resampled = ResampledRecord(
            token_id=_token_list([_get(rs, "token_id", w, int)], f"{w}.token_id")[0],
            text=_get(rs, "text", w, str), p=_prob(rs, "p", w),
            residual_top=_top_list(rs.get("residual_top"), f"{w}.residual_top"),
            position=_get(rs, "position", w, int, True, 0),
            residual_prob=_prob(rs, "residual_prob", w, optional=True),
            p_top=_top_list(rs.get("p_top"), f"{w}.p_top"), q_top=_top_list(rs.get("q_top"), f"{w}.q_top"),
            q=_prob(rs, "q", w, optional=True))
    bn = _get(d, "bonus", where, dict, optional=True)
    bonus = None
    if bn is not None:
        w = f"{where}.bonus"
        bonus = BonusRecord(token_id=_token_list([_get(bn, "token_id", w, int)], f"{w}.token_id")[0],
                            text=_get(bn, "text", w, str), p=_prob(bn, "p", w))
    draft_ms = _get(d, "draft_ms", where, list)
    if len(draft_ms) > 128 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                      and math.isfinite(x) and x >= 0 for x in draft_ms):
        _fail(f"{where}.draft_ms", "expected a list of non-negative numbers")
    it = IterationRecord(
        index=_get(d, "index", where, int), start_len=_get(d, "start_len", where, int),
        k=_get(d, "k", where, int), drafts=drafts, resampled=resampled, bonus=bonus,
        emitted=_token_list(_get(d, "emitted", where, list), f"{where}.emitted", 65),
        draft_ms=[float(x) for x in draft_ms], verify_ms=_nonneg(d, "verify_ms", where),
        other_ms=_nonneg(d, "other_ms", where), t_start_ms=_nonneg(d, "t_start_ms", where, True),
        k_reason=_get(d, "k_reason", where, str, True, ""), catchup_ms=_nonneg(d, "catchup_ms", where, True),
        draft_stop=_get(d, "draft_stop", where, str, True, ""),
        tree=None if tree_raw is None else _parse_tree(tree_raw, f"{where}.tree"))
    for name in ("k_reason", "draft_stop"):
        if len(getattr(it, name)) > MAX_REASON:
            _fail(f"{where}.{name}", "text too long")
    if not 0 <= it.k <= MAX_K:
        _fail(f"{where}.k", f"must be between 0 and {MAX_K}, got {it.k}")
    n_acc = sum(x.accepted for x in drafts)
    if any(x.accepted for x in drafts[n_acc:]) or not all(x.accepted for x in drafts[:n_acc]):
        _fail(where, "accepted drafts must form a prefix")
    if [x.token_id for x in drafts[:n_acc]] != it.emitted[:n_acc]:
        _fail(where, "emitted does not start with the accepted drafts")
    if resampled is not None and bonus is not None:
        _fail(where, "an iteration has a resampled token or a bonus token, not both")
    if it.tree is not None:
        _check_tree_iteration(it, where)
    return it


def _parse_tree(d: dict, where: str) -> TreeRecord:
    nodes_raw = _get(d, "nodes", where, list)
    if len(nodes_raw) > MAX_TREE_NODES:
        _fail(f"{where}.nodes", f"more than {MAX_TREE_NODES} nodes")
    nodes = []
    for i, x in enumerate(nodes_raw):
        w = f"{where}.nodes[{i}]"
        x = _dict(x, w)
        node = TreeNodeRecord(
            token_id=_token_list([_get(x, "token_id", w, int)], f"{w}.token_id")[0], text=_get(x, "text", w, str),
            parent=_get(x, "parent", w, int), q=_prob(x, "q", w), p=_prob(x, "p", w), status=_get(x, "status", w, str),
            alpha=_prob(x, "alpha", w, optional=True), u=_prob(x, "u", w, optional=True))
        if not -1 <= node.parent < i:
            _fail(f"{w}.parent", f"must be -1 (the root) or an earlier node, got {node.parent}")
        if node.status not in NODE_STATUSES:
            _fail(f"{w}.status", f"must be one of {NODE_STATUSES}, got {node.status!r}")
        if node.alpha is not None and node.u is not None and node.status != "untested" and (
                (node.u < node.alpha) != (node.status == "accepted")):
            _fail(w, f"status {node.status!r} contradicts u={node.u} < alpha={node.alpha}")
        nodes.append(node)
    tree = TreeRecord(nodes=nodes, siblings=_get(d, "siblings", where, str), rule=_get(d, "rule", where, str),
                      path=_get(d, "path", where, list))
    if tree.siblings not in TREE_SIBLINGS:
        _fail(f"{where}.siblings", f"must be one of {TREE_SIBLINGS}, got {tree.siblings!r}")
    if tree.rule not in TREE_RULES:
        _fail(f"{where}.rule", f"must be one of {TREE_RULES}, got {tree.rule!r}")
    if len(tree.path) > len(nodes) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(nodes)
                                              for i in tree.path):
        _fail(f"{where}.path", "expected a list of node indices")
    if [nodes[i].parent for i in tree.path] != ([-1] + tree.path)[:len(tree.path)]:
        _fail(f"{where}.path", "the path must go from a child of the root down, each node a child of the one before")
    on_path = set(tree.path)
    if any((n.status == "accepted") != (i in on_path) for i, n in enumerate(nodes)):
        _fail(where, "the nodes marked accepted must be exactly the path")
    _check_sibling_walk(tree, where)
    return tree


def _check_sibling_walk(tree: TreeRecord, where: str) -> None:
    """Only children of the root or of a path node are tested. At the path's last node every child failed.
    The target draw and greedy test all children of a visited node at once; recursive rejection tests them
    in order up to the accepted one, each against its alpha and uniform (the first child's alpha is
    min(1, p/q): later ones are tested against a residual)."""
    visited = [-1] + tree.path
    for i, n in enumerate(tree.nodes):
        if n.status != "untested" and n.parent not in visited:
            _fail(f"{where}.nodes[{i}]", "tested, but its parent is not on the accepted path")
    for v in visited:
        kids = [i for i, n in enumerate(tree.nodes) if n.parent == v]
        statuses = [tree.nodes[i].status for i in kids]
        if tree.rule == "recursive_rejection":
            n_tested = statuses.index("accepted") + 1 if "accepted" in statuses else len(kids)
            if statuses[:n_tested].count("rejected") != n_tested - ("accepted" in statuses) or \
                    any(s != "untested" for s in statuses[n_tested:]):
                _fail(where, f"recursive rejection tests the children of node {v} in order until one is accepted")
            for rank, i in enumerate(kids[:n_tested]):
                n = tree.nodes[i]
                if n.alpha is None or n.u is None:
                    _fail(f"{where}.nodes[{i}]", "a node tested by recursive rejection needs its alpha and u")
                expected = min(1.0, n.p / n.q) if n.q > 0 else (1.0 if n.p > 0 else 0.0)
                if rank == 0 and abs(n.alpha - expected) > ALPHA_TOL:
                    _fail(f"{where}.nodes[{i}]", f"alpha {n.alpha} != min(1, p/q) = {expected}")
        elif "untested" in statuses:
            _fail(where, f"the {tree.rule} rule tests every child of node {v} at once")


def _check_tree_iteration(it: IterationRecord, where: str) -> None:
    """drafts = the path (cut where an EOS cut the output); emitted = the path's tokens, then the replacement
    (the path's last node has children, all failed) or the bonus (it is a leaf), unless an EOS or the
    drop_bonus control left it out."""
    tree = it.tree
    path_tokens = [tree.nodes[i].token_id for i in tree.path]
    n = len(it.emitted)
    if not 0 < n <= len(path_tokens) + 1 or it.emitted[:len(path_tokens)] != path_tokens[:n]:
        _fail(where, "a tree iteration emits its path's tokens, then one more")
    if [x.token_id for x in it.drafts] != path_tokens[:n] or not all(x.accepted for x in it.drafts):
        _fail(f"{where}.drafts", "a tree iteration's drafts are its accepted path")
    new = it.resampled or it.bonus
    if n <= len(path_tokens):
        if new is not None:
            _fail(where, "a resampled or bonus token that was not emitted")
        return
    stop = tree.path[-1] if tree.path else -1
    at_leaf = not any(n.parent == stop for n in tree.nodes)
    if new is None or new.token_id != it.emitted[-1] or (it.bonus is not None) != at_leaf:
        _fail(where, "after the path comes the bonus (at a leaf) or the resampled token (every child failed)")
    if it.resampled is not None and it.resampled.position != len(tree.path):
        _fail(f"{where}.resampled.position", f"must be the path's length {len(tree.path)}")


def _nonneg(d: dict, key: str, where: str, optional: bool = False) -> float:
    v = _get(d, key, where, float, optional=optional, default=0.0)
    if v < 0:
        _fail(f"{where}.{key}", f"must be >= 0, got {v}")
    return v
