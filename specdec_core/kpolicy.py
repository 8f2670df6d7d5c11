"""K policies: how many drafts the next iteration asks for, and why (recorded as ``k_reason``).

- ``fixed``: always K (clipped to the tokens left).
- ``heuristic``: transformers' schedule: K += 2 after an iteration whose drafts were all accepted,
  K -= 1 (not below 1) otherwise; K never exceeds the configured cap.
- ``cost``: each iteration, the K in 0..cap that maximises predicted tokens per second under the
  calibrated cost model of ``theory``: tokens per iteration from a running per-position acceptance
  estimate (and, for prompt lookup, how often the drafter can offer a j-th token), time per iteration
  from the target's verify curve t_verify(n) (``calibration``, rescaled online to the measured verify
  times), the running draft cost and overhead. K = 0 (no drafts: one target forward) wins when drafts
  keep failing. Drafting is still what keeps the acceptance estimate current, so the policy then drafts at
  its best K >= 1 one iteration in w + 1, with w chosen so that this exploration costs at most
  ``EXPLORE_BUDGET`` of the predicted tokens/s on average: every iteration when K >= 1 is predicted within
  that budget of K = 0, rarely (at most every ``PROBE_MAX`` + 1) when drafting is predicted to lose a lot.
  A recovered draft is thus seen again within a few iterations, and a hopeless one costs little. A
  prompt-lookup probe that finds no match costs nothing extra. On this CPU t_verify is nearly flat up to 4
  tokens and rises after (``cpu_matmul``); the policy reads that from the curve rather than from a rule.

The engine calls ``choose`` before drafting and ``observe`` with the recorded iteration afterwards.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from .config import SpecConfig
from .theory import AcceptanceProfile, Costs, expected_tokens_profile, iteration_ms, predicted_tokens_per_s
from .trace import IterationRecord

PRIOR_ALPHA = 0.5      # acceptance of the first draft assumed before any was tested
DEEP_PRIOR = 0.8       # draft j >= 2 given j-1 accepted: drafts fail in runs, so a draft that follows an
                       # accepted one is more likely right (prompt lookup copying a passage: 0.9 and more)
PRIOR_WEIGHT = 1.0     # how many observations the prior is worth
DECAY = 0.9            # weight of the past per new observation (a memory of about ten iterations)
SCALE_DECAY = 0.8      # the same for the measured/calibrated verify-time ratio
EXPLORE_BUDGET = 0.03  # the share of predicted tokens/s that drafting where K = 0 is predicted best may cost
PROBE_MAX = 16         # the longest run of K = 0 iterations between two drafting ones
NGRAM_LOOKUP_MS = 0.05  # prompt lookup's cost before it was measured


class KPolicy(Protocol):
    name: str
    calibration: dict | None        # the verify curve the policy used (recorded in the trace), if any

    def choose(self, max_k: int) -> tuple[int, str]: ...   # K for the next iteration (<= max_k) and why
    def observe(self, it: IterationRecord) -> None: ...


class FixedK:
    name = "fixed"

    def __init__(self, k: int) -> None:
        self.k = k
        self.calibration: dict | None = None

    def choose(self, max_k: int) -> tuple[int, str]:
        if max_k < self.k:
            return max(0, max_k), f"fixed K = {self.k}, clipped to {max(0, max_k)}: {max(0, max_k) + 1} token(s) left"
        return self.k, f"fixed K = {self.k}"

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

    def choose(self, max_k: int) -> tuple[int, str]:
        if max_k < self.k_now:
            return max(0, max_k), f"{self.why}; clipped to {max(0, max_k)}: {max(0, max_k) + 1} token(s) left"
        return self.k_now, self.why

    def observe(self, it: IterationRecord) -> None:
        n = len(it.drafts)
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
    """Exponentially decayed counts per position: mean = (num + prior * w) / (den + w)."""

    def __init__(self) -> None:
        self.num: dict[int, float] = {}
        self.den: dict[int, float] = {}

    def add(self, j: int, x: float) -> None:
        self.num[j] = DECAY * self.num.get(j, 0.0) + x
        self.den[j] = DECAY * self.den.get(j, 0.0) + 1.0

    def means(self, n: int, prior: float, deep_prior: float | None = None) -> tuple[float, ...]:
        """Position j's prior is position j-1's estimate (deep positions back off to shallow ones), raised
        to at least ``deep_prior`` for j >= 2 when given."""
        out, p = [], prior
        for j in range(1, n + 1):
            if j > 1 and deep_prior is not None:
                p = max(p, deep_prior)
            p = (self.num.get(j, 0.0) + p * PRIOR_WEIGHT) / (self.den.get(j, 0.0) + PRIOR_WEIGHT)
            out.append(min(1.0, max(0.0, p)))
        return tuple(out)


class CostAwareK:
    """Picks K to maximise predicted tokens/s (see the module docstring)."""
    name = "cost"

    def __init__(self, k_max: int, verify_ms: Sequence[float] | None, draft_ms: float | None,
                 draft_per_token: bool, calibration: dict | None = None, allow_zero: bool = True) -> None:
        self.k_max = k_max
        self.cal = list(verify_ms) if verify_ms else None
        self.calibration = calibration
        self.draft_per_token = draft_per_token
        self.draft_ms = draft_ms if draft_ms is not None else (0.0 if draft_per_token else NGRAM_LOOKUP_MS)
        self.draft_seen = draft_ms is not None
        self.drafted_before = False               # has this run drafted yet (see observe)
        self.overhead_ms = 0.0
        self.overhead_seen = False
        self.scale = 1.0
        self.seen: dict[int, float] = {}          # verify ms by tokens fed, when no calibration
        self.acc = _Decayed()
        self.prop = _Decayed()
        self.allow_zero = allow_zero
        self.zeros = 0                            # K = 0 iterations since the last drafting one

    # -- the model of the next iteration --
    def costs(self) -> Costs:
        n = self.k_max + 1
        if self.cal:
            curve = [self.cal[min(i, len(self.cal) - 1)] * self.scale for i in range(n)]
        elif self.seen:
            from .theory import _interpolate
            curve = [_interpolate(self.seen, i + 1) for i in range(n)]
        else:
            curve = [1.0] * n
        return Costs(tuple(curve), self.draft_ms, self.draft_per_token, self.overhead_ms)

    def profile(self) -> AcceptanceProfile:
        accept = self.acc.means(self.k_max, PRIOR_ALPHA, DEEP_PRIOR)
        propose = () if self.draft_per_token else self.prop.means(self.k_max, 1.0)
        return AcceptanceProfile(accept, propose)

    def choose(self, max_k: int) -> tuple[int, str]:
        cap = min(self.k_max, max(0, max_k))
        if cap == 0:
            return 0, "cost: no drafts (the last token is the target's own)"
        costs, prof = self.costs(), self.profile()
        lo = 0 if self.allow_zero else 1
        scored = {k: predicted_tokens_per_s(costs, prof, k) for k in range(lo, cap + 1)}
        best = max(scored, key=lambda k: (round(scored[k], 9), -k))
        probe = ""
        if best == 0:                       # cap >= 1 here, so some K >= 1 was scored
            draft_k = max((k for k in scored if k > 0), key=lambda k: (round(scored[k], 9), -k))
            loss = 1.0 - scored[draft_k] / scored[0] if scored[0] > 0 else 1.0
            wait = probe_wait(loss)
            self.zeros += 1
            if self.zeros > wait:
                self.zeros = 0
                best = draft_k
                probe = (f"explore: drafting is predicted {loss:.0%} below K = 0, so draft one iteration in "
                         f"{wait + 1}: ")
        else:
            self.zeros = 0
        e, ms = expected_tokens_profile(prof, best), iteration_ms(costs, prof, best)
        why = (f"cost: {probe}K = {best} predicts {scored[best]:.1f} tok/s ({e:.2f} tokens / {ms:.0f} ms; "
               f"a1 = {prof.a(1):.2f}")
        alt = [k for k in sorted(scored, key=lambda k: -scored[k]) if k != best][:1]
        if alt:
            why += f"; next best K = {alt[0]}: {scored[alt[0]]:.1f} tok/s"
        return best, why + ")"

    def observe(self, it: IterationRecord) -> None:
        for j, d in enumerate(it.drafts, 1):
            if d.tested:
                self.acc.add(j, d.alpha)
        if not self.draft_per_token:
            for j in range(1, it.k + 1):
                if len(it.drafts) >= j - 1:
                    self.prop.add(j, float(len(it.drafts) >= j))
        n = len(it.drafts) + 1
        if self.cal:
            ref = self.cal[min(n, len(self.cal)) - 1]
            if ref > 0:
                self.scale = SCALE_DECAY * self.scale + (1 - SCALE_DECAY) * (it.verify_ms / ref)
        else:
            self.seen[n] = it.verify_ms if n not in self.seen else DECAY * self.seen[n] + (1 - DECAY) * it.verify_ms
        steps = list(it.draft_ms)
        if self.draft_per_token and steps and not self.drafted_before:
            steps = steps[1:]       # a model draft's first step of a run also caught up on the whole prompt
        if it.draft_ms:
            self.drafted_before = True
        if steps:
            per = sum(steps) / len(steps) if self.draft_per_token else sum(steps)
            self.draft_ms = per if not self.draft_seen else DECAY * self.draft_ms + (1 - DECAY) * per
            self.draft_seen = True
        self.overhead_ms = it.other_ms if not self.overhead_seen else (
            DECAY * self.overhead_ms + (1 - DECAY) * it.other_ms)
        self.overhead_seen = True


def probe_wait(loss: float) -> int:
    """K = 0 iterations before the next drafting one, when drafting is predicted to lose ``loss`` (a share
    of K = 0's tokens/s): the smallest w with loss / (w + 1) <= EXPLORE_BUDGET, at most PROBE_MAX."""
    return min(PROBE_MAX, max(0, math.ceil(loss / EXPLORE_BUDGET - 1e-9) - 1))


def make_k_policy(cfg: SpecConfig, target: torch.nn.Module, drafter: Any) -> KPolicy:
    """The policy ``cfg.k_policy`` names. ``cost`` calibrates the target's verify curve for n = 1..K+1
    (once per process and model, see ``calibration``) and, for a model draft, its one-token forward.
    The fixed and heuristic policies attach an existing calibration to the trace but never measure."""
    from . import calibration
    if cfg.k_policy == "fixed":
        pol: KPolicy = FixedK(cfg.k)
    elif cfg.k_policy == "heuristic":
        pol = HeuristicK(cfg.k)
    else:
        curve = _try_calibrate(target, cfg.k + 1)
        draft_model = getattr(drafter, "model", None)
        per_token = draft_model is not None or bool(getattr(drafter, "draft_per_token", False))
        draft_ms = None
        if isinstance(draft_model, torch.nn.Module):
            dc = curve if draft_model is target else _try_calibrate(draft_model, 1)
            draft_ms = dc.t1 if dc is not None else None
        pol = CostAwareK(cfg.k, curve.verify_ms if curve else None, draft_ms, per_token,
                         curve.to_dict() if curve else None)
        return pol
    cached = _safe(lambda: calibration.cached(target))
    pol.calibration = cached.to_dict() if cached is not None else None
    return pol


def _try_calibrate(model: torch.nn.Module, n_max: int) -> Any:
    from . import calibration
    return _safe(lambda: calibration.calibrate(model, n_max))


def _safe(fn: Any) -> Any:
    """Calibration is an optimisation: a model it cannot time (a toy model without a KV cache) falls
    back to learning the costs online."""
    try:
        return fn()
    except (ValueError, RuntimeError, TypeError, AttributeError, NotImplementedError, StopIteration):
        return None
