"""Tree verification (decoding/tree_verify.py), tested exactly: no sampling statistics.

As in tests/test_verify.py: tiny vocabularies, target (p) and draft (q) tables that depend on the prefix,
and the law of the emitted tokens computed by enumeration: every drafted tree (independent siblings: every
assignment of i.i.d. draws from q at each parent, weighted by its probability; distinct siblings: the top
candidates of q, one tree), every branch of the walk (recursive rejection: which child's uniform falls below
its alpha; target draw: which token y the target draws at each visited node), each branch decided by the
real code (``decide_tree`` called with randomness inside the branch). The law of the first L tokens must
equal the target's autoregressive law to float64 precision, under plain sampling and under temperature
0.7 with top-k and top-p; the ``topk_ratio_rule`` bug must move it.
"""
from __future__ import annotations

import functools
from collections import defaultdict

import pytest
import torch

from specdec_core.bugs import NO_BUGS, InjectedBugs
from specdec_core.decoding.tree_verify import _recursive_tables, decide_tree, rule_for, verify_tree
from specdec_core.decoding.verify import verify
from specdec_core.drafters.base import Proposal
from specdec_core.drafters.tree import TreeProposal, children
from tests.tree_helpers import chain_parents, path_to
from specdec_core.sampling import Warping, sample, warp_logits
from tests.test_verify import _table, gap, target_law

TOPK_BUG = InjectedBugs(topk_ratio_rule=True)


def _warped(name: str, V: int, warping: Warping | None):
    """A table of distributions per prefix: plain (``_table`` with a zero) or random logits warped by ``warping``
    (temperature, top-k, top-p: zeros where the warp cuts), renormalised in float64."""
    if warping is None:
        return _table(name, V, True)
    base = _table(name, V, False)

    @functools.cache
    def dist(prefix: tuple) -> torch.Tensor:   # the table's logits (2 randn) flattened to 0.5 randn, then warped
        w = warp_logits(base(prefix).log() / 4, warping.temperature, warping.top_k, warping.top_p).double()
        return w / w.sum()
    return dist


def _ctx(prefix: tuple, tokens: list[int], parents: list[int], node: int) -> tuple:
    """The sequence a node's children are drawn after: the prefix and the path's tokens down to ``node``."""
    return prefix + tuple(tokens[i] for i in path_to(parents, node))


def _trees(q, prefix: tuple, parents: list[int], siblings: str, V: int) -> list[tuple[list[int], float]]:
    """Every drafted tree of this shape and its probability."""
    if siblings == "distinct":   # the top candidates of q at each parent, best first
        tokens: list[int] = []
        for i, par in enumerate(parents):
            rank = children(parents, par).index(i)
            order = torch.argsort(q(_ctx(prefix, tokens, parents, par)), descending=True, stable=True)
            tokens.append(int(order[rank]))
        return [(tokens, 1.0)]
    out = [([], 1.0)]
    for i, par in enumerate(parents):
        nxt = []
        for toks, w in out:
            d = q(_ctx(prefix, toks, parents, par))
            nxt += [(toks + [t], w * float(d[t])) for t in range(V) if d[t] > 0]
        out = nxt
    return out


def _proposal(p, q, prefix, tokens, parents, siblings) -> tuple[torch.Tensor, TreeProposal]:
    p_rows = torch.stack([p(_ctx(prefix, tokens, parents, i)) for i in range(-1, len(tokens))])
    q_rows = torch.stack([q(_ctx(prefix, tokens, parents, par)) for par in parents])
    return p_rows, TreeProposal(list(tokens), list(parents), siblings, q_rows)


def iteration(p, q, V: int, parents: list[int], siblings: str, prefix: tuple,
              bugs: InjectedBugs = NO_BUGS) -> dict[tuple, float]:
    """The law of what one tree iteration from ``prefix`` emits."""
    rule = rule_for(siblings, False, bugs)
    out: dict[tuple, float] = defaultdict(float)
    for tokens, w_tree in _trees(q, prefix, parents, siblings, V):
        p_rows, prop = _proposal(p, q, prefix, tokens, parents, siblings)
        if rule == "recursive_rejection":
            alpha = _recursive_tables(p_rows, prop.draft_probs, prop)[0].tolist()
            for path, u, w in _rejection_branches(parents, alpha, -1, [], [0.5] * len(tokens), w_tree):
                d = decide_tree(p_rows, prop, rule, u=torch.tensor(u, dtype=torch.float64), bugs=bugs)
                assert d.path == path
                emitted = tuple(tokens[i] for i in path)
                if not d.keeps_new_token:
                    out[emitted] += w
                    continue
                for t in torch.nonzero(d.drawn_from).flatten().tolist():
                    out[emitted + (t,)] += w * float(d.drawn_from[t])
        else:
            for path, draws, w in _draw_branches(tokens, parents, p_rows, -1, [], [0] * (len(tokens) + 1), w_tree):
                d = decide_tree(p_rows, prop, rule, draws=draws, bugs=bugs)
                assert d.path == path and d.token == draws[d.stop + 1]
                out[tuple(tokens[i] for i in path) + ((d.token,) if d.keeps_new_token else ())] += w
    return out


def _rejection_branches(parents, alpha, node, path, u, w):
    """(path, uniforms inside the branch, probability) for every outcome of recursive rejection below ``node``."""
    kids = children(parents, node)
    fail = w
    for c in kids:
        u_acc = list(u)
        u_acc[c] = alpha[c] / 2
        if fail * alpha[c] > 0:
            yield from _rejection_branches(parents, alpha, c, path + [c], u_acc, fail * alpha[c])
        fail *= 1 - alpha[c]
        u = list(u)
        u[c] = (1 + alpha[c]) / 2
    if fail > 0:
        yield path, u, fail


def _draw_branches(tokens, parents, p_rows, node, path, draws, w):
    """(path, the target's draw per row, probability) for every outcome of the target draw below ``node``."""
    kids = children(parents, node)
    row = p_rows[node + 1]
    for y in range(row.shape[0]):
        if row[y] == 0:
            continue
        d = list(draws)
        d[node + 1] = y
        chosen = next((c for c in kids if tokens[c] == y), None)
        if chosen is None:
            yield path, d, w * float(row[y])
        else:
            yield from _draw_branches(tokens, parents, p_rows, chosen, path + [chosen], d, w * float(row[y]))


def tree_law(p, q, V, parents, siblings, L, bugs=NO_BUGS) -> dict[tuple, float]:
    @functools.cache
    def law_from(prefix: tuple) -> dict[tuple, float]:
        if len(prefix) >= L:
            return {prefix[:L]: 1.0}
        out: dict[tuple, float] = defaultdict(float)
        for emitted, w in iteration(p, q, V, parents, siblings, prefix, bugs).items():
            for seq, w_seq in law_from(prefix + emitted).items():
                out[seq] += w * w_seq
        return out
    return dict(law_from(()))


SHAPES = {"fork": [-1, -1, 0, 0], "wide": [-1, -1, -1, 0], "deep": [-1, 0, 0, 1]}
WARPS = {"T1": None, "T0.7-topk-topp": Warping(0.7, top_k=3, top_p=0.9)}


@pytest.mark.parametrize("warp", list(WARPS))
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("siblings", ["independent", "distinct"])
def test_tree_emits_the_target_law_exactly(siblings, shape, warp):
    V, L = (3, 3) if siblings == "independent" else (4, 3)
    p, q = _warped("p", V, WARPS[warp]), _warped("q", V, WARPS[warp])
    law = tree_law(p, q, V, SHAPES[shape], siblings, L)
    assert min((p(s[:1]) > 0).sum() for s in law) >= 2          # the warp leaves a choice
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert gap(law, target_law(p, V, L)) < 1e-12


def _point_mass_law(p, V: int, L: int, tokens: list[int], parents: list[int]) -> dict[tuple, float]:
    """The law of the first L tokens when every iteration proposes this fixed tree of point masses."""
    prop = TreeProposal(tokens, parents, "independent", None)
    one_hot = torch.nn.functional.one_hot(torch.tensor(tokens), V).double()

    @functools.cache
    def law_from(prefix: tuple) -> dict[tuple, float]:
        if len(prefix) >= L:
            return {prefix[:L]: 1.0}
        p_rows = torch.stack([p(_ctx(prefix, tokens, parents, i)) for i in range(-1, len(tokens))])
        alpha = _recursive_tables(p_rows, one_hot, prop)[0].tolist()
        out: dict[tuple, float] = defaultdict(float)
        for path, u, w in _rejection_branches(parents, alpha, -1, [], [0.5] * len(tokens), 1.0):
            d = decide_tree(p_rows, prop, "recursive_rejection", u=torch.tensor(u, dtype=torch.float64))
            for t in torch.nonzero(d.drawn_from).flatten().tolist():
                for seq, ws in law_from(prefix + tuple(tokens[i] for i in path) + (t,)).items():
                    out[seq] += w * float(d.drawn_from[t]) * ws
        return out
    return dict(law_from(()))


def test_point_mass_siblings_under_recursive_rejection_are_exact():
    """draft_probs None: each child a point mass on its token (recursive rejection without q, SpecInfer's
    rule with q_i = delta(x_i)); exact for any fixed tokens, repeats included."""
    V, L = 4, 3
    p = _warped("p", V, None)
    for tokens in ([1, 2, 1], [0, 0, 3]):
        assert gap(_point_mass_law(p, V, L, tokens, [-1, -1, 0]), target_law(p, V, L)) < 1e-12


@pytest.mark.parametrize("warp", list(WARPS))
def test_the_topk_ratio_rule_on_distinct_siblings_is_biased(warp):
    V, L = 4, 2
    p, q = _warped("p", V, WARPS[warp]), _warped("q", V, WARPS[warp])
    law = tree_law(p, q, V, SHAPES["fork"], "distinct", L, TOPK_BUG)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert gap(law, target_law(p, V, L)) > 1e-3


def test_the_topk_ratio_rule_first_token_in_closed_form():
    """Two distinct siblings x1, x2 (q's top two), one level: the ratio rule accepts x1 with a1 = min(1, p/q),
    then x2 against p2 = norm(max(0, p - q)), else draws from norm(max(0, p2 - q))."""
    V = 4
    p0, q0 = _table("p", V, False)(()), _table("q", V, False)(())
    x1, x2 = torch.argsort(q0, descending=True)[:2].tolist()

    def res(a, b):
        r = (a - b).clamp_min(0)
        return r / r.sum()
    a1 = min(1.0, float(p0[x1] / q0[x1]))
    p2 = res(p0, q0)
    a2 = min(1.0, float(p2[x2] / q0[x2]))
    closed = (1 - a1) * (1 - a2) * res(p2, q0)
    closed[x1] += a1
    closed[x2] += (1 - a1) * a2
    law = tree_law(_table("p", V, False), _table("q", V, False), V, [-1, -1], "distinct", 1, TOPK_BUG)
    assert max(abs(law.get((t,), 0.0) - float(closed[t])) for t in range(V)) < 1e-12
    assert float((closed - p0).abs().max()) > 1e-3


@pytest.mark.parametrize("siblings", ["independent", "distinct"])
def test_drop_bonus_and_resample_from_p_on_trees(siblings):
    V, L = 3, 2
    p, q = _warped("p", V, None), _warped("q", V, None)
    exact = target_law(p, V, L)
    assert gap(tree_law(p, q, V, SHAPES["fork"], siblings, L, InjectedBugs(drop_bonus=True)), exact) < 1e-12
    if siblings == "independent":
        assert gap(tree_law(p, q, V, SHAPES["fork"], siblings, L, InjectedBugs(resample_from_p=True)), exact) > 1e-3


# --- verify_tree itself: the random stream, the chain case, greedy ------------------------------------------

@pytest.mark.parametrize("point_mass", [False, True])
@pytest.mark.parametrize("warping", [Warping(1.0), Warping(0.7, top_k=5, top_p=0.9)])
def test_a_chain_as_a_tree_is_verify_exactly(warping, point_mass):
    """Same logits, same generator state: the same accepted count, uniforms, alphas, new token and display."""
    V, n = 9, 4
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(n + 1, V, generator=g) * 2
    q = warp_logits(torch.randn(n, V, generator=g) * 2, warping.temperature, warping.top_k, warping.top_p)
    raw_q = torch.softmax(torch.randn(n, V, generator=g), -1)
    for seed in range(60):
        drafts = (torch.argmax(logits[:n] + torch.randn(n, V, generator=g), -1) if seed % 2 else
                  torch.randint(V, (n,), generator=g)).tolist()
        dp = None if point_mass else q
        chain = verify(logits, Proposal(drafts, dp, raw_q), warping, torch.Generator().manual_seed(seed), show=True)
        tree = verify_tree(logits, TreeProposal(drafts, chain_parents(n), "independent", dp, raw_q), warping,
                           torch.Generator().manual_seed(seed), show=True)
        assert tree.rule == "recursive_rejection"
        assert tree.n_accepted == chain.n_accepted and tree.path == list(range(chain.n_accepted))
        assert (tree.token, tree.emitted, tree.token_p) == (chain.token, chain.emitted, chain.token_p)
        assert tree.token_residual_prob == chain.token_residual_prob and tree.rejected == chain.rejected
        tested = chain.n_accepted + (1 if chain.rejected else 0)
        assert tree.alpha[:tested] == chain.alpha[:tested] and tree.u[:tested] == chain.u[:tested]
        assert tree.p == chain.p and tree.q == chain.q and tree.p_raw == chain.p_raw and tree.q_raw == chain.q_raw
        assert (tree.residual_top, tree.p_top, tree.q_top) == (chain.residual_top, chain.p_top, chain.q_top)
        assert torch.equal(tree.drawn_from, chain.drawn_from)


def test_target_draw_uses_one_draw_per_row():
    V = 6
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, V, generator=g)
    prop = TreeProposal([2, 3, 4], [-1, -1, 0], "distinct", None)
    w = Warping(0.8, top_k=4)
    for seed in range(30):
        v = verify_tree(logits, prop, w, torch.Generator().manual_seed(seed))
        p = w.probs(logits)
        y = sample(p, torch.Generator().manual_seed(seed)).tolist()
        d = decide_tree(p, prop, "target_draw", draws=y)
        assert v.rule == "target_draw" and (v.path, v.token) == (d.path, d.token) and v.u == [None] * 3
        assert v.emitted == [prop.tokens[i] for i in v.path] + [v.token]
        if not v.stopped_at_leaf:
            kids = children(prop.parents, v.path[-1] if v.path else -1)
            p_kids = sum(float(p[(v.path[-1] + 1) if v.path else 0, prop.tokens[c]]) for c in kids)
            assert v.token_residual_prob == pytest.approx(v.token_p / (1 - p_kids))


def test_greedy_follows_the_argmax_child():
    V = 5
    logits = torch.full((6, V), -5.0)
    argmax = [3, 1, 4, 0, 2, 2]          # per row: root, nodes 0..4
    for r, t in enumerate(argmax):
        logits[r, t] = 5.0
    parents = [-1, -1, -1, 1, 1]          # root: 0, 1, 2; node 1: 3, 4
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    for tokens, path, emitted in (([1, 3, 4, 0, 4], [1, 4], [3, 4, 2]),      # root -> node 1 (3) -> node 4 (4)
                                  ([1, 2, 0, 0, 0], [], [3]),                  # no child is the argmax
                                  ([3, 3, 3, 1, 1], [0], [3, 1])):             # first matching child, then leaf
        for siblings in ("independent", "distinct"):
            v = verify_tree(logits, TreeProposal(tokens, parents, siblings, None), Warping(0.0), g, show=True)
            assert (v.rule, v.path, v.emitted) == ("greedy", path, emitted)
            assert v.alpha == v.u == [None] * 5 and v.token_p == 1.0
            assert all((s == "accepted") == (i in path) for i, s in enumerate(v.status))
    assert torch.equal(g.get_state(), state)
    v = verify_tree(logits, TreeProposal([1, 3, 4, 0, 4], parents, "distinct", None), Warping(0.0), g,
                    InjectedBugs(drop_bonus=True))
    assert v.emitted == [3, 4] and v.stopped_at_leaf


def test_recursive_rejection_statuses_are_in_sibling_order():
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4]] * 4, dtype=torch.float64)
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1]] * 3, dtype=torch.float64)
    prop = TreeProposal([0, 2, 1], [-1, -1, -1], "independent", q)
    alpha = _recursive_tables(p, q, prop)[0].tolist()
    # token 0: 0.1 / 0.4; token 2 against norm(max(0, p - q)) = (0, 0, .25, .75): 1; token 1 against
    # norm(max(0, that - q)) = (0, 0, .05, .65) / .7: 0
    assert alpha == pytest.approx([0.25, 1.0, 0.0])
    d = decide_tree(p, prop, "recursive_rejection", u=torch.tensor([0.9, alpha[1] / 2, 0.0], dtype=torch.float64))
    assert d.path == [1] and d.status == ["rejected", "accepted", "untested"] and d.u[2] is None
    assert d.alpha[2] is None and d.stopped_at_leaf


@pytest.mark.parametrize("warping,siblings", [(Warping(0.0), "distinct"), (Warping(1.0), "independent"),
                                              (Warping(0.9, top_k=3), "distinct")])
def test_an_empty_tree_emits_one_token_from_p_at_the_root(warping, siblings):
    logits = torch.randn(1, 7, generator=torch.Generator().manual_seed(0))
    v = verify_tree(logits, TreeProposal([], [], siblings, None), warping, torch.Generator().manual_seed(1), show=True)
    assert v.path == [] and v.stopped_at_leaf and len(v.emitted) == 1 and v.token_residual_prob is None
    assert v.token_p == pytest.approx(float(warping.probs(logits)[0, v.token]))
