"""The cost model with a batch size B: why speculation stops paying on a busy server.

At batch size B one iteration verifies B × (K + 1) tokens in one target forward and runs each draft step over B
rows. While the forward is bound by reading the weights (a GPU at small B), the extra tokens are nearly free and
drafts pay; once it is bound by arithmetic (a CPU early, a GPU at large B), a verify of B × (K + 1) tokens costs
about K + 1 plain decode steps of the batch, and the drafts' tokens no longer come for free. Priced with parts
measured on this machine (``BatchPrices``, measured by ``batch.prices``):

  time of one iteration at (B, K) = draft(B, K) + t_verify(B, L + 1) + t_overhead(B)      (L drafts offered)
  tokens per row per iteration    = 1 + Σ_{j ≤ L} a_1 ⋯ a_j                               (``costmodel``)
  baseline step at B              = t_verify(B, 1) + t_baseline_overhead(B)               (one token per row)
  speedup(B, K)                   = tokens per row per iteration × baseline step ÷ time of one iteration

K = 0 is a plain decode step. The batch's cost-aware policy (``BatchCostK``) prices each iteration at the batch's
current size, its rows' acceptance pooled and its verify as wide as the widest row's feed, so it lowers K as B
grows, down to K = 0 where drafting does not pay — as vLLM's dynamic speculative decoding does.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import SpecConfig
from ..trace import IterationRecord
from ..drafters.base import CATCHUP_MIN, DraftOutlook
from .costmodel import AcceptanceProfile, expected_tokens_profile, iteration_ms, proposal_lengths
from .costs import Costs
from .kpolicy import COPY_PRIOR, PRIOR_ALPHA, HeuristicK, KPolicy, _Decayed, make_k_policy, probe_wait
from .roofline import Device, ModelShape, forward_ms

DRAFT_MARGIN = 0.05    # drafting is chosen only where it predicts this much more than K = 0: the prices, timed on a
                       # short context at their best, price a drafting iteration on real prompts a few % low


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Linear interpolation through (xs, ys) (xs increasing); beyond the ends, the last segment's slope (never
    below zero, never below the end value)."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if x > xs[-1]:
        return max(ys[-1], y)
    return max(0.0, y)


@dataclass(frozen=True)
class BatchPrices:
    """What an iteration costs at each batch size, in ms, measured once (``batch.prices``) and fixed for a run."""
    sizes: tuple[int, ...]                      # batch sizes measured, increasing (1, 2, 4, 8, 16)
    widths: tuple[int, ...]                     # tokens per row measured, increasing (1 … K cap + 1)
    verify_ms: tuple[tuple[float, ...], ...]    # verify_ms[i][j]: one target forward, sizes[i] rows × widths[j]
    draft_ms: tuple[float, ...]                 # per size: one batched draft step (prompt lookup: all rows' lookups)
    draft_per_token: bool                       # a model draft (a forward per draft) or prompt lookup (one pass)
    overhead_ms: tuple[float, ...]              # per size: an iteration's host time beyond the forwards
    baseline_overhead_ms: tuple[float, ...]     # per size: a baseline step's host time beyond its forward
    device: str = ""
    catchup_ms: tuple[float, ...] = ()          # per size: a model draft's catch-up, ms per row and token it had not
                                                # seen (after K = 0 iterations: every row's tokens since), () = free

    def __post_init__(self) -> None:
        n = len(self.sizes)
        if not n or list(self.sizes) != sorted(set(self.sizes)) or self.sizes[0] < 1:
            raise ValueError("sizes must be increasing batch sizes >= 1")
        if not self.widths or list(self.widths) != sorted(set(self.widths)) or self.widths[0] != 1:
            raise ValueError("widths must be increasing and start at 1")
        if len(self.verify_ms) != n or any(len(row) != len(self.widths) for row in self.verify_ms):
            raise ValueError("verify_ms needs one row per size and one time per width")
        if self.catchup_ms and len(self.catchup_ms) != n:
            raise ValueError("catchup_ms needs one time per size (or none)")
        for name in ("draft_ms", "overhead_ms", "baseline_overhead_ms"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} needs one time per size")
        values = [v for row in self.verify_ms for v in row] + [*self.draft_ms, *self.overhead_ms,
                                                              *self.baseline_overhead_ms, *self.catchup_ms]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values):
            raise ValueError("every time must be a finite number >= 0")

    def t_verify(self, b: int, width: int) -> float:
        """One target forward over b rows × ``width`` tokens each."""
        per_size = [_interp(self.widths, row, width) for row in self.verify_ms]
        return _interp(self.sizes, per_size, b)

    def costs(self, b: int, k_max: int) -> Costs:
        """The single-sequence cost model's parts for an iteration of the whole batch at size b (widths 1 … k_max
        + 1): what ``CostAwareK`` and ``costmodel.iteration_ms`` price with."""
        size = lambda ys: _interp(self.sizes, ys, b)        # noqa: E731 - one line per part below
        return Costs(tuple(self.t_verify(b, w) for w in range(1, k_max + 2)), draft_ms=size(self.draft_ms),
                     draft_per_token=self.draft_per_token, overhead_ms=size(self.overhead_ms),
                     baseline_overhead_ms=size(self.baseline_overhead_ms))

    def catchup(self, b: int, widest: int) -> float:
        """A model draft's catch-up at batch size b: one forward whose rows are padded to the ``widest`` row's
        unseen tokens."""
        return _interp(self.sizes, self.catchup_ms, b) * b * widest if self.catchup_ms else 0.0

    def to_dict(self) -> dict:
        return {"sizes": list(self.sizes), "widths": list(self.widths),
                "verify_ms": [list(r) for r in self.verify_ms], "draft_ms": list(self.draft_ms),
                "draft_per_token": self.draft_per_token, "overhead_ms": list(self.overhead_ms),
                "baseline_overhead_ms": list(self.baseline_overhead_ms), "device": self.device,
                "catchup_ms": list(self.catchup_ms)}

    @classmethod
    def from_dict(cls, d: Any) -> "BatchPrices":
        """From ``to_dict``'s form (an untrusted file's too): ValueError naming the problem."""
        if not isinstance(d, dict):
            raise ValueError("batch prices must be a dict")
        try:
            return cls(tuple(int(x) for x in d["sizes"]), tuple(int(x) for x in d["widths"]),
                       tuple(tuple(float(v) for v in row) for row in d["verify_ms"]),
                       tuple(float(x) for x in d["draft_ms"]), bool(d["draft_per_token"]),
                       tuple(float(x) for x in d["overhead_ms"]),
                       tuple(float(x) for x in d["baseline_overhead_ms"]), str(d.get("device", ""))[:64],
                       tuple(float(x) for x in d.get("catchup_ms", ())))
        except (KeyError, TypeError) as e:
            raise ValueError(f"batch prices: missing or malformed field ({e})") from None


def device_batch_prices(device: Device, target: ModelShape, draft: ModelShape | None, sizes: Sequence[int],
                        widths: Sequence[int], lookup_ms: float = 0.0) -> BatchPrices:
    """The batch's prices on a device profile (``roofline``): a verify of b rows × w tokens is one forward over
    b·w tokens, a draft step one draft forward over b tokens (prompt lookup: b lookups of ``lookup_ms``), no host
    time beyond the profile's per-forward overhead. Reading the KV cache is left out (as in ``roofline``): at a
    large batch and a long context a real GPU is slower than this."""
    verify = tuple(tuple(forward_ms(device, target, b * w) for w in widths) for b in sizes)
    drafts = tuple(forward_ms(device, draft, b) if draft is not None else lookup_ms * b for b in sizes)
    zeros = (0.0,) * len(sizes)
    return BatchPrices(tuple(sizes), tuple(widths), verify, drafts, draft is not None, zeros, zeros, device=device.id)


def batch_speedup(prices: BatchPrices, profile: AcceptanceProfile, b: int, k: int) -> float:
    """Predicted speedup of speculation at batch size b and K = k over the batched target-only run."""
    costs = prices.costs(b, max(k, 1))
    step = costs.t1 + costs.baseline_overhead_ms
    return expected_tokens_profile(profile, k) * step / iteration_ms(costs, profile, k)


def speedup_table(prices: BatchPrices, profile: AcceptanceProfile, sizes: Sequence[int], ks: Sequence[int]
                  ) -> list[list[float]]:
    """``batch_speedup`` over sizes (rows) × ks (columns)."""
    return [[batch_speedup(prices, profile, b, k) for k in ks] for b in sizes]


def crossover(prices: BatchPrices, profile: AcceptanceProfile | Callable[[int], AcceptanceProfile], k_max: int,
              b_max: int) -> int | None:
    """The smallest batch size at which no K in 1 … k_max predicts a speedup above 1 (None: drafting still pays
    at ``b_max``). ``profile``: the acceptance, or the acceptance at each batch size (rows differ)."""
    at = profile if callable(profile) else (lambda b: profile)
    for b in range(1, b_max + 1):
        if max(batch_speedup(prices, at(b), b, k) for k in range(1, k_max + 1)) <= 1.0:
            return b
    return None


class BatchCostK:
    """The cost-aware K for a batch: each iteration, the K in 0 … cap that maximises the batch's predicted tokens per
    second at its current size, priced with ``BatchPrices`` fixed before the run. Unlike one sequence, a batch's
    rows differ: the tokens are each row's expected tokens averaged over the rows, but the verify is as wide as the
    widest row's feed (the rows are padded to it), and a model draft runs as many steps as the longest chain. So
    the width is priced as the largest of the rows' offered drafts: exact for prompt lookup, told each row's match
    before it drafts (``DraftOutlook``: a row without a match offers nothing, a copying row's drafts are priced at
    least ``COPY_PRIOR``), and for other drafts from the rows' offered-draft rates learnt as the run goes,
    P(widest < j) = Π_rows P(L_row < j). Acceptance by draft position is learnt from every row (``_Decayed``, prior
    ``PRIOR_ALPHA``); like the single-sequence policy, it learns only from what the rows emitted, and where K = 0 is
    predicted best (or drafting predicts less than ``DRAFT_MARGIN`` more) but drafting could pay it drafts one
    iteration in a while (``probe_wait``: at most ``EXPLORE_BUDGET`` of the time). A model draft left behind by
    K = 0 iterations catches up in its first step: that forward over every row's unseen tokens (padded to the
    widest) is priced too (``BatchPrices.catchup``), shared by the iterations left when drafting is predicted to
    pay, and charged whole to an exploring iteration (after one, K = 0 returns and the draft falls behind again)."""
    name = "cost"

    def __init__(self, k_max: int, prices: BatchPrices) -> None:
        self.k_max, self.prices = k_max, prices
        self.acc = _Decayed()                 # acceptance by draft position, every row pooled
        self.prop = _Decayed()                # a row offered a j-th draft (drafts without an outlook)
        self.zeros = 0
        self.calibration: dict | None = None

    def row_profiles(self, batch: int, outlooks: Sequence[DraftOutlook | None] | None) -> list[AcceptanceProfile]:
        """Each row's acceptance and offered drafts for the next iteration (module docstring)."""
        accept = self.acc.means(self.k_max, PRIOR_ALPHA)
        if not outlooks or any(o is None or o.match_len is None for o in outlooks):   # not prompt lookup
            propose = self.prop.means(self.k_max, 1.0) if not self.prices.draft_per_token else ()
            return [AcceptanceProfile(accept, propose)] * batch
        out = []
        for o in outlooks:
            avail = (o.available or 0) if o.match_len else 0
            acc = tuple(max(COPY_PRIOR, a) for a in accept) if o.copying else accept
            out.append(AcceptanceProfile(acc, tuple(float(j <= avail) for j in range(1, self.k_max + 1))))
        return out

    def rate(self, costs: Costs, rows: list[AcceptanceProfile], k: int, catchup_ms: float = 0.0, left: int = 0
             ) -> tuple[float, float]:
        """(tokens per row, ms) of one iteration at K = k: the rows' mean tokens, the widest row's verify and steps,
        and a model draft's catch-up before drafting again (``catchup_ms``), paid once for the iterations the run
        has left at that K (``left`` tokens to go), so each is charged its share."""
        tokens = sum(expected_tokens_profile(p, k) for p in rows) / len(rows)
        if k == 0:
            return tokens, costs.overhead_ms + costs.t1
        under = [1.0] * (k + 2)               # under[j] = P(the widest row offers fewer than j drafts)
        for p in rows:
            reach = 1.0                       # P(this row offers >= j)
            lengths = proposal_lengths(p, k)
            for j in range(1, k + 1):
                reach -= lengths[j - 1]
                under[j] *= 1.0 - reach
        widest = [under[l + 1] - under[l] if l else under[1] for l in range(k)] + [1.0 - under[k]]
        ms = costs.overhead_ms + sum(w * (costs.draft_cost(l, k) + costs.t_verify(l + 1)) for l, w in enumerate(widest))
        return tokens, ms + catchup_ms * min(1.0, tokens / max(left, 1))

    def choose(self, batch: int, max_k: int, outlooks: Sequence[DraftOutlook | None] | None = None
               ) -> tuple[int, str]:
        cap = min(self.k_max, max(0, max_k))
        if cap == 0:
            return 0, f"batch of {batch}: cost: no drafts (the last token is the target's own)"
        if outlooks and all(o is not None and o.match_len == 0 for o in outlooks):
            return 0, f"batch of {batch}: cost: no drafts (no row's prompt lookup finds a match)"
        costs, rows = self.prices.costs(batch, self.k_max), self.row_profiles(batch, outlooks)
        widest = max((o.unseen for o in outlooks or () if o is not None and o.unseen), default=0)
        catchup = self.prices.catchup(batch, widest) if widest > CATCHUP_MIN else 0.0   # a model draft behind
        parts = {k: self.rate(costs, rows, k, catchup, max_k + 1) for k in range(cap + 1)}
        scored = {k: 1000.0 * t / ms if ms > 0 else math.inf for k, (t, ms) in parts.items()}
        best = max(scored, key=lambda k: (round(scored[k], 9), -k))
        if best and scored[best] < (1.0 + DRAFT_MARGIN) * scored[0]:
            best = 0                          # within the model's error of K = 0: not worth drafting
        probe = ""
        if best == 0:
            sure = [AcceptanceProfile((1.0,), p.propose) for p in rows]
            if any((lambda t, ms: t / ms)(*self.rate(costs, sure, k, catchup, max_k + 1)) > 1.0 / parts[0][1]
                   for k in range(1, cap + 1)):
                draft_k = max(range(1, cap + 1), key=lambda k: (round(scored[k], 9), -k))
                tokens, ms = self.rate(costs, rows, draft_k)      # charged at least the model's error
                extra = max(ms + catchup - tokens * parts[0][1], DRAFT_MARGIN * tokens * parts[0][1])
                wait = probe_wait(extra, ms + catchup, parts[0][1])
                self.zeros += 1
                if self.zeros > wait:
                    self.zeros, best = 0, draft_k
                    probe = f"explore: one iteration in {wait + 1} drafts ({extra:.1f} ms more than K = 0): "
            else:
                probe = "drafting cannot pay even if every draft were accepted: "
        else:
            self.zeros = 0
        tokens, ms = parts[best]
        alt = max((k for k in scored if k != best), key=lambda k: scored[k], default=None)
        why = (f"batch of {batch}: cost: {probe}K = {best} predicts {scored[best]:.1f} tok/s per row "
               f"({tokens:.2f} tokens / {ms:.0f} ms; a1 = {rows[0].a(1):.2f})")
        return best, why + (f"; next best K = {alt}: {scored[alt]:.1f}" if alt is not None else "")

    def observe(self, iterations: list[IterationRecord]) -> None:
        """Learn from what every row emitted: each tested draft's acceptance by position, and (drafts without an
        outlook) how many drafts each row offered."""
        for it in iterations:
            for j, d in enumerate(it.drafts, 1):
                if d.tested:
                    self.acc.add(j, d.accept_prob)
            if not self.prices.draft_per_token:
                for j in range(1, it.k + 1):
                    self.prop.add(j, float(len(it.drafts) >= j))


class BatchKPolicy:
    """The run's K policy for a batch: one K per iteration for every row. The cost-aware one is ``BatchCostK``; the
    heuristic moves K once per iteration (+2 when every row's drafts were all accepted, −1 otherwise); a fixed K
    stays."""

    def __init__(self, inner: KPolicy | BatchCostK) -> None:
        self.inner = inner
        self.name = inner.name
        self.reads_outlooks = isinstance(inner, BatchCostK)      # the rows' outlooks are asked for only then
        self.prices: BatchPrices | None = inner.prices if isinstance(inner, BatchCostK) else None
        self.calibration = inner.calibration

    def choose(self, batch: int, max_k: int, outlooks: Sequence[DraftOutlook | None] | None = None
               ) -> tuple[int, str]:
        if isinstance(self.inner, BatchCostK):
            return self.inner.choose(batch, max_k, outlooks)
        return self.inner.choose(max_k)

    def observe(self, iterations: list[IterationRecord]) -> None:
        if isinstance(self.inner, HeuristicK):   # one move per iteration: a rejection anywhere counts
            drafted = [it for it in iterations if it.drafts]
            worst = next((it for it in drafted if not all(d.accepted for d in it.drafts)), None)
            if drafted or iterations:
                self.inner.observe(worst or (drafted or iterations)[0])
            return
        if isinstance(self.inner, BatchCostK):
            self.inner.observe(iterations)
            return
        for it in iterations:
            self.inner.observe(it)


def make_batch_k_policy(cfg: SpecConfig, target: Any, drafter: Any, prices: Any = None) -> BatchKPolicy:
    """``cfg.k_policy`` for a batch; the cost policy priced by ``prices`` (``BatchPrices``, or its ``to_dict`` form
    as a batched trace records it; the engine measures them before the run)."""
    if isinstance(prices, dict):
        prices = BatchPrices.from_dict(prices)
    if cfg.k_policy != "cost":
        return BatchKPolicy(make_k_policy(cfg, target, drafter))
    if prices is None:
        raise ValueError("the cost-aware K policy needs the batch's prices")
    return BatchKPolicy(BatchCostK(cfg.k, prices))
