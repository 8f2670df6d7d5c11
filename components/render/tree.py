"""Token trees: the selected iteration's tree and the attention mask its verify used, as pure figure builders.

``tree_figure(trace, index)`` draws the iteration's ``TreeRecord``: the root (the token the tree hangs under)
on the left, each drafted node one column further right per depth, siblings stacked in the order they were
proposed (a tidy layout: every leaf gets its own row, a parent sits between its first and last child). Each
node shows its token, q (the draft's probability of it at its parent) and p (the target's), and the sibling
walk: the order the verification rule tried it in with α and u where the rule has them. The accepted path is
drawn thick, the token the iteration ends with (resampled or bonus) hangs off its end.

``tree_mask_figure(trace, index)`` is the verify's attention mask over the tokens fed after the cached
prefix (the root, then every node): a node sees the prefix, its ancestors and itself. It is built from the
recorded parents with the engine's own builder (``specdec_core.models.tree_attention``).

A chain iteration (no tree) gives a figure with a one-line hint, never an empty frame. All model text goes
through ``plot_text`` (escaped).
"""
from __future__ import annotations

import html

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.drafters.tree import depths
from specdec_core.models.tree_attention import visibility
from specdec_core.trace import IterationRecord, TreeNodeRecord, TreeRecord

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure, fmt, plot_text, resolve_index

UNTESTED = "#777777"
ROOT = "#444444"
SLOT_PX = 62                  # height of one leaf row
MAX_HEIGHT = 1400
LABEL_CHARS = 12



def has_trees(trace: Trace | None) -> bool:
    """Whether any iteration of the trace verified a tree."""
    return trace is not None and any(it.tree is not None for it in trace.iterations)


def chain_hint(trace: Trace, it: IterationRecord) -> str:
    """Why a tree figure of a chain iteration is blank, in one line."""
    n = len(it.drafts)
    why = f" ({it.k_reason})" if it.k_reason else ""
    return (f"Iteration {it.index + 1} verified a chain of {n} draft{'s' if n != 1 else ''}, not a tree{why}: "
            "the anatomy above shows it.")


# --- layout ----------------------------------------------------------------------------------------

def tidy_rows(parents: list[int], extra_under: int | None = None) -> tuple[list[float], float, int]:
    """Rows for a tree drawn left to right: (row of each node, row of the root, number of leaf rows).
    Leaves take rows 0, 1, 2, … in depth-first order (children in proposal order); a parent sits midway
    between its first and last child. ``extra_under`` (a node index, -1 = the root) gets one more child,
    placed last: the token the iteration ends with; its row is the last entry of the returned node rows."""
    n = len(parents)
    kids: dict[int, list[int]] = {i: [] for i in range(-1, n)}
    for i, p in enumerate(parents):
        kids[p].append(i)
    if extra_under is not None:
        kids[extra_under].append(n)
        kids[n] = []
    rows: dict[int, float] = {}
    next_leaf = 0
    stack: list[tuple[int, bool]] = [(-1, False)]
    while stack:                       # iterative post-order: trees from untrusted traces can be deep
        node, done = stack.pop()
        if done or not kids[node]:
            if kids[node]:
                rows[node] = (rows[kids[node][0]] + rows[kids[node][-1]]) / 2
            else:
                rows[node] = float(next_leaf)
                next_leaf += 1
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(kids[node]))
    count = n + (1 if extra_under is not None else 0)
    return [rows[i] for i in range(count)], rows[-1], max(next_leaf, 1)


# --- the sibling walk --------------------------------------------------------------------------------

def sibling_order(tree: TreeRecord) -> list[int]:
    """Each node's place among its siblings, 1-based, in proposal order (the order a walking rule tries them)."""
    seen: dict[int, int] = {}
    out = []
    for node in tree.nodes:
        seen[node.parent] = seen.get(node.parent, 0) + 1
        out.append(seen[node.parent])
    return out


RULE_NAMES = {"greedy": "greedy: follow the child that is argmax p",
              "recursive_rejection": "recursive rejection (SpecInfer): siblings tried in order, u < α",
              "target_draw": "target draw: y ~ p, descend if y is a child"}


def walk_text(node: TreeNodeRecord, order: int, rule: str = "recursive_rejection") -> str:
    """One line on how the rule treated the node: under recursive rejection its try number with α and u
    (siblings are tried in proposal order); under greedy and the target draw, which test all siblings at once,
    whether it was the target's choice."""
    if node.status == "untested":
        return "not tested"
    ok = node.status == "accepted"
    mark = "✓" if ok else "✗"
    if node.alpha is not None:
        u = "" if node.u is None else f" u {fmt(node.u, 2)}"
        return f"try {order}: α {fmt(node.alpha, 2)}{u} {mark}"
    if rule == "greedy":
        return f"{'=' if ok else '≠'} argmax p {mark}"
    if rule == "target_draw":
        return f"y ~ p {'hit it' if ok else 'missed it'} {mark}"
    return f"{'accepted' if ok else 'rejected'} {mark}"


def _colour(status: str) -> str:
    return {"accepted": pal.ACCEPTED, "rejected": pal.REJECTED}.get(status, UNTESTED)


def _root_label(trace: Trace, i: int) -> str:
    """The root's label: the token the tree hangs under, the previous iteration's last emitted token (its text
    as recorded), or the prompt's end for the first iteration."""
    prev = trace.iterations[i - 1] if i > 0 else None
    last = prev.emitted[-1] if prev is not None and prev.emitted else None
    for rec in () if prev is None else (prev.resampled, prev.bonus, *reversed(prev.drafts)):
        if rec is not None and rec.token_id == last:
            return f"<b>{plot_text(rec.text or str(rec.token_id), LABEL_CHARS)}</b><br>root"
    return "<b>root</b><br>(the prompt's end)" if prev is None else "<b>root</b>"


REPLACEMENT = {"greedy": "argmax p, which no child matched",
               "recursive_rejection": "every child failed: drawn from the last residual",
               "target_draw": "the target's draw y ~ p, not a child"}


def _final(it: IterationRecord, rule: str) -> tuple[str, str, str] | None:
    """(label, hover, colour) of the token the iteration ends with, or None."""
    if it.resampled is not None:
        r = it.resampled
        tok = r.text or str(r.token_id)
        return (f"<b>{plot_text(tok, LABEL_CHARS)}</b><br>resampled<br>p {fmt(r.p, 2)}",
                f"{html.escape(repr(tok), quote=False)} (id {r.token_id})<br>"
                f"{REPLACEMENT.get(rule, 'every child failed')}; p = {r.p:.4f}", pal.RESAMPLED)
    if it.bonus is not None:
        b = it.bonus
        tok = b.text or str(b.token_id)
        return (f"<b>{plot_text(tok, LABEL_CHARS)}</b><br>bonus<br>p {fmt(b.p, 2)}",
                f"{html.escape(repr(tok), quote=False)} (id {b.token_id})<br>bonus: drawn from p after the "
                f"path's leaf; p = {b.p:.4f}", pal.BONUS)
    return None


# --- the tree figure -----------------------------------------------------------------------------------

def tree_figure(trace: Trace | None, index: int | None = None) -> go.Figure:
    """The selected iteration's token tree (see the module docstring). ``index`` is 0-based (None = last)."""
    title = "Token tree"
    i = resolve_index(trace, index) if trace is not None else None
    if i is None:
        return empty_figure(title, "Run a prompt with tree nodes > 0 (or load a trace with a tree), then pick an "
                                   "iteration.", 300)
    it = trace.iterations[i]
    title = f"Token tree of iteration {i + 1}"
    if it.tree is None:
        return empty_figure(title, chain_hint(trace, it), 220)
    tree = it.tree
    parents = [nd.parent for nd in tree.nodes]
    final = _final(it, tree.rule)
    under = (tree.path[-1] if tree.path else -1) if final is not None else None
    rows, root_row, n_rows = tidy_rows(parents, under)
    xs = depths(parents) + ([len(tree.path) + 1] if final is not None else [])
    order = sibling_order(tree)
    on_path = set(tree.path)

    fig = go.Figure()
    edge_x: list[float | None] = []
    edge_y: list[float | None] = []
    path_x: list[float | None] = []
    path_y: list[float | None] = []
    for j in range(len(xs)):
        parent = parents[j] if j < len(parents) else under
        px, py = (0, root_row) if parent < 0 else (xs[parent], rows[parent])
        thick = (j in on_path) or (j == len(parents))
        bx, by = (path_x, path_y) if thick else (edge_x, edge_y)
        bx += [px + 0.36, xs[j] - 0.36, None]
        by += [py, rows[j], None]
    fig.add_trace(go.Scatter(x=edge_x, y=edge_y, mode="lines", line={"color": "#bbbbbb", "width": 1.5},
                             hoverinfo="skip", showlegend=False))
    fig.add_trace(go.Scatter(x=path_x, y=path_y, mode="lines", line={"color": pal.ACCEPTED, "width": 4},
                             hoverinfo="skip", showlegend=False))

    labels, hovers, colours = [_root_label(trace, i)], [
        "the root: the token the tree hangs under (the target has not seen it yet; it is fed first)"], [ROOT]
    for j, nd in enumerate(tree.nodes):
        tok = nd.text or str(nd.token_id)
        labels.append(f"<b>{plot_text(tok, LABEL_CHARS)}</b><br>q {fmt(nd.q, 2)} · p {fmt(nd.p, 2)}<br>"
                      f"{walk_text(nd, order[j], tree.rule)}")
        hovers.append(f"node {j + 1}: {html.escape(repr(tok), quote=False)} (id {nd.token_id}), depth {xs[j]}, "
                      f"child {order[j]} of its parent<br>q = {fmt(nd.q, 4)} · p = {fmt(nd.p, 4)}<br>"
                      f"α = {fmt(nd.alpha, 2)} · u = {fmt(nd.u, 2)} · {html.escape(nd.status, quote=False)}")
        colours.append(_colour(nd.status))
    if final is not None:
        labels.append(final[0])
        hovers.append(final[1])
        colours.append(final[2])
    all_x = [0, *xs]
    all_y = [root_row, *rows]
    fig.add_trace(go.Scatter(x=all_x, y=all_y, mode="markers+text", text=labels, hovertext=hovers,
                             hoverinfo="text", marker={"size": 34, "opacity": 0}, showlegend=False,
                             textfont={"size": 12, "color": colours}))
    shapes = []
    statuses = ["root", *(nd.status for nd in tree.nodes), *(["final"] if final is not None else [])]
    for x, y, st, col in zip(all_x, all_y, statuses, colours):
        shapes.append({"type": "rect", "x0": x - 0.36, "x1": x + 0.36, "y0": y - 0.42, "y1": y + 0.42,
                       "layer": "below", "fillcolor": col + ("33" if st in ("accepted", "final") else
                                                             "18" if st == "rejected" else "00"),
                       "line": {"color": col, "width": 3 if st in ("accepted", "final") else 1.2,
                                "dash": "dot" if st == "untested" else "solid"}})
    tested = sum(nd.status != "untested" for nd in tree.nodes)
    m = len(it.emitted)
    rule = RULE_NAMES.get(tree.rule, tree.rule)
    path = f"{len(tree.path)} node{'s' if len(tree.path) != 1 else ''}"
    subtitle = html.escape(f"{len(tree.nodes)} nodes drafted ({tree.siblings} siblings), {tested} tested; accepted "
                           f"path {path} → {m} token{'s' if m != 1 else ''} from ONE target forward "
                           f"({it.verify_ms:.0f} ms)", quote=False) + "<br>" + html.escape(f"rule: {rule}", quote=False)
    subtitle += "<br>thick green: the accepted path · vermillion: tested, rejected · dotted: not tested"
    height = min(MAX_HEIGHT, max(300, 180 + SLOT_PX * n_rows))
    apply_layout(fig, title, height=height, subtitle=subtitle, shapes=shapes, showlegend=False)
    depth = max(all_x)
    fig.update_xaxes(range=[-0.5, depth + 0.5], tickvals=list(range(depth + 1)),
                     ticktext=["root"] + [f"depth {d}" for d in range(1, depth + 1)], side="bottom", showgrid=False,
                     fixedrange=True)
    fig.update_yaxes(range=[n_rows - 0.4, -0.6], visible=False, fixedrange=True)
    return fig


# --- the attention mask -----------------------------------------------------------------------------

def tree_mask_figure(trace: Trace | None, index: int | None = None) -> go.Figure:
    """The attention mask the selected iteration's verify used, as a heatmap (see the module docstring)."""
    title = "Tree attention mask"
    i = resolve_index(trace, index) if trace is not None else None
    if i is None:
        return empty_figure(title, "A tree iteration's verify mask shows here.", 300)
    it = trace.iterations[i]
    title = f"Attention mask of iteration {i + 1}'s verify"
    if it.tree is None:
        return empty_figure(title, "A chain is verified with the ordinary causal mask.", 220)
    parents = [nd.parent for nd in it.tree.nodes]
    mask = visibility(parents, n_chain=1).tolist()       # the engine's own builder: the root, then the nodes
    n = len(parents) + 1
    depth = [0, *depths(parents)]
    names = ["0 root"] + [f"{j + 1} {plot_text(nd.text or str(nd.token_id), 8)}" for j, nd in enumerate(it.tree.nodes)]
    z = [[1 if v else 0 for v in row] for row in mask]
    hover = [[f"{names[r]} (position +{depth[r]}) {'sees' if mask[r][c] else 'does not see'} {names[c]}"
              for c in range(n)] for r in range(n)]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(n)), y=list(range(n)), text=hover, hoverinfo="text",
                               colorscale=[[0, "#ffffff"], [1, pal.TARGET]], zmin=0, zmax=1, showscale=False,
                               xgap=1, ygap=1))
    apply_layout(fig, title, height=min(MAX_HEIGHT, max(300, 150 + 22 * n)),
            subtitle="row sees column · every row also sees the cached prefix · position = prefix length + depth",
            showlegend=False)
    fig.update_layout(plot_bgcolor="#eeeeee")
    fig.update_xaxes(tickvals=list(range(n)), ticktext=[str(c) for c in range(n)], side="top", showgrid=False,
                     fixedrange=True)
    fig.update_yaxes(tickvals=list(range(n)), ticktext=names, autorange="reversed", showgrid=False, fixedrange=True)
    return fig


__all__ = ["tree_figure", "tree_mask_figure", "tidy_rows", "sibling_order", "walk_text", "has_trees",
           "chain_hint"]
