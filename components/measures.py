"""Numbers the page shows, read off a Trace: counts, progress curves, measured speedup.

Only bookkeeping over what the engine recorded (counting, summing recorded times); no sampling math.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from specdec_core import Trace
from specdec_core.trace import IterationRecord


@dataclass(frozen=True)
class Outcome:
    """What happened to the tokens of one iteration."""
    accepted: int      # drafts the target accepted
    rejected: int      # the draft that failed its test (0 or 1)
    discarded: int     # drafts after the first rejection, never tested
    resampled: int     # 1 when a replacement was drawn from the residual
    bonus: int         # 1 when every draft was accepted and the target added one more

    @property
    def drafted(self) -> int:
        return self.accepted + self.rejected + self.discarded


def outcome(it: IterationRecord) -> Outcome:
    accepted = sum(d.accepted for d in it.drafts)
    rejected = sum(1 for d in it.drafts if d.tested and not d.accepted)
    discarded = sum(1 for d in it.drafts if not d.tested)
    return Outcome(accepted, rejected, discarded, int(it.resampled is not None), int(it.bonus is not None))


def iteration_end_ms(it: IterationRecord) -> float:
    """When the iteration finished, on the run's clock (its recorded start plus its recorded parts)."""
    return it.t_start_ms + it.catchup_ms + sum(it.draft_ms) + it.verify_ms + it.other_ms


def speculative_progress(trace: Trace) -> tuple[list[float], list[int]]:
    """(ms since the run started, tokens generated so far), one point per iteration, starting at (0, 0)."""
    times = [0.0] + [iteration_end_ms(it) for it in trace.iterations]
    tokens = [0] + list(accumulate(len(it.emitted) for it in trace.iterations))
    return times, tokens


def baseline_progress(trace: Trace) -> tuple[list[float], list[int]]:
    """(ms since the baseline started, tokens so far), one point per target forward, starting at (0, 0)."""
    if trace.baseline is None:
        return [], []
    times = [0.0] + list(accumulate(trace.baseline.token_ms))
    return times, list(range(len(times)))


def measured_speedup(trace: Trace) -> float | None:
    """Speculative tokens/s divided by the same run's baseline tokens/s (both measured, prefill included)."""
    b = trace.baseline
    if b is None or not b.new_token_ids or b.tokens_per_s <= 0 or trace.stats.tokens_per_s <= 0:
        return None
    return trace.stats.tokens_per_s / b.tokens_per_s


def identical_to_baseline(trace: Trace) -> bool | None:
    """Whether the speculative tokens equal the baseline's (None without a complete baseline to compare).
    A stopped run is compared on the prefix it produced."""
    b = trace.baseline
    if b is None or not b.new_token_ids:
        return None
    n = len(trace.new_token_ids)
    if trace.finish_reason in ("stopped", "limit"):
        return b.new_token_ids[:n] == trace.new_token_ids
    return b.new_token_ids == trace.new_token_ids


def position_counts(trace: Trace) -> list[tuple[int, int, int, float]]:
    """Per draft position (0-based): (proposed, tested, accepted, mean alpha over tested drafts)."""
    width = max((len(it.drafts) for it in trace.iterations), default=0)
    rows = []
    for j in range(width):
        ds = [it.drafts[j] for it in trace.iterations if len(it.drafts) > j]
        tested = [d for d in ds if d.tested]
        mean_alpha = sum(d.alpha for d in tested) / len(tested) if tested else 0.0
        rows.append((len(ds), len(tested), sum(d.accepted for d in ds), mean_alpha))
    return rows


def accepted_length_counts(trace: Trace) -> list[int]:
    """counts[n] = iterations in which exactly n drafts were accepted (n = 0 .. largest K used)."""
    width = max((len(it.drafts) for it in trace.iterations), default=0)
    counts = [0] * (width + 1)
    for it in trace.iterations:
        counts[sum(d.accepted for d in it.drafts)] += 1
    return counts


def running_acceptance(trace: Trace) -> list[float | None]:
    """Accepted / drafted over iterations 0..i, for each i (None while nothing was drafted yet)."""
    out: list[float | None] = []
    drafted = accepted = 0
    for it in trace.iterations:
        drafted += len(it.drafts)
        accepted += sum(d.accepted for d in it.drafts)
        out.append(accepted / drafted if drafted else None)
    return out

