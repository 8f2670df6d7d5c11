"""The calibrated cost model: an iteration priced with measured parts.

The closed form (``closed_form``) prices an iteration at c*K + 1 target forwards: a verify over K + 1
tokens is assumed to cost the same as a one-token forward, and nothing else takes time. This model keeps
the same structure with measured parts:

  time of one iteration  = draft(K) + t_verify(L + 1) + t_overhead     (L = drafts actually proposed)
  tokens of one iteration = 1 + sum_{j <= L} a_1 * ... * a_j            (a_j: conditional acceptance)
  run                    = prefill + (N / tokens per iteration) * time per iteration
  baseline               = baseline prefill + N * (t_1 + baseline overhead per token)

t_verify(n) is a measured curve over n = tokens fed (nearly flat on a GPU; on a CPU it rises and need
not even be monotonic: one matrix shape can take a slower kernel than a larger one), draft(K) is
K draft forwards for a model draft and one lookup for prompt lookup, and a_j is the measured
per-position acceptance (draft j accepted given drafts 1..j-1 were), not one alpha. With a flat
curve, no overhead, no prefill and one alpha this is exactly ``closed_form.speedup(alpha, K, c)``.
The parts' record is ``costs.Costs`` (importable from here too); a run's token trees are priced by ``tree_cost``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from dataclasses import dataclass

import numpy as np

from ..trace import IterationRecord, Trace
from .costs import Costs, fed_tokens
from .tree_cost import branch_table, tree_prediction


@dataclass(frozen=True)
class AcceptanceProfile:
    """Measured acceptance by draft position."""
    accept: tuple[float, ...]         # accept[j - 1]: P(draft j accepted | drafts 1..j-1 accepted)
    propose: tuple[float, ...] = ()   # propose[j - 1]: P(a j-th draft is offered | j-1 were and K >= j); 1 if absent

    def __post_init__(self) -> None:
        for name in ("accept", "propose"):
            if any(not 0.0 <= x <= 1.0 for x in getattr(self, name)):
                raise ValueError(f"{name} probabilities must be in [0, 1]")

    def a(self, j: int) -> float:
        """Conditional acceptance at position j (1-based); beyond the measured positions, the last one."""
        if not self.accept:
            return 0.0
        return self.accept[min(j, len(self.accept)) - 1]

    def s(self, j: int) -> float:
        if not self.propose:
            return 1.0
        return self.propose[min(j, len(self.propose)) - 1]

    @classmethod
    def constant(cls, alpha: float) -> "AcceptanceProfile":
        """i.i.d. acceptance (the closed form's assumption), a drafter that always proposes K."""
        return cls((alpha,))


def proposal_lengths(profile: AcceptanceProfile, k: int) -> list[float]:
    """P(L = l) for l = 0..k: how many drafts the drafter offers when asked for k."""
    out, reach = [], 1.0                       # reach = P(L >= j)
    for j in range(1, k + 1):
        nxt = reach * profile.s(j)
        out.append(reach - nxt)
        reach = nxt
    return out + [reach]


def tokens_given_length(profile: AcceptanceProfile, length: int) -> float:
    """Expected tokens emitted by an iteration that verifies ``length`` drafts: 1 + sum_j prod_{i<=j} a_i."""
    total, run = 1.0, 1.0
    for j in range(1, length + 1):
        run *= profile.a(j)
        total += run
    return total


def expected_tokens_profile(profile: AcceptanceProfile, k: int) -> float:
    """Expected tokens per iteration at K = k under a per-position profile."""
    return sum(p * tokens_given_length(profile, l) for l, p in enumerate(proposal_lengths(profile, k)))


def iteration_ms(costs: Costs, profile: AcceptanceProfile, k: int) -> float:
    """Expected time of one iteration at K = k: drafting, one verify over L + 1 tokens, overhead."""
    return costs.overhead_ms + sum(p * (costs.draft_cost(l, k) + costs.t_verify(l + 1))
                                   for l, p in enumerate(proposal_lengths(profile, k)))


def tokens_distribution(profile: AcceptanceProfile, k: int) -> list[float]:
    """P(an iteration at K = k emits m tokens) for m = 1..k+1: i drafts accepted, then the first rejection
    (or the bonus after all L offered were accepted)."""
    out = [0.0] * (k + 1)
    for length, p_len in enumerate(proposal_lengths(profile, k)):
        run = p_len                                  # P(offered `length`, first i accepted)
        for i in range(length):
            a = profile.a(i + 1)
            out[i] += run * (1.0 - a)
            run *= a
        out[length] += run
    return out


def finish_plan(first_ms: Sequence[float], later_ms: Sequence[float], dists: Sequence[Sequence[float]],
                remaining: int) -> tuple[int, float]:
    """The K (index into the lists, 0 = no drafts) that emits ``remaining`` more tokens in the least expected
    time, and that time: iteration i takes ``later_ms[K]`` (the next one ``first_ms[K]``) and emits m tokens
    with probability ``dists[K][m - 1]``; tokens past the end are not needed (a run stops at its length).
    An exact dynamic programme over the tokens left; K never asks for more than remaining - 1 drafts."""
    n = len(later_ms)
    dist = np.zeros((n, n))                          # dist[K, m - 1]
    for k, d in enumerate(dists):
        dist[k, :len(d)] = d
    finish = np.zeros(remaining + n)                 # finish[n - 1 + r]: least expected ms for r more tokens
    choice = 0
    for r in range(1, remaining + 1):
        times = np.asarray(first_ms if r == remaining else later_ms, dtype=float)[:min(n, r)]   # K <= r - 1
        ahead = finish[n - 1 + r - np.arange(1, n + 1)]  # finish[r - m] for m = 1..n (0 once past the end)
        total = times + dist[:len(times)] @ ahead
        choice = int(np.argmin(total))
        finish[n - 1 + r] = total[choice]
    return choice, float(finish[n - 1 + remaining])


def predicted_tokens_per_s(costs: Costs, profile: AcceptanceProfile, k: int, n_tokens: int | None = None) -> float:
    """Tokens per second at K = k; with ``n_tokens`` the prefill is counted (a run of that length),
    without it the steady state."""
    e, t = expected_tokens_profile(profile, k), iteration_ms(costs, profile, k)
    if n_tokens is None:
        return 1000.0 * e / t if t > 0 else math.inf
    total = costs.prefill_ms + n_tokens / e * t
    return 1000.0 * n_tokens / total if total > 0 else math.inf


def baseline_tokens_per_s(costs: Costs, n_tokens: int | None = None) -> float:
    per = costs.baseline_per_token
    total = (costs.baseline_prefill_ms if n_tokens is not None else 0.0) + (n_tokens or 1) * per
    return 1000.0 * (n_tokens or 1) / total if total > 0 else math.inf


def predicted_speedup(costs: Costs, profile: AcceptanceProfile, k: int, n_tokens: int | None = None) -> float:
    """Predicted tokens/s over the baseline's, both priced by ``costs``."""
    return predicted_tokens_per_s(costs, profile, k, n_tokens) / baseline_tokens_per_s(costs, n_tokens)


def best_k(costs: Costs, profile: AcceptanceProfile, k_max: int, k_min: int = 1) -> int:
    """The K in k_min..k_max with the highest predicted steady-state tokens/s (smallest on ties)."""
    return max(range(k_min, k_max + 1), key=lambda k: (round(predicted_tokens_per_s(costs, profile, k), 9), -k))


@dataclass(frozen=True)
class TimeSplit:
    """Where the time of one run went, in milliseconds."""
    prefill: float
    draft: float
    verify: float                     # target forwards after the prefill (the baseline: its one-token forwards)
    overhead: float
    tokens: float

    @property
    def total(self) -> float:
        return self.prefill + self.draft + self.verify + self.overhead

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.tokens / self.total if self.total > 0 else 0.0


# --- reading the model's inputs off traces ---------------------------------------------------------

def acceptance_profile(traces: Sequence[Trace]) -> AcceptanceProfile:
    """Per-position acceptance pooled over runs: accept[j-1] = mean alpha of the tested j-th drafts
    (alpha is a tested draft's acceptance probability: 0/1 in greedy mode; under coupled sampling the coupled
    rule's, ``DraftRecord.accept_prob``); propose[j-1] = share of
    iterations that asked for >= j drafts and got j-1 that also got a j-th. Runs of token trees alone: the
    trees' best children by depth (``tree_cost.branch_table``), what a chain of the draft's best guesses meets."""
    iterations = [it for tr in traces for it in tr.iterations]
    if iterations and all(it.tree is not None for it in iterations):
        table = branch_table(iterations)
        depth = max((d for d, r in table if r == 1), default=0)
        return AcceptanceProfile(tuple(table.get((d, 1), 0.0) for d in range(1, depth + 1)))
    return iterations_profile(iterations)


def iterations_profile(iterations: Sequence[IterationRecord],
                       fallback: AcceptanceProfile | None = None) -> AcceptanceProfile:
    """``acceptance_profile`` of some iterations; a position none of them tested takes ``fallback``'s value
    (else the mean over the positions they tested). Chain iterations only: a tree iteration's drafts are its
    accepted path (``tree_cost.branch_table`` reads trees)."""
    iterations = [it for it in iterations if it.tree is None]
    acc: dict[int, list[float]] = {}
    asked: dict[int, int] = {}
    got: dict[int, int] = {}
    for it in iterations:
        for j, d in enumerate(it.drafts, 1):
            if d.tested:
                acc.setdefault(j, []).append(d.accept_prob)
        for j in range(1, it.k + 1):
            if len(it.drafts) >= j - 1:
                asked[j] = asked.get(j, 0) + 1
                got[j] = got.get(j, 0) + (len(it.drafts) >= j)
    pooled = [a for v in acc.values() for a in v]
    mean = sum(pooled) / len(pooled) if pooled else 0.0
    fallback = fallback or AcceptanceProfile((mean,))           # untested positions: the tested ones' mean
    n_acc = max(max(acc, default=0), len(fallback.accept))
    accept = tuple(sum(acc[j]) / len(acc[j]) if acc.get(j) else fallback.a(j) for j in range(1, n_acc + 1))
    n_prop = max(max(asked, default=0), len(fallback.propose))
    propose = tuple(got[j] / asked[j] if asked.get(j) else fallback.s(j) for j in range(1, n_prop + 1))
    return AcceptanceProfile(accept, propose)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def run_verify_ms(traces: Sequence[Trace]) -> dict[int, list[float]]:
    """Measured verify times grouped by tokens fed (``fed_tokens``)."""
    out: dict[int, list[float]] = {}
    for tr in traces:
        for it in tr.iterations:
            out.setdefault(fed_tokens(it), []).append(it.verify_ms)
    return out


def merge_verify_curve(measured: dict[int, list[float]], calibrated: Sequence[float] | None,
                       n_max: int, min_samples: int = 3) -> tuple[float, ...]:
    """t_verify(1..n_max): the run's own mean where it has ``min_samples`` points, else the calibration
    curve scaled to the run's level (median ratio over the sizes both have), else the run's own fewer
    points, else the last slope extrapolated (never falling)."""
    own = {n: sum(v) / len(v) for n, v in measured.items() if len(v) >= min_samples and n >= 1}
    cal = list(calibrated or [])
    both = [own[n] / cal[n - 1] for n in own if n <= len(cal) and cal[n - 1] > 0]
    scale = sorted(both)[len(both) // 2] if both else 1.0
    loose = {n: sum(v) / len(v) for n, v in measured.items() if v and n >= 1}
    curve = []
    for n in range(1, n_max + 1):
        if n in own:
            curve.append(own[n])
        elif n <= len(cal):
            curve.append(cal[n - 1] * scale)
        elif n in loose:
            curve.append(loose[n])
        elif any(m > n for m in loose) and (curve or any(m < n for m in loose)):
            known = {**loose, **{i + 1: v for i, v in enumerate(curve)}}
            curve.append(_interpolate(known, n))        # between measured sizes: linear
        elif curve:
            curve.append(curve[-1] + (max(0.0, curve[-1] - curve[-2]) if len(curve) >= 2 else 0.0))
        elif loose:
            curve.append(_interpolate(loose, n))
        else:
            raise ValueError("no verify timing: neither the run nor a calibration has one")
    return tuple(curve)


def _interpolate(points: dict[int, float], n: int) -> float:
    xs = sorted(points)
    if n <= xs[0]:
        return points[xs[0]]
    if n >= xs[-1]:
        return points[xs[-1]]
    lo = max(x for x in xs if x <= n)
    hi = min(x for x in xs if x >= n)
    return points[lo] if lo == hi else points[lo] + (points[hi] - points[lo]) * (n - lo) / (hi - lo)


def costs_from_traces(traces: Sequence[Trace], calibrated_verify: Sequence[float] | None = None,
                      n_max: int | None = None, calibrated_draft_ms: float | None = None) -> Costs:
    """Costs read off runs of one (target, drafter, device): verify curve (merged with a calibration),
    mean draft forward, overhead per iteration = (wall - prefill - draft - verify) / iterations, and
    the baselines' prefill and per-token overhead where the traces carry a baseline."""
    traces = [t for t in traces if t.iterations]
    if not traces:
        raise ValueError("no run with iterations to read costs from")
    ngram = all(t.stats.draft_forwards == 0 for t in traces)
    k_seen = max(fed_tokens(it) - 1 for t in traces for it in t.iterations)
    n_max = max(n_max or 0, k_seen + 1, len(calibrated_verify or ()))
    verify = merge_verify_curve(run_verify_ms(traces), calibrated_verify, n_max)
    draft = _mean([ms for t in traces for it in t.iterations for ms in it.draft_ms])
    if draft is None:
        draft = calibrated_draft_ms or 0.0
    overhead = _mean([max(0.0, t.stats.wall_ms - _fill_ms(t)
                          - sum(sum(it.draft_ms) + it.verify_ms for it in t.iterations)) / len(t.iterations)
                      for t in traces]) or 0.0
    prefill = _mean([_fill_ms(t) for t in traces]) or 0.0
    b_prefill, b_over, b_token = _baseline_parts([t for t in traces if t.baseline and t.baseline.token_ms], verify[0])
    return Costs(verify, draft, not ngram, overhead, prefill, b_prefill, b_over, b_token)


def _fill_ms(trace: Trace) -> float:
    """Filling caches: the prefill, and a draft model's catch-ups over tokens it had not seen (its own prompt
    prefill, deferred to its first draft, and what was emitted while it sat out K = 0 iterations)."""
    return trace.stats.prefill_ms + sum(it.catchup_ms for it in trace.iterations)


def _baseline_parts(traces: Sequence[Trace], t1: float) -> tuple[float, float, float | None]:
    """(prefill, host overhead per token, time per token) of the baselines: the first token's time minus
    a typical token is the prefill; a typical token (mean of the others) is the time per token, and
    what it has beyond one one-token forward is the overhead."""
    if not traces:
        return 0.0, 0.0, None
    pre, over, per = [], [], []
    for t in traces:
        ms = t.baseline.token_ms
        rest = ms[1:]
        typical = sum(rest) / len(rest) if rest else ms[0]
        pre.append(max(0.0, ms[0] - typical))
        over.append(max(0.0, typical - t1))
        per.append(typical)
    return sum(pre) / len(pre), sum(over) / len(over), sum(per) / len(per)


def time_split(trace: Trace) -> TimeSplit:
    """The measured split of a speculative run: prefill (with the draft's catch-ups), draft forwards, verify
    forwards, the rest."""
    st = trace.stats
    draft = sum(sum(it.draft_ms) for it in trace.iterations)
    verify = sum(it.verify_ms for it in trace.iterations)
    fill = _fill_ms(trace)
    return TimeSplit(fill, draft, verify, max(0.0, st.wall_ms - fill - draft - verify), st.new_tokens)


def baseline_split(trace: Trace, t1: float | None = None) -> TimeSplit | None:
    """The measured baseline split: prefill (first token minus a typical one), N one-token forwards
    (t1 each, from the calibration/run; capped at the typical token time), the rest overhead."""
    b = trace.baseline
    if b is None or not b.token_ms:
        return None
    rest = b.token_ms[1:]
    typical = sum(rest) / len(rest) if rest else b.token_ms[0]
    prefill = max(0.0, b.token_ms[0] - typical)
    fwd = min(typical, t1) if t1 else typical
    n = len(b.token_ms)
    verify = fwd * n
    return TimeSplit(prefill, 0.0, verify, max(0.0, b.wall_ms - prefill - verify), len(b.new_token_ids))


def predicted_split(trace: Trace, costs: Costs) -> TimeSplit:
    """The speculative run as the model prices it: the same K per iteration as the run, tokens from the
    acceptance profile of the run's iterations at that K (a K policy drafts deep where it expects drafts to
    land, so acceptance depends on K; a position never tested at that K takes the run's pooled value), each
    part from ``costs`` (pass ``costs.flat()`` for a GPU-like verify). A tree iteration is priced as its tree:
    its draft forwards, a verify over its nodes + 1, tokens from the run's acceptance by depth and sibling
    rank (``tree_cost.tree_prediction``)."""
    chains = [it for it in trace.iterations if it.tree is None]
    pooled = iterations_profile(chains)
    by_k: dict[int, list[IterationRecord]] = {}
    for it in chains:
        by_k.setdefault(it.k, []).append(it)
    profiles = {k: iterations_profile(its, pooled) for k, its in by_k.items()}
    table = branch_table(trace.iterations)
    draft = verify = 0.0
    tokens = 0.0
    for it in trace.iterations:
        if it.tree is not None:
            d, v, t = tree_prediction(it, costs, table)
            draft, verify, tokens = draft + d, verify + v, tokens + t
            continue
        profile = profiles[it.k]
        for l, p in enumerate(proposal_lengths(profile, it.k)):
            draft += p * costs.draft_cost(l, it.k)
            verify += p * costs.t_verify(l + 1)
        tokens += expected_tokens_profile(profile, it.k)
    n = len(trace.iterations)
    return TimeSplit(costs.prefill_ms, draft, verify, costs.overhead_ms * n, tokens)


def predict_speedup(trace: Trace, calibrated_verify: Sequence[float] | None = None, flat: bool = False) -> float | None:
    """Predicted speedup of a run with its same-run baseline: the cost model priced with the run's own
    costs (merged with a calibration curve), at the K the run used in each iteration, with tokens per
    iteration from its per-position acceptance. ``flat``: what a GPU-like (flat) verify would give.
    None without iterations or a baseline."""
    if not trace.iterations or trace.baseline is None or not trace.baseline.token_ms:
        return None
    costs = costs_from_traces([trace], calibrated_verify or _trace_calibration(trace))
    if flat:
        costs = costs.flat()
    spec = predicted_split(trace, costs)
    n = len(trace.baseline.new_token_ids)
    base_ms = costs.baseline_prefill_ms + n * costs.baseline_per_token
    if spec.total <= 0 or base_ms <= 0:
        return None
    return (spec.tokens / spec.total) / (n / base_ms)


def _trace_calibration(trace: Trace) -> tuple[float, ...] | None:
    cal = getattr(trace, "calibration", None) or {}
    v = cal.get("verify_ms")
    return tuple(v) if v else None


def predicted_speedup_curve(trace: Trace, k_max: int, flat: bool = False) -> list[float] | None:
    """Predicted speedup at K = 1..k_max for this run's job (its length, prompt, drafter and device):
    the run's acceptance profile and costs (verify curve merged with the trace's calibration, the last
    slope beyond it). None without iterations."""
    if not trace.iterations:
        return None
    costs = costs_from_traces([trace], _trace_calibration(trace), k_max + 1)
    if flat:
        costs = costs.flat()
    prof = acceptance_profile([trace])
    n = max(1, trace.stats.new_tokens) if trace.baseline is not None else None   # no baseline: steady state
    return [predicted_speedup(costs, prof, k, n) for k in range(1, k_max + 1)]
