"""K policies: how many drafts the next iteration asks for, and why (recorded as ``k_reason``).

- ``fixed``: always K (clipped to the tokens left).
- ``heuristic``: transformers' schedule: K += 2 after an iteration whose drafts were all accepted,
  K -= 1 (not below 1) otherwise; K never exceeds the configured cap.
- ``cost``: each iteration, the K in 0..cap that maximises predicted tokens per second under the
  calibrated cost model of ``theory``: tokens per iteration from a running per-position acceptance
  estimate, time per iteration from the target's verify curve t_verify(n) (``calibration``; its level set
  by the run's first verify and followed online, its shape corrected at each number of tokens fed by what
  the run measured there, the calibration worth ``SHAPE_WEIGHT`` observations), the running draft cost and
  overhead. Within ``FINISH_HORIZON`` iterations of the run's end it instead picks the K that emits the
  tokens left in the least expected time (``theory.finish_plan``: with every draft accepted, 18 tokens are
  two iterations at K = 8 but three at K = 7, whatever the steady-state rates).
  - What the drafter says before drafting (``drafters.DraftOutlook``) sharpens the estimate. Prompt
    lookup tells how long its match is, how many earlier occurrences match as far back, and how many of
    those continue with the token it will draft: a draft continuing a match of m tokens is priced by
    what such matches gave so far (``match_key``), starting from the rule of succession, m / (m + 2), shared
    among the tied occurrences and, for the first draft, times the share of them that continue its way
    (``match_prior``, ``agreement``); so a copy that has held for 20 tokens is drafted at the cap at once, a
    unique one-token match (1/3) is drafted where one more token fed costs little, and a match on "\n" or
    "the" with a dozen earlier occurrences followed by different words is not. Drafts after the first are
    priced at least at what such drafts gave so far at any match length (``deeper_prior``): a copy that held
    for a few tokens is drafted at the cap before a longer match was ever tested. Every draft, the first
    included, is priced at least at ``COPY_PRIOR`` while the match reaches back past the answer's first token
    (all generated so far copies the source: a copy or quote task, drafted deep from its second iteration on).
    K never drafts past the source's end-of-sequence token; while the answer copies its source, a copy that
    holds ends the run there, and the finish plan below counts the tokens up to it. A draft model
    tells how many tokens it has not seen: more than two (its prompt, or what was emitted while it sat
    out) cost a catch-up forward, learnt per token and added to the price of drafting now.
  - K = 0 (no drafts: one target forward) wins when drafts keep failing. Drafting is still what keeps
    the acceptance estimate current, so the policy then drafts at its best K >= 1 one iteration in w + 1,
    with w the smallest wait for which the extra time of that iteration (over what K = 0 would take for
    the tokens it is expected to give) is at most ``EXPLORE_BUDGET`` of the time spent: every iteration
    when drafting is predicted to cost next to nothing, rarely (at most every ``PROBE_MAX`` + 1) when it
    is hopeless, never when even perfect acceptance could not pay (a draft as dear as the target).
  On this CPU t_verify is nearly flat up to 4 tokens and rises after (``cpu_matmul``); the policy reads
  that from the curve rather than from a rule.

The engine calls ``choose`` before drafting and ``observe`` with the recorded iteration afterwards.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

import torch

from ..config import SpecConfig
from ..drafters.base import CATCHUP_MIN, DraftOutlook
from ..drafters.ngram import MAX_MATCH
from .costmodel import (AcceptanceProfile, Costs, expected_tokens_profile, finish_plan, iteration_ms,
    tokens_distribution)
from ..trace import IterationRecord

PRIOR_ALPHA = 0.5      # acceptance of the first draft assumed before any was tested
PRIOR_WEIGHT = 1.0     # how many observations the prior is worth
DEEPER_WEIGHT = 4.0    # the same for the pooled record of prompt lookup's deeper drafts (CostAwareK.deeper_prior)
COPY_PRIOR = 0.98      # the least price of prompt lookup's drafts while all generated so far copies the match's
                       # source (DraftOutlook.copying): in 25 recorded greedy answers of the bundled model drafts
                       # after the first continued 1,316 of 1,333 times (0.99) in that state, others 229 of 365
                       # (0.63); in 100 more (bench_replay, 2026-11-28), first drafts were right 1,617 of 1,639
                       # times (0.99) in that state: 1,617 of 1,637 in copy tasks, 0 of 2 in open-ended answers.
                       # Set a little below those rates (0.95 until 2026-11-29, when a 64-token copy then took
                       # K = 7 where every draft at K = 8 lands: one iteration more; docs/cost-model.md)
DECAY = 0.9            # weight of the past per new observation (a memory of about ten iterations)
SCALE_DECAY = 0.8      # the same for the measured/calibrated verify-time ratio (the level)
SHAPE_WEIGHT = 5.0     # how many observations the calibration's shape is worth at each number of tokens fed
EXPLORE_BUDGET = 0.03  # the share of the time that exploring (drafting where K = 0 is predicted best) may cost
PROBE_MAX = 64         # the longest run of K = 0 iterations between two drafting ones
NGRAM_LOOKUP_MS = 0.05  # prompt lookup's cost before it was measured
FINISH_HORIZON = 3     # within this many iterations at the cap of a run's end, K is planned to finish soonest


class KPolicy(Protocol):
    name: str
    calibration: dict | None        # the verify curve the policy used (recorded in the trace), if any

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]: ...  # K (<= max_k), why
    def observe(self, it: IterationRecord) -> None: ...


class FixedK:
    name = "fixed"

    def __init__(self, k: int) -> None:
        self.k = k
        self.calibration: dict | None = None

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]:
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

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]:
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
    """Exponentially decayed counts per key (a draft position, or a prompt-lookup ``match_key``):
    mean = (num + prior * w) / (den + w)."""

    def __init__(self, weight: float = PRIOR_WEIGHT, decay: float = DECAY) -> None:
        self.num: dict[Hashable, float] = {}     # keys: draft positions, or prompt lookup's match_key tuples
        self.den: dict[Hashable, float] = {}
        self.weight = weight
        self.decay = decay

    def add(self, j: Hashable, x: float) -> None:
        self.num[j] = self.decay * self.num.get(j, 0.0) + x
        self.den[j] = self.decay * self.den.get(j, 0.0) + 1.0

    def mean(self, key: Hashable, prior: float) -> float:
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
                 draft_per_token: bool, calibration: dict | None = None, allow_zero: bool = True) -> None:
        self.k_max = k_max
        self.cal = list(verify_ms) if verify_ms else None
        self.calibration = calibration
        self.draft_per_token = draft_per_token
        self.draft_ms = draft_ms if draft_ms is not None else (0.0 if draft_per_token else NGRAM_LOOKUP_MS)
        self.draft_seen = draft_ms is not None
        self.overhead_ms = 0.0
        self.overhead_seen = False
        self.scale = 1.0
        self.scale_seen = False
        self.shape = _Decayed(SHAPE_WEIGHT, 1.0)  # per tokens fed: measured ÷ (calibrated × level), prior 1; a
                                                  # property of the machine: every observation counts alike
        self.seen: dict[int, float] = {}          # verify ms by tokens fed, when no calibration
        self.acc = _Decayed()
        self.prop = _Decayed()
        self.by_match = _Decayed()                # prompt lookup: acceptance by match (match_key)
        self.deeper = _Decayed(DEEPER_WEIGHT)     # prompt lookup: drafts after the first, all lengths pooled
        self.match: tuple[int, int, int] | None = None  # the pending iteration's match: length, ties, agreement
        self.allow_zero = allow_zero
        self.zeros = 0                            # K = 0 iterations since the last drafting one
        self.unseen: int | None = None            # tokens a model draft must run over before it drafts (outlook)
        self.catchup_ms = 0.0                     # a catch-up forward's cost per token fed (learnt)
        self.catchup_seen = False

    # -- the model of the next iteration --
    def costs(self) -> Costs:
        n = self.k_max + 1
        if self.cal:
            curve = [self.cal[min(i, len(self.cal) - 1)] * self.scale * self.shape.mean(i + 1, 1.0) for i in range(n)]
        elif self.seen:
            from .costmodel import _interpolate
            curve = [_interpolate(self.seen, i + 1) for i in range(n)]
        else:
            curve = [1.0] * n
        return Costs(tuple(curve), self.draft_ms, self.draft_per_token, self.overhead_ms)

    def profile(self, outlook: DraftOutlook | None = None) -> AcceptanceProfile:
        """Per-position acceptance for the next iteration. Told prompt lookup's match (``outlook``): draft j
        continues a match of m + j - 1 tokens (the first with the match's ties, later ones from the source
        that proved right), priced by what such matches gave so far, and the drafter offers exactly the
        tokens its source has."""
        if outlook is not None and outlook.match_len:
            m, ties = outlook.match_len, outlook.ties or 1
            bucket, share = agreement(ties, outlook.agreeing)
            floor = COPY_PRIOR if outlook.copying else 0.0
            first = max(floor, self.by_match.mean(match_key(m, ties, bucket), match_prior(m, ties) * share))
            deeper = (max(floor, self.by_match.mean(match_key(m + j, 1), self.deeper_prior(m + j)))
                      for j in range(1, self.k_max))
            accept = (first, *deeper)
            avail = outlook.available if outlook.available is not None else self.k_max
            return AcceptanceProfile(accept, tuple(float(j <= avail) for j in range(1, self.k_max + 1)))
        accept = self.acc.means(self.k_max, PRIOR_ALPHA)
        propose = () if self.draft_per_token else self.prop.means(self.k_max, 1.0)
        return AcceptanceProfile(accept, propose)

    def deeper_prior(self, m: int) -> float:
        """The price of a draft continuing a unique match of m tokens before such matches were tested:
        ``match_prior``, raised to what drafts after the first gave so far at any match length
        (a copy that held at 2-7 tokens is trusted at 10 before a 10-token match was tested; in free text,
        where they fail, ``match_prior`` stands). Replayed on 25 recorded greedy answers (docs/cost-model.md), it
        raised prompt lookup's cost ÷ heuristic on the copy prompts and left the open-ended answers as they
        were."""
        prior = match_prior(m)
        return max(prior, self.deeper.mean(0, prior))

    def iteration_ms(self, costs: Costs, prof: AcceptanceProfile, k: int) -> float:
        """The next iteration's predicted ms at K = k: the cost model's, plus, for a model draft with more than
        CATCHUP_MIN tokens unseen (its prompt, or after K = 0 iterations), the forward that catches it up."""
        fed = (self.unseen or 0) - 1
        catchup = max(self.draft_ms, self.catchup_ms * fed) if k > 0 and fed >= CATCHUP_MIN else 0.0
        return iteration_ms(costs, prof, k) + catchup

    def choose(self, max_k: int, outlook: DraftOutlook | None = None) -> tuple[int, str]:
        left = max_k + 1                                        # tokens this run may still emit
        ends = outlook is not None and outlook.to_eos is not None and outlook.to_eos - 1 < max_k
        if ends:      # never draft past the source's end-of-sequence token (the target's own token decides it)
            max_k = outlook.to_eos - 1
            if outlook.copying:   # a copy that holds ends the run there: no more to plan for
                left = outlook.to_eos
        cap = min(self.k_max, max(0, max_k))
        told = outlook is not None and outlook.match_len is not None
        self.match = (outlook.match_len, outlook.ties or 1,
                      agreement(outlook.ties or 1, outlook.agreeing)[0]) if told else None
        self.unseen = outlook.unseen if outlook is not None else None
        if cap == 0:
            return 0, ("cost: no drafts (the match's source ends the sequence next: the target's own token decides)"
                       if ends else "cost: no drafts (the last token is the target's own)")
        if self.match is not None and self.match[0] == 0:
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
        match = (f"match of {self.match[0]} tokens ({'unique' if self.match[1] == 1 else f'{self.match[1]} ties'}"
                 f"{f'; {outlook.agreeing} of them continue this way' if self.match[2] else ''}"
                 f"{'; all generated so far copies its source' if outlook.copying else ''}"
                 f"{f'; the source ends the sequence in {outlook.to_eos}' if ends else ''}), "
                 if self.match else "")
        why = (f"cost: {probe}K = {best} {plan}predicts {scored[best]:.1f} tok/s "
               f"({tokens[best]:.2f} tokens / {ms[best]:.0f} ms; "
               f"{match}a1 = {prof.a(1):.2f}")
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
        for j, d in enumerate(it.drafts, 1):
            if d.tested:
                self.acc.add(j, d.alpha)
                if self.match:
                    key = match_key(*self.match) if j == 1 else match_key(self.match[0] + j - 1, 1)
                    self.by_match.add(key, d.alpha)
                    if j > 1:
                        self.deeper.add(0, d.alpha)
        if not self.draft_per_token:
            for j in range(1, it.k + 1):
                if len(it.drafts) >= j - 1:
                    self.prop.add(j, float(len(it.drafts) >= j))
        n = len(it.drafts) + 1
        if self.cal:
            ref = self.cal[min(n, len(self.cal)) - 1]
            if ref > 0 and not self.scale_seen:          # the run's level: the calibration may be minutes old
                self.scale, self.scale_seen = it.verify_ms / ref, True
            elif ref > 0:                                # this size against the level, then the level
                self.shape.add(n, it.verify_ms / (ref * self.scale))
                level = it.verify_ms / (ref * self.shape.mean(n, 1.0))
                self.scale = SCALE_DECAY * self.scale + (1 - SCALE_DECAY) * level
        else:
            self.seen[n] = it.verify_ms if n not in self.seen else DECAY * self.seen[n] + (1 - DECAY) * it.verify_ms
        if it.catchup_ms > 0 and self.unseen and self.unseen > 1:
            per = it.catchup_ms / (self.unseen - 1)
            self.catchup_ms = per if not self.catchup_seen else DECAY * self.catchup_ms + (1 - DECAY) * per
            self.catchup_seen = True
        steps = it.draft_ms
        if steps:
            per = sum(steps) / len(steps) if self.draft_per_token else sum(steps)
            self.draft_ms = per if not self.draft_seen else DECAY * self.draft_ms + (1 - DECAY) * per
            self.draft_seen = True
        self.overhead_ms = it.other_ms if not self.overhead_seen else (
            DECAY * self.overhead_ms + (1 - DECAY) * it.other_ms)
        self.overhead_seen = True


def match_key(m: int, ties: int, bucket: int = 0) -> tuple[int, int, int]:
    """Prompt-lookup matches pooled by doubling of their length (1 | 2-3 | 4-7 | … | 64, ``MAX_MATCH``), of
    the earlier occurrences that match as far back (1 | 2-3 | 4-7 | 8 and more), and (first drafts only)
    by ``agreement``'s bucket."""
    return min(m, MAX_MATCH).bit_length(), min(ties, 8).bit_length(), bucket


def agreement(ties: int, agreeing: int | None) -> tuple[int, float]:
    """How a prompt-lookup match's tied occurrences continued: bucket 0 (unique, or not told), 1 (all the
    same way as the draft), 2 (most of them), 3 (fewer than half); and the share to price the first draft
    by (1 in buckets 0 and 1). Measured on greedy answers of the bundled model (2026-11-27, 18 open-ended
    prompts), a one-token match was right 0.18 of the time when unique (175 cases), 0.57 when all its ties
    continued the same way (14), 0.08 when most did (99), 0.02 when fewer than half did (82)."""
    if ties <= 1 or agreeing is None:
        return 0, 1.0
    if agreeing >= ties:
        return 1, 1.0
    return (2 if 2 * agreeing >= ties else 3), agreeing / ties


def match_prior(m: int, ties: int = 1) -> float:
    """Acceptance assumed for a draft continuing a match of m tokens before any such was tested: the rule of
    succession with the match's first token counted as where the lookup started, not as evidence, m / (m + 2)
    (1/3 for one token, 1/2 for two, 0.8 for eight; Laplace's (m + 1) / (m + 2) priced the bundled model's
    one- and two-token matches in free text at 0.67 and 0.75 where they gave 0.18 and 0.40), shared among
    the occurrences that match as far back (one in ``ties`` is the right one), for the shortest m and fewest
    ties of its ``match_key``."""
    length, tie, _ = match_key(m, ties)
    low = 1 << (length - 1)
    return low / (low + 2) / (1 << (tie - 1))


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
