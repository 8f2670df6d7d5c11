"""Verification of a token tree as one pure function, ``verify_tree`` (the chain's is ``verify``).

The target's logits come for the root (the iteration's last token) and for every node; p at a node is
the target's warped distribution of the token after it. The walk starts at the root and descends one
level at a time; where it stops it emits one more token. Three rules, chosen by how siblings were drawn
(``rule_for``):

- ``"greedy"`` (temperature 0, any siblings): descend into the child equal to the target's argmax; where
  no child matches (or at a leaf) emit the argmax. The output is the target's greedy output.
- ``"recursive_rejection"`` (siblings drawn independently from q): multi-step speculative sampling,
  SpecInfer (Miao et al. 2024, "SpecInfer: Accelerating Large Language Model Serving with Tree-based
  Speculative Inference and Verification", §4.2, MSS). At a node with children x_1 … x_m and p_1 = p:
  accept x_i iff u_i < min(1, p_i(x_i) / q_i(x_i)), else p_{i+1} = norm(max(0, p_i - q_i)); the
  accepted child is descended into (with its own fresh p); when every child fails a token is drawn from
  p_{m+1}; at a leaf the bonus is drawn from p. Each q_i is the distribution child i was drawn from
  (a point mass when the drafter gives none). Exact: each test is a speculative-sampling step whose
  target is the previous residual. A chain is the tree with one child per node, and then this is
  exactly ``verify`` (the same uniforms, the same draws).
- ``"target_draw"`` (distinct siblings: the draft's top candidates, chosen deterministically): the
  "naive sampling" of SpecInfer (§4.2): draw y ~ p at the node; if y is a child, descend into it, else
  emit y (at a leaf y is the bonus). Exact because every emitted token is a draw from p at its node.
  Recursive rejection is NOT exact for such siblings (they were not drawn from q); the injected bug
  ``topk_ratio_rule`` applies it anyway, as llama.cpp's tree example did.
- ``"coupled"`` (coupled sampling, any siblings): as the target draw, with the target's token at each row its
  keyed sample y = argmax(p / E_t) at the row's absolute position t (``coupled_verify``): descend into the child
  equal to y, else emit y. Every emitted token is the target's own keyed sample given the accepted prefix, so
  the output is the coupled target-only run's whatever the tree (exact and drafter-invariant).

tests/test_tree_verify.py checks all three by enumeration: the law of the emitted tokens equals p to
float64 precision. Randomness comes from the run's generator in a fixed order: recursive rejection draws
one uniform per node (in node order, used when tested), then one draw for the new token; the target
draw draws one uniform per row (root and every node) and, on the CPU, samples only the rows the walk visits
(elsewhere every row at once, so that everything the walk needs goes to the host in one transfer, as for
greedy); recursive rejection's new token, sampled once the walk has ended, and the display rows take one
more.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..drafters.tree import TreeProposal, children, depths
from ..sampling import Warping, acceptance_probs, inverse_cdf, residual_distribution, sample
from ..trace import TREE_RULES as RULES
from .coupled_verify import CoupledDraws, Noise
from .verify import Top, _top, host_values, sampled_to_host


def rule_for(siblings: str, greedy: bool, bugs: InjectedBugs = NO_BUGS, coupled: bool = False) -> str:
    """The verification rule that is exact for this kind of siblings (or, with the ``topk_ratio_rule`` bug,
    recursive rejection on distinct siblings, which is not); under coupled sampling the coupled rule."""
    if greedy:
        return "greedy"
    if coupled:
        return "coupled"
    if siblings == "independent" or bugs.topk_ratio_rule:
        return "recursive_rejection"
    return "target_draw"


@dataclass
class TreeVerdict:
    """What one tree verification decided, as plain host values (tensors only where noted)."""
    rule: str
    path: list[int]                      # accepted node indices, root to leaf
    token: int                           # the token emitted after the path (replacement or bonus)
    emitted: list[int]                   # the path's tokens, then the token (unless drop_bonus dropped it)
    status: list[str]                    # per node: "accepted" | "rejected" | "untested"
    p: list[float]                       # per node: warped p of its token at its parent
    q: list[float]                       # per node: q of its token (1.0 for a point mass)
    alpha: list[float | None]            # per node: the acceptance probability it was tested with
                                         # (recursive rejection only; None otherwise or untested)
    u: list[float | None]                # per node: its uniform (recursive rejection, tested nodes)
    stopped_at_leaf: bool                # True: the token is a bonus; False: every child of the stop failed
    token_p: float                       # warped p of the token at the stop
    token_residual_prob: float | None    # its probability under what it was drawn from given the children
                                         # failed (None for a bonus, and under the coupled rule)
    p_raw: list[float] | None = None     # display: unwarped p(x), q(x) per node
    q_raw: list[float] | None = None
    drawn_from: torch.Tensor | None = None   # (V,) the law of the token given the walk (None when greedy)
    residual_top: Top = field(default_factory=list)   # shown when every child failed (``show``)
    p_top: Top = field(default_factory=list)
    q_top: Top = field(default_factory=list)
    token_q: float | None = None         # the coupled rule: the draft's q (at the stop) of the token emitted there

    @property
    def n_accepted(self) -> int:
        return len(self.path)

    @property
    def rejected(self) -> bool:
        return not self.stopped_at_leaf

    def accept_prob(self, node: int) -> float:
        """The probability an accepted node was accepted with, once reached and its earlier siblings failed:
        its alpha (recursive rejection), p(x) (the target draw), 1 (greedy). The coupled rule: p(x), the chance
        the target's keyed sample is x before the draft's noise is known (given it, the chance is not p(x))."""
        if self.rule == "recursive_rejection":
            return float(self.alpha[node])
        return self.p[node] if self.rule in ("target_draw", "coupled") else 1.0


def verify_tree(logits: torch.Tensor, proposal: TreeProposal, warping: Warping,
                generator: torch.Generator | None, bugs: InjectedBugs = NO_BUGS, show: bool = False,
                noise: Noise | None = None) -> TreeVerdict:
    """Verify a token tree (module docstring). ``logits`` (N + 1, V): the target's logits at the root
    (row 0) and at node i (row i + 1). ``show``: also the unwarped p(x), q(x) per node and, where every child
    failed, the top ``TOP_N`` of what the token was drawn from, of p and of the first child's q.
    ``noise``: coupled sampling's keyed noise by offset from the root's row (``coupled_verify.Noise``; a node at
    depth d reads offset d); given, the rule is the coupled one (no generator call).
    Injected bugs: ``topk_ratio_rule`` (module docstring), ``resample_from_p`` (the replacement drawn from p,
    not the last residual), ``drop_bonus`` (the bonus at a leaf left out); the coupled rule knows only the last."""
    rule = rule_for(proposal.siblings, warping.greedy, bugs, coupled=noise is not None)
    n, dev = len(proposal.tokens), logits.device
    rows, x = _index(proposal, dev)
    raw_p = raw_q = None
    if show:
        raw_q = proposal.raw_probs[torch.arange(n, device=dev), x] if proposal.raw_probs is not None else None
    if rule == "greedy":
        argmax = logits.argmax(-1)
        if show:
            raw_p = logits[rows].float().softmax(-1).gather(-1, x[:, None])[:, 0]
        q_x = _q_x(proposal, x, n, dev)
        host = host_values(q=q_x, raw=(raw_p, raw_q), ids=argmax)
        d = decide_tree(None, proposal, rule, draws=host.ids, q_x=host.q, bugs=bugs)
        return _finish(d, proposal, None, None, host.p_raw, host.q_raw, show)
    p = warping.probs(logits)
    if show:
        raw_p = (p if warping.plain else logits.float().softmax(-1))[rows, x]
    if rule == "recursive_rejection":
        u = torch.rand(n, generator=generator, device=dev)
        d = decide_tree(p, proposal, rule, u=u, bugs=bugs, raw=(raw_p, raw_q))
        token_t = sample(d.drawn_from, generator)
        return _finish(d, proposal, token_t, p, d.p_raw, d.q_raw, show)
    if rule == "coupled":
        d = decide_tree(p, proposal, rule, draws=CoupledDraws(p, noise, [0] + depths(proposal.parents)), bugs=bugs,
                        raw=(raw_p, raw_q))
        return _finish(d, proposal, None, p, d.p_raw, d.q_raw, show)
    u = torch.rand((n + 1, 1), generator=generator, dtype=torch.float64, device=dev)   # as ``sample`` draws
    draws = _LazyDraws(p, u) if dev.type == "cpu" else inverse_cdf(p, u)   # the CPU samples only rows visited
    d = decide_tree(p, proposal, rule, draws=draws, bugs=bugs, raw=(raw_p, raw_q))
    return _finish(d, proposal, None, p, d.p_raw, d.q_raw, show)


@dataclass(kw_only=True)
class TreeDecision:
    """The walk for given randomness: the path, each node's test, and what the new token is (or is drawn from)."""
    rule: str
    path: list[int]
    status: list[str]
    p: list[float]
    q: list[float]
    alpha: list[float | None]
    u: list[float | None]
    stop: int                             # the node the walk ended at (-1 = the root)
    stopped_at_leaf: bool
    token: int | None                     # known already (greedy, target draw); None = draw it from drawn_from
    drawn_from: torch.Tensor | None       # (V,) the token's law given the walk (None when greedy)
    p_stop: torch.Tensor | None           # (V,) p at the stop (None when greedy)
    keeps_new_token: bool
    p_raw: list[float] | None = None
    q_raw: list[float] | None = None
    token_p: float | None = None          # the token's p and residual probability when already on the host
    token_residual_prob: float | None = None


def decide_tree(target_probs: torch.Tensor | None, proposal: TreeProposal, rule: str, *,
                u: torch.Tensor | None = None,
                draws: "torch.Tensor | list[int] | _LazyDraws | CoupledDraws | None" = None,
                q_x: list[float] | None = None, bugs: InjectedBugs = NO_BUGS,
                raw: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)) -> TreeDecision:
    """The walk of ``rule`` for given randomness. ``target_probs`` (N + 1, V): warped p at the root and at
    each node (any float dtype; float64 stays float64); None for greedy. Recursive rejection reads the
    uniforms ``u`` (N,), one per node; the target draw and greedy read ``draws`` (N + 1,): the token drawn
    from p (greedy: the argmax) at the root and at each node. ``q_x``: greedy's q per node, already on
    the host."""
    tokens, parents = proposal.tokens, proposal.parents
    n = len(tokens)
    if rule == "greedy":
        p_l = [float(tokens[i] == draws[parents[i] + 1]) for i in range(n)]
        path, status, stop = _walk_by_draw(tokens, parents, draws)
        leaf = not children(parents, stop)
        return TreeDecision(rule=rule, path=path, status=status, p=p_l, q=q_x, alpha=[None] * n, u=[None] * n,
                            stop=stop, stopped_at_leaf=leaf, token=draws[stop + 1], drawn_from=None, p_stop=None,
                            keeps_new_token=not (bugs.drop_bonus and leaf and path), p_raw=raw[0], q_raw=raw[1])
    dev = target_probs.device
    rows, x = _index(proposal, dev)
    p_x = target_probs[rows, x]
    q_rows = _q_rows(proposal, target_probs)
    q_x = q_rows.gather(-1, x[:, None])[:, 0]
    if rule == "recursive_rejection":
        alpha_t, after = _recursive_tables(target_probs, q_rows, proposal)
        host = host_values(p=p_x, q=q_x, alpha=alpha_t, u=u, raw=raw)
        path, status, stop = _walk_by_rejection(parents, host.alpha, host.u)
        kids = children(parents, stop)
        leaf = not kids
        p_stop = target_probs[stop + 1]
        drawn = p_stop if (leaf or bugs.resample_from_p) else after[kids[-1]]
        tested = [s != "untested" for s in status]
        return TreeDecision(rule=rule, path=path, status=status, p=host.p, q=host.q,
                            alpha=[a if t else None for a, t in zip(host.alpha, tested)],
                            u=[v if t else None for v, t in zip(host.u, tested)], stop=stop, stopped_at_leaf=leaf,
                            token=None, drawn_from=drawn, p_stop=p_stop,
                            keeps_new_token=not (bugs.drop_bonus and leaf and path), p_raw=host.p_raw,
                            q_raw=host.q_raw)
    if rule not in ("target_draw", "coupled"):
        raise ValueError(f"unknown tree verification rule {rule!r}; expected one of {RULES}")
    if isinstance(draws, (_LazyDraws, CoupledDraws)):
        host = host_values(p=p_x, q=q_x, raw=raw)
        y: list[int] | _LazyDraws = draws
    else:   # every row's draw and its p come with the walk's values, in one transfer
        draws_t = torch.as_tensor(draws, device=dev)
        host = host_values(p=p_x, q=q_x, raw=raw, ids=draws_t,
                           ids_p=target_probs[torch.arange(n + 1, device=dev), draws_t])
        y = host.ids
    path, status, stop = _walk_by_draw(tokens, parents, y)
    kids = children(parents, stop)
    p_stop = target_probs[stop + 1]
    token = y[stop + 1]
    token_p = host.ids_p[stop + 1] if host.ids_p is not None else float(p_stop[token])
    drawn, token_res = (p_stop if rule == "target_draw" else None), None
    if kids and rule == "target_draw":   # y was none of the children: its law is p without them
        kid_tokens = sorted({tokens[c] for c in kids})
        drawn = p_stop.clone()
        drawn[torch.tensor(kid_tokens, device=dev)] = 0
        drawn = drawn / drawn.sum().clamp_min(1e-30)
        kid_mass = sum(host.p[next(c for c in kids if tokens[c] == t)] for t in kid_tokens)
        token_res = token_p / max(1.0 - kid_mass, 1e-30)
    return TreeDecision(rule=rule, path=path, status=status, p=host.p, q=host.q, alpha=[None] * n, u=[None] * n,
                        stop=stop, stopped_at_leaf=not kids, token=token, drawn_from=drawn, p_stop=p_stop,
                        keeps_new_token=not (bugs.drop_bonus and not kids and path), p_raw=host.p_raw,
                        q_raw=host.q_raw, token_p=token_p, token_residual_prob=token_res)


class _LazyDraws:
    """The target draw's token at each row of p, sampled when the walk first reads the row (from the uniform
    drawn for it up front), so only the visited rows are sampled."""

    def __init__(self, p: torch.Tensor, u: torch.Tensor) -> None:
        self.p, self.u, self.drawn = p, u, {}

    def __getitem__(self, row: int) -> int:
        if row not in self.drawn:
            self.drawn[row] = int(inverse_cdf(self.p[row:row + 1], self.u[row:row + 1])[0])
        return self.drawn[row]


def _walk_by_draw(tokens: list[int], parents: list[int], draws: list[int]) -> tuple[list[int], list[str], int]:
    """Greedy and the target draw: at each node, the first child whose token is the node's draw is accepted,
    every other child rejected; no such child (or none at all) ends the walk."""
    status = ["untested"] * len(tokens)
    path: list[int] = []
    node = -1
    while True:
        kids = children(parents, node)
        chosen = next((c for c in kids if tokens[c] == draws[node + 1]), None)
        for c in kids:
            status[c] = "accepted" if c == chosen else "rejected"
        if chosen is None:
            return path, status, node
        path.append(chosen)
        node = chosen


def _walk_by_rejection(parents: list[int], alpha: list[float], u: list[float]) -> tuple[list[int], list[str], int]:
    """Recursive rejection: children in order, each accepted iff u < alpha; the first accepted is descended
    into (later siblings stay untested); none accepted ends the walk."""
    status = ["untested"] * len(parents)
    path: list[int] = []
    node = -1
    while True:
        chosen = None
        for c in children(parents, node):
            if u[c] < alpha[c]:
                status[c], chosen = "accepted", c
                break
            status[c] = "rejected"
        if chosen is None:
            return path, status, node
        path.append(chosen)
        node = chosen


def _recursive_tables(p: torch.Tensor, q_rows: torch.Tensor,
                      proposal: TreeProposal) -> tuple[torch.Tensor, torch.Tensor]:
    """Per node i (the r-th child of its parent): alpha_i = min(1, p_r(x_i) / q_i(x_i)), where p_0 is p at the
    parent and p_{r+1} = norm(max(0, p_r - q_i)) is ``after[i]``, the residual once child i failed. Computed
    for every node, one sibling rank at a time (reaching child r means children 0 … r-1 failed, whatever the
    uniforms), so the walk needs no more device work."""
    parents = proposal.parents
    n = len(parents)
    before = p[[q + 1 for q in parents]]                 # p_0 at each node's parent; later ranks overwritten
    after = torch.empty_like(before)
    alpha = torch.empty(n, dtype=p.dtype, device=p.device)
    x = torch.tensor(proposal.tokens, device=p.device)
    rank, prev, last_kid = [0] * n, [-1] * n, {}
    for i, par in enumerate(parents):
        if par in last_kid:
            prev[i] = last_kid[par]
            rank[i] = rank[prev[i]] + 1
        last_kid[par] = i
    rank_of = [[i for i in range(n) if rank[i] == r] for r in range(max(rank, default=-1) + 1)]
    for r, nodes in enumerate(rank_of):
        idx = torch.tensor(nodes, device=p.device)
        if r > 0:
            before[idx] = after[torch.tensor([prev[i] for i in nodes], device=p.device)]
        b, q = before[idx], q_rows[idx]
        xi = x[idx][:, None]
        alpha[idx] = acceptance_probs(b.gather(-1, xi)[:, 0], q.gather(-1, xi)[:, 0])
        after[idx] = residual_distribution(b, q)
    return alpha, after


def _finish(d: TreeDecision, proposal: TreeProposal, token_t: torch.Tensor | None, p: torch.Tensor | None,
            p_raw: list[float] | None, q_raw: list[float] | None, show: bool) -> TreeVerdict:
    """The verdict: the new token (drawn, for recursive rejection), its p and residual probability, and the
    display rows, in one transfer."""
    kids = children(proposal.parents, d.stop)
    tops: dict[str, Top] = {}
    token_q = None
    if d.rule == "greedy":
        token, token_p, res = d.token, 1.0, (None if d.stopped_at_leaf else 1.0)
        if show and kids:
            q_first = (_top(proposal.draft_probs[kids[0]]) if proposal.draft_probs is not None
                       else [(proposal.tokens[kids[0]], 1.0)])
            tops = dict(residual_top=[(token, 1.0)], p_top=[(token, 1.0)], q_top=q_first)
    elif d.rule == "coupled":   # the target's own keyed sample: no residual
        token, token_p, res = d.token, d.token_p, None
        if kids and proposal.draft_probs is not None:   # the children of the stop hang off one q
            q_stop = proposal.draft_probs[kids[0]]
            token_q = float(q_stop[token])
            tops = dict(p_top=_top(d.p_stop), q_top=_top(q_stop)) if show else {}
        elif kids:                                       # point masses on the children, none of them y
            token_q = 0.0
            tops = dict(p_top=_top(d.p_stop), q_top=[(proposal.tokens[kids[0]], 1.0)]) if show else {}
    elif d.token_p is not None and not (show and kids):   # the target draw: all on the host already
        token, token_p, res = d.token, d.token_p, d.token_residual_prob
    else:
        tok = token_t if token_t is not None else torch.tensor(d.token, device=p.device)
        shown = [d.drawn_from, d.p_stop, _q_rows(proposal, p)[kids[0]]] if (show and kids) else []
        new = sampled_to_host(tok.reshape(1), d.p_stop, d.drawn_from, shown)
        token, token_p, tops = new.token, new.p, new.tops
        res = None if d.stopped_at_leaf else new.residual_prob
    emitted = [proposal.tokens[i] for i in d.path] + ([token] if d.keeps_new_token else [])
    return TreeVerdict(rule=d.rule, path=d.path, token=token, emitted=emitted, status=d.status, p=d.p, q=d.q,
                       alpha=d.alpha, u=d.u, stopped_at_leaf=d.stopped_at_leaf, token_p=token_p,
                       token_residual_prob=res, p_raw=p_raw, q_raw=q_raw, drawn_from=d.drawn_from, token_q=token_q,
                       **tops)


def _index(proposal: TreeProposal, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(each node's parent row in the (N + 1, V) logits, each node's token)."""
    return (torch.tensor([q + 1 for q in proposal.parents], device=device, dtype=torch.long),
            torch.tensor(proposal.tokens, device=device, dtype=torch.long))


def _q_rows(proposal: TreeProposal, like: torch.Tensor) -> torch.Tensor:
    """(N, V): the distribution each node was drawn from; one-hot rows for point masses."""
    if proposal.draft_probs is not None:
        return proposal.draft_probs.to(like.dtype)
    x = torch.tensor(proposal.tokens, device=like.device, dtype=torch.long)
    return torch.nn.functional.one_hot(x, like.shape[-1]).to(like.dtype)


def _q_x(proposal: TreeProposal, x: torch.Tensor, n: int, device: torch.device) -> torch.Tensor:
    if proposal.draft_probs is None:
        return torch.ones(n, device=device)
    return proposal.draft_probs[torch.arange(n, device=device), x]
