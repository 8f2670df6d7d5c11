"""K policies: how many drafts the next iteration asks for, and why (recorded as ``k_reason``).

- ``fixed``: always K (clipped to the tokens left).
- ``heuristic``: transformers' schedule: K += 2 after an iteration whose drafts were all accepted,
  K -= 1 (not below 1) otherwise; K never exceeds the configured cap.
- ``cost``: each iteration, the K in 0..cap that maximises predicted tokens per second under the
  calibrated cost model (``costmodel``): tokens per iteration from a running acceptance estimate by draft
  position, time per iteration from prices fixed before the run starts (``calibration.Prices``: the target's
  verify curve t_verify(n), the draft's step and catch-up costs, the host time per iteration). The run learns
  only from what it emitted (acceptance by position), never from its own clock, so the same settings and seed
  make the same choices whatever the machine's load, and the same prices make them on any machine (recorded in
  the trace as ``calibration``: ``CostAwareK.from_calibration``). K = 0 (no drafts: one target forward) wins
  when drafts keep failing. What the drafter tells before drafting (``drafters.DraftOutlook``) adds rules of its
  own. With token trees (``SpecConfig.tree_nodes`` > 0, ``choose_tree``) the best chain competes with trees of
  2 … N nodes, each priced as the best tree of its size (``tree_cost``) under a running estimate of a(d, r).

The engine calls ``choose`` (or ``choose_tree``) before drafting and ``observe`` with the recorded iteration
afterwards. The cost policy's priors and rules are the constants below; each stays because switching it off
was measured to cost the policy's runs time. What each is worth, and how that was measured: docs/cost-model.md,
"What each rule is worth".
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import torch

from ..config import SpecConfig
from ..drafters.base import CATCHUP_MIN, DraftOutlook
from .costmodel import (AcceptanceProfile, Costs, expected_tokens_profile, finish_plan, iteration_ms,
    tokens_distribution)
from .tree_cost import best_tree_rate, branch_observations, tree_depth
from ..trace import IterationRecord

# What each is worth: docs/cost-model.md, "What each rule is worth".
PRIOR_ALPHA = 0.5      # acceptance assumed for a draft position before any draft there was tested
PRIOR_WEIGHT = 1.0     # how many observations that prior is worth
COPY_PRIOR = 0.98      # the least price of prompt lookup's drafts while all generated so far copies the source
DECAY = 0.9            # weight of the past per new observation (a memory of about ten iterations)
EXPLORE_BUDGET = 0.03  # the share of the time that exploring (drafting where K = 0 is predicted best) may cost
FINISH_HORIZON = 3     # within this many iterations at the cap of a run's end, K is planned to finish soonest
TREE_MARGIN = 0.05     # a tree is drafted only where it predicts this much more than the chain (model error)
SIBLING_PRIOR = 0.3    # a tree: the share of what the best child misses that the second best is assumed to get
                       # before any was tested (halved for each further rank)

class KPolicy(Protocol):
    name: str
    calibration: dict | None        # the prices the policy used (recorded in the trace), if any

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]: ...  # K (<= max_k), why
    # a run with token trees: (nodes, depth, why); nodes = 0: a chain of ``depth`` drafts, else a tree of that
    # many nodes at most ``depth`` deep
    def choose_tree(self, max_k: int, n_nodes: int, top_k: int,
                    outlook: DraftOutlook | None = None) -> tuple[int, int, str]: ...
    def observe(self, it: IterationRecord) -> None: ...


def _fixed_tree(policy: KPolicy, max_k: int, n_nodes: int, outlook: DraftOutlook | None) -> tuple[int, int, str]:
    """The fixed and heuristic policies' trees: always ``n_nodes`` nodes, as deep as their K."""
    k, why = policy.choose(max_k, outlook)
    return (n_nodes, k, f"tree of {n_nodes} nodes, depth <= {k} ({why})") if k > 0 else (0, 0, why)


class FixedK:
    name = "fixed"

    def __init__(self, k: int) -> None:
        self.k = k
        self.calibration: dict | None = None

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]:
        if max_k < self.k:
            return max(0, max_k), f"fixed K = {self.k}, clipped to {max(0, max_k)}: {max(0, max_k) + 1} token(s) left"
        return self.k, f"fixed K = {self.k}"

    def choose_tree(self, max_k: int, n_nodes: int, top_k: int,
                    outlook: DraftOutlook | None = None) -> tuple[int, int, str]:
        return _fixed_tree(self, max_k, n_nodes, outlook)

    def observe(self, it: IterationRecord) -> None:
        pass


class HeuristicK:
    """transformers' +2 / -1 schedule, starting at the cap."""
    name = "heuristic"

    def __init__(self, k_max: int) -> None:
        self.k_max = k_max
        self.k_now = k_max
        self.why = f"heuristic: start at the cap K = {k_max}"
        self.calibration: dict | None = None

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]:
        if max_k < self.k_now:
            return max(0, max_k), f"{self.why}; clipped to {max(0, max_k)}: {max(0, max_k) + 1} token(s) left"
        return self.k_now, self.why

    def choose_tree(self, max_k: int, n_nodes: int, top_k: int,
                    outlook: DraftOutlook | None = None) -> tuple[int, int, str]:
        return _fixed_tree(self, max_k, n_nodes, outlook)

    def observe(self, it: IterationRecord) -> None:
        n = len(it.drafts)   # a tree's accepted path: "all accepted" = it reached the tree's deepest level
        if it.tree is not None:
            n = tree_depth([node.parent for node in it.tree.nodes])
        n_acc = sum(d.accepted for d in it.drafts)
        old = self.k_now
        if n_acc == n and n > 0:
            self.k_now = min(self.k_max, old + 2)
            self.why = f"heuristic: all {n} drafts accepted, K {old} → {self.k_now} (+2, cap {self.k_max})"
        else:
            self.k_now = max(1, old - 1)
            what = "no drafts" if n == 0 else f"{n_acc} of {n} accepted"
            self.why = f"heuristic: {what}, K {old} → {self.k_now} (−1)"


class _Decayed:
    """Exponentially decayed counts per key (a draft position, or a number of tokens fed):
    mean = (num + prior * w) / (den + w)."""

    def __init__(self, weight: float = PRIOR_WEIGHT, decay: float = DECAY) -> None:
        self.num: dict[int, float] = {}
        self.den: dict[int, float] = {}
        self.weight = weight
        self.decay = decay

    def add(self, j: int, x: float) -> None:
        self.num[j] = self.decay * self.num.get(j, 0.0) + x
        self.den[j] = self.decay * self.den.get(j, 0.0) + 1.0

    def mean(self, key: int, prior: float) -> float:
        return (self.num.get(key, 0.0) + prior * self.weight) / (self.den.get(key, 0.0) + self.weight)

    def means(self, n: int, prior: float) -> tuple[float, ...]:
        """Position j's prior is position j-1's estimate (deep positions back off to shallow ones)."""
        out, p = [], prior
        for j in range(1, n + 1):
            p = self.mean(j, p)
            out.append(min(1.0, max(0.0, p)))
        return tuple(out)


class CostAwareK:
    """Picks K to maximise predicted tokens/s (see the module docstring)."""
    name = "cost"

    def __init__(self, k_max: int, verify_ms: Sequence[float] | None, draft_ms: float | None,
                 draft_per_token: bool, calibration: dict | None = None, allow_zero: bool = True, *,
                 overhead_ms: float = 0.0, catchup_ms: float = 0.0, tree_draft_ms: float | None = None,
                 tree_overhead_ms: float | None = None) -> None:
        """Prices (ms; fixed for the run): ``verify_ms`` the target's verify curve (None: every verify costs
        1, drafts nothing unless ``draft_ms`` says), ``draft_ms`` one draft forward or lookup, the host time per
        iteration, a catch-up forward's cost per token fed, a tree level's draft forward and a tree iteration's
        host time (None: a chain's). ``calibration``: what to record in the trace."""
        self.k_max = k_max
        self.cal = list(verify_ms) if verify_ms else None
        self.calibration = calibration
        self.draft_per_token = draft_per_token
        self.draft_ms = draft_ms if draft_ms is not None else 0.0
        self.overhead_ms = overhead_ms
        self.catchup_ms = catchup_ms
        self.tree_draft_ms = tree_draft_ms
        self.tree_overhead_ms = tree_overhead_ms
        self.acc = _Decayed()                     # acceptance by draft position
        self.prop = _Decayed()                    # a drafter without an outlook: is a j-th draft offered?
        self.allow_zero = allow_zero
        self.zeros = 0                            # K = 0 iterations since the last drafting one
        self.unseen: int | None = None            # tokens a model draft must run over before it drafts (outlook)
        self.branch: dict[int, _Decayed] = {}     # a tree's acceptance by sibling rank, then by depth
        self._chain: tuple[float | None, int] = (None, 0)   # the last choose(): its tok/s (None: a tree may not
                                                            # compete, see choose_tree), the depth cap

    @classmethod
    def from_calibration(cls, k_max: int, calibration: dict | None, draft_per_token: bool | None = None,
                         allow_zero: bool = True) -> "CostAwareK":
        """The policy priced by a trace's ``calibration`` (``calibration.Prices.to_dict``; a trace from before
        prices were recorded holds the verify curve alone: drafts and host time then cost nothing)."""
        c = calibration or {}

        def ms(key: str, default: float | None = 0.0) -> float | None:
            v = c.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default
        per_token = c.get("draft_per_token") if isinstance(c.get("draft_per_token"), bool) else draft_per_token
        return cls(k_max, c.get("verify_ms"), ms("draft_ms", None), bool(per_token), calibration, allow_zero,
                   overhead_ms=ms("overhead_ms"), catchup_ms=ms("catchup_ms"),
                   tree_draft_ms=ms("tree_draft_ms", None), tree_overhead_ms=ms("tree_overhead_ms", None))

    # -- the model of the next iteration --
    def costs(self, n: int | None = None) -> Costs:
        """The costs of the next iteration, the verify curve for 1 … n tokens fed (default: the cap's K + 1)."""
        n = n or self.k_max + 1
        curve = [self.cal[min(i, len(self.cal) - 1)] for i in range(n)] if self.cal else [1.0] * n
        return Costs(tuple(curve), self.draft_ms, self.draft_per_token, self.overhead_ms)

    def profile(self, outlook: DraftOutlook | None = None) -> AcceptanceProfile:
        """Per-position acceptance for the next iteration: the running estimate by draft position (an untested
        position priced as the one before it, the first at ``PRIOR_ALPHA``). Told prompt lookup's match
        (``outlook``): the drafter offers exactly the tokens its source has, and while all generated so far
        copies that source every draft is priced at least ``COPY_PRIOR``."""
        accept = self.acc.means(self.k_max, PRIOR_ALPHA)
        if outlook is not None and outlook.match_len:
            if outlook.copying:
                accept = tuple(max(COPY_PRIOR, a) for a in accept)
            avail = outlook.available if outlook.available is not None else self.k_max
            return AcceptanceProfile(accept, tuple(float(j <= avail) for j in range(1, self.k_max + 1)))
        propose = () if self.draft_per_token else self.prop.means(self.k_max, 1.0)
        return AcceptanceProfile(accept, propose)

    def iteration_ms(self, costs: Costs, prof: AcceptanceProfile, k: int) -> float:
        """The next iteration's predicted ms at K = k: the cost model's, plus the catch-up (``catchup_ms``)."""
        return iteration_ms(costs, prof, k) + (self.catchup_price() if k > 0 else 0.0)

    def catchup_price(self) -> float:
        """For a model draft with more than CATCHUP_MIN tokens unseen (its prompt, or after K = 0 iterations):
        the forward that catches it up before it drafts (at least one draft step)."""
        fed = (self.unseen or 0) - 1
        return max(self.draft_ms, self.catchup_ms * fed) if fed >= CATCHUP_MIN else 0.0

    def branch_accept(self, max_depth: int, top_k: int, outlook: DraftOutlook | None = None
                      ) -> Callable[[int, int], float]:
        """A tree's a(d, r): the running estimate of P(the rank-r child at depth d is accepted | its parent was
        reached). Before any was tested, the best child is priced as a chain's draft at that depth, the r-th
        at ``SIBLING_PRIOR`` × 0.5^(r − 2) of what the best one misses."""
        chain = self.profile(outlook).accept
        table: dict[tuple[int, int], float] = {}
        for d in range(1, max_depth + 1):
            first = self.branch.setdefault(1, _Decayed()).mean(d, chain[min(d, len(chain)) - 1])
            table[d, 1] = min(1.0, max(0.0, first))
            for r in range(2, top_k + 1):
                prior = (1.0 - table[d, 1]) * SIBLING_PRIOR * 0.5 ** (r - 2)
                table[d, r] = min(1.0, max(0.0, self.branch.setdefault(r, _Decayed()).mean(d, prior)))
        return lambda d, r: table.get((min(d, max_depth), r), 0.0)

    def choose_tree(self, max_k: int, n_nodes: int, top_k: int,
                    outlook: DraftOutlook | None = None) -> tuple[int, int, str]:
        """A tree of 2 … ``n_nodes`` nodes when one predicts ``TREE_MARGIN`` more tokens per second than the chain
        ``choose`` picks (near the run's end: the finish plan's K, at its steady rate), else that chain. A tree
        is priced as the best tree of its size under ``branch_accept`` (``tree_cost``) with ``tree_costs``,
        never deeper than the chain may go. Where no draft can pay, always the chain."""
        k, why = self.choose(max_k, outlook)
        chain_rate, cap = self._chain
        if chain_rate is None or n_nodes < 2 or cap < 1:
            return 0, k, why
        costs = self.tree_costs(max(self.k_max, n_nodes) + 1)
        accept = self.branch_accept(cap, top_k, outlook)
        n, rate, tokens, ms = best_tree_rate(costs, accept, n_nodes, top_k, cap)
        ms += self.catchup_price()
        rate = 1000.0 * tokens / ms if ms > 0 else math.inf
        if n and rate > chain_rate * (1 + TREE_MARGIN):
            return n, cap, (f"cost: tree of {n} nodes, depth <= {cap}, predicts {rate:.1f} tok/s ({tokens:.2f} tokens "
                            f"/ {ms:.0f} ms; best-child a1 = {accept(1, 1):.2f}, second a = {accept(1, 2):.2f}); "
                            f"a chain: K = {k}, {chain_rate:.1f} tok/s")
        return 0, k, why + (f"; a tree: at most {rate:.1f} tok/s ({n} nodes)" if n else "")

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]:
        left = max_k + 1                                        # tokens this run may still emit
        ends = outlook is not None and outlook.to_eos is not None and outlook.to_eos - 1 < max_k
        if ends:      # never draft past the source's end-of-sequence token (the target's own token decides it)
            max_k = outlook.to_eos - 1
            if outlook.copying:   # a copy that holds ends the run there: no more to plan for
                left = outlook.to_eos
        cap = min(self.k_max, max(0, max_k))
        m = outlook.match_len if outlook is not None else None
        self.unseen = outlook.unseen if outlook is not None else None
        self._chain = (None, cap)
        if cap == 0:
            return 0, ("cost: no drafts (the match's source ends the sequence next: the target's own token decides)"
                       if ends else "cost: no drafts (the last token is the target's own)")
        if m == 0:
            return 0, "cost: no drafts (prompt lookup finds no match)"
        costs, prof = self.costs(), self.profile(outlook)
        lo = 0 if self.allow_zero else 1
        tokens = {k: expected_tokens_profile(prof, k) for k in range(lo, cap + 1)}
        ms = {k: self.iteration_ms(costs, prof, k) for k in tokens}
        scored = {k: 1000.0 * tokens[k] / ms[k] if ms[k] > 0 else math.inf for k in tokens}
        best = max(scored, key=lambda k: (round(scored[k], 9), -k))
        plan = ""
        if left <= FINISH_HORIZON * (self.k_max + 1):           # near the end: the fewest ms to finish
            ks = range(cap + 1)
            best, finish = finish_plan([ms.get(k, math.inf) for k in ks],
                                       [iteration_ms(costs, prof, k) if k >= lo else math.inf for k in ks],
                                       [tokens_distribution(prof, k) for k in ks], left)
            plan = f"finishes the last {left} tokens soonest ({finish:.0f} ms); "
        probe = ""
        if best == 0 and not plan and self._may_pay(costs, prof, cap):
            draft_k = max((k for k in scored if k > 0), key=lambda k: (round(scored[k], 9), -k))
            extra = ms[draft_k] - tokens[draft_k] * ms[0]       # vs the same tokens at K = 0
            wait = probe_wait(extra, ms[draft_k], ms[0])
            self.zeros += 1
            if self.zeros > wait:
                self.zeros = 0
                best = draft_k
                probe = (f"explore: drafting now costs {extra:.1f} ms more than K = 0 would for its tokens, so "
                         f"draft one iteration in {wait + 1}: ")
        elif best == 0 and not plan:
            probe = "drafting cannot pay even if every draft were accepted: "
        else:
            self.zeros = 0
        match = ""
        if m:
            notes = [note for note, on in (("all generated so far copies its source", outlook.copying),
                                           (f"the source ends the sequence in {outlook.to_eos}", ends)) if on]
            match = f"match of {m} tokens" + (f" ({'; '.join(notes)})" if notes else "") + ", "
        why = (f"cost: {probe}K = {best} {plan}predicts {scored[best]:.1f} tok/s "
               f"({tokens[best]:.2f} tokens / {ms[best]:.0f} ms; "
               f"{match}a1 = {prof.a(1):.2f}")
        self._chain = (None if probe.startswith("drafting cannot") else scored[best], cap)
        alt = [k for k in sorted(scored, key=lambda k: -scored[k]) if k != best][:1]
        if alt:
            why += f"; next best K = {alt[0]}: {scored[alt[0]]:.1f} tok/s"
        return best, why + ")"

    def _may_pay(self, costs: Costs, prof: AcceptanceProfile, cap: int) -> bool:
        """Could some K >= 1 beat K = 0 if every draft were accepted? (A draft as dear as the target never
        can, so exploring it would only cost.)"""
        sure = AcceptanceProfile((1.0,), prof.propose)
        rate0 = 1.0 / iteration_ms(costs, sure, 0)
        return any(expected_tokens_profile(sure, k) / iteration_ms(costs, sure, k) > rate0 for k in range(1, cap + 1))

    def observe(self, it: IterationRecord) -> None:
        """Learn from what the iteration emitted: each draft's acceptance by position (a tree: each child's by
        depth and sibling rank) and, for a drafter without an outlook, how many drafts it offered. Its times
        are not read: the prices stay those fixed before the run."""
        for d, r, x in branch_observations(it):    # a tree: its children's fates by depth and sibling rank
            self.branch.setdefault(r, _Decayed()).add(d, x)
        if it.tree is None:
            for j, d in enumerate(it.drafts, 1):
                if d.tested:
                    self.acc.add(j, d.accept_prob)   # alpha; under coupling the coupled rule's
            if not self.draft_per_token:
                for j in range(1, it.k + 1):
                    if len(it.drafts) >= j - 1:
                        self.prop.add(j, float(len(it.drafts) >= j))

    def tree_costs(self, n: int) -> Costs:
        """The costs of a tree iteration: ``costs(n)`` with a tree's own draft forward (a level feeds several
        nodes) and host time (its verification walks the tree) where they were priced, a chain's elsewhere."""
        c = self.costs(n)
        return replace(c, draft_ms=c.draft_ms if self.tree_draft_ms is None else self.tree_draft_ms,
                       overhead_ms=c.overhead_ms if self.tree_overhead_ms is None else self.tree_overhead_ms)


def probe_wait(extra_ms: float, draft_ms: float, zero_ms: float) -> int:
    """K = 0 iterations before the next drafting one, when a drafting iteration takes ``draft_ms`` and
    ``extra_ms`` more than K = 0 iterations (``zero_ms`` each) would take for the same tokens: the smallest w
    with extra_ms / (w * zero_ms + draft_ms) <= EXPLORE_BUDGET."""
    if extra_ms <= 0:
        return 0
    need = (extra_ms / EXPLORE_BUDGET - draft_ms) / max(zero_ms, 1e-9)
    return max(0, math.ceil(need - 1e-9))


def make_k_policy(cfg: SpecConfig, target: torch.nn.Module, drafter: Any, prices: Any = None) -> KPolicy:
    """The policy ``cfg.k_policy`` names. ``cost`` is priced by ``prices`` (``calibration.Prices``, or a trace's
    ``calibration`` dict), which the engine fixes before the run (``decoding/prices.py``: measured once per
    process, or given to replay a recorded run); without them every verify costs the same and drafts nothing.
    The fixed and heuristic policies attach an existing calibration to the trace but never measure."""
    from . import calibration
    if cfg.k_policy == "fixed":
        pol: KPolicy = FixedK(cfg.k)
    elif cfg.k_policy == "heuristic":
        pol = HeuristicK(cfg.k)
    else:
        per_token = getattr(drafter, "model", None) is not None or bool(getattr(drafter, "draft_per_token", False))
        return CostAwareK.from_calibration(cfg.k, prices.to_dict() if hasattr(prices, "to_dict") else prices,
                                           per_token)
    cached = _safe(lambda: calibration.cached(target))
    pol.calibration = cached.to_dict() if cached is not None else None
    return pol


def _safe(fn: Any) -> Any:
    """Calibration is an optimisation: a model it cannot time (a toy model without a KV cache) gives None."""
    try:
        return fn()
    except (ValueError, RuntimeError, TypeError, AttributeError, NotImplementedError, StopIteration):
        return None
