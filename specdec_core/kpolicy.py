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
  its best K >= 1 one iteration in w + 1, with w the smallest wait for which the extra time of that
  iteration (over what K = 0 would take for the tokens it is expected to give) is at most
  ``EXPLORE_BUDGET`` of the time spent: every iteration when drafting is predicted to cost next to
  nothing, rarely (at most every ``PROBE_MAX`` + 1) when it is hopeless. A recovered draft is noticed
  within a few iterations, and a hopeless one costs about 3 %. A model draft that sat out K = 0
  iterations must first run over the tokens it has not seen: the policy learns that catch-up cost per
  token from its first steps and adds it to the price of drafting now (it is what made drafting after a
  long K = 0 stretch dear for the self-draft). A prompt-lookup probe that finds no match costs nothing
  extra. On this CPU t_verify is nearly flat up to 4 tokens and rises after (``cpu_matmul``); the policy
  reads that from the curve rather than from a rule.

The engine calls ``choose`` before drafting and ``observe`` with the recorded iteration afterwards.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from .config import SpecConfig
from .theory import AcceptanceProfile, Costs, expected_tokens_profile, iteration_ms
from .trace import IterationRecord

PRIOR_ALPHA = 0.5      # acceptance of the first draft assumed before any was tested
DEEP_PRIOR = 0.8       # draft j >= 2 given j-1 accepted: drafts fail in runs, so a draft that follows an
                       # accepted one is more likely right (prompt lookup copying a passage: 0.9 and more)
PRIOR_WEIGHT = 1.0     # how many observations the prior is worth
DECAY = 0.9            # weight of the past per new observation (a memory of about ten iterations)
SCALE_DECAY = 0.8      # the same for the measured/calibrated verify-time ratio
EXPLORE_BUDGET = 0.03  # the share of the time that exploring (drafting where K = 0 is predicted best) may cost
PROBE_MAX = 64         # the longest run of K = 0 iterations between two drafting ones
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
        self.behind = 1                           # tokens a model draft has not seen yet (its next first step)
        self.catchup_ms = 0.0                     # ... and what each extra one adds to that step (learnt)
        self.catchup_seen = False

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

    def iteration_ms(self, costs: Costs, prof: AcceptanceProfile, k: int) -> float:
        """The next iteration's predicted ms at K = k: the cost model's, plus, for a model draft that sat out
        K = 0 iterations, its first step's catch-up over the tokens it has not seen."""
        catchup = self.catchup_ms * (self.behind - 1) if k > 0 and self.draft_per_token else 0.0
        return iteration_ms(costs, prof, k) + catchup

    def choose(self, max_k: int) -> tuple[int, str]:
        cap = min(self.k_max, max(0, max_k))
        if cap == 0:
            return 0, "cost: no drafts (the last token is the target's own)"
        costs, prof = self.costs(), self.profile()
        lo = 0 if self.allow_zero else 1
        tokens = {k: expected_tokens_profile(prof, k) for k in range(lo, cap + 1)}
        ms = {k: self.iteration_ms(costs, prof, k) for k in tokens}
        scored = {k: 1000.0 * tokens[k] / ms[k] if ms[k] > 0 else math.inf for k in tokens}
        best = max(scored, key=lambda k: (round(scored[k], 9), -k))
        probe = ""
        if best == 0:                       # cap >= 1 here, so some K >= 1 was scored
            draft_k = max((k for k in scored if k > 0), key=lambda k: (round(scored[k], 9), -k))
            extra = ms[draft_k] - tokens[draft_k] * ms[0]       # vs the same tokens at K = 0
            wait = probe_wait(extra, ms[draft_k], ms[0])
            self.zeros += 1
            if self.zeros > wait:
                self.zeros = 0
                best = draft_k
                probe = (f"explore: drafting now costs {extra:.1f} ms more than K = 0 would for its tokens, so "
                         f"draft one iteration in {wait + 1}: ")
        else:
            self.zeros = 0
        why = (f"cost: {probe}K = {best} predicts {scored[best]:.1f} tok/s "
               f"({tokens[best]:.2f} tokens / {ms[best]:.0f} ms; "
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
        if self.draft_per_token and steps and (not self.drafted_before or self.behind > 1):
            first, steps = steps[0], steps[1:]   # the first step also caught up (on the prompt, or after K = 0)
            if self.drafted_before:
                per = max(0.0, first - self.draft_ms) / (self.behind - 1)
                self.catchup_ms = per if not self.catchup_seen else DECAY * self.catchup_ms + (1 - DECAY) * per
                self.catchup_seen = True
        if it.draft_ms:
            self.drafted_before = True
        self.behind = 1 if it.draft_ms else self.behind + 1
        if steps:
            per = sum(steps) / len(steps) if self.draft_per_token else sum(steps)
            self.draft_ms = per if not self.draft_seen else DECAY * self.draft_ms + (1 - DECAY) * per
            self.draft_seen = True
        self.overhead_ms = it.other_ms if not self.overhead_seen else (
            DECAY * self.overhead_ms + (1 - DECAY) * it.other_ms)
        self.overhead_seen = True


def probe_wait(extra_ms: float, draft_ms: float, zero_ms: float) -> int:
    """K = 0 iterations before the next drafting one, when a drafting iteration takes ``draft_ms`` and
    ``extra_ms`` more than K = 0 iterations (``zero_ms`` each) would take for the same tokens: the smallest w
    with extra_ms / (w * zero_ms + draft_ms) <= EXPLORE_BUDGET, at most PROBE_MAX."""
    if extra_ms <= 0:
        return 0
    need = (extra_ms / EXPLORE_BUDGET - draft_ms) / max(zero_ms, 1e-9)
    return min(PROBE_MAX, max(0, math.ceil(need - 1e-9)))


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
