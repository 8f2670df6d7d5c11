"""Numbers the page shows, read off a Trace: counts, progress curves, measured speedup.

Only bookkeeping over what the engine recorded (counting, summing recorded times); no sampling math.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from specdec_core import Trace
from specdec_core.drafters.tree import depths
from specdec_core.trace import IterationRecord


@dataclass(frozen=True)
class Outcome:
    """What happened to the tokens of one iteration."""
    accepted: int      # drafts the target accepted (a tree: the accepted path)
    rejected: int      # drafts that failed their test (a chain: 0 or 1; a tree: every failed node)
    discarded: int     # drafts never tested (a chain: after the first rejection)
    resampled: int     # 1 when a replacement was drawn from the residual
    bonus: int         # 1 when every draft was accepted and the target added one more

    @property
    def drafted(self) -> int:
        return self.accepted + self.rejected + self.discarded


def outcome(it: IterationRecord) -> Outcome:
    if it.tree is not None:             # drafts = the accepted path; every node was drafted
        accepted = len(it.drafts)
        rejected = sum(nd.status == "rejected" for nd in it.tree.nodes)
        return Outcome(accepted, rejected, len(it.tree.nodes) - accepted - rejected, int(it.resampled is not None),
                       int(it.bonus is not None))
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


def _drafts(it: IterationRecord) -> list[tuple[int, bool, bool, float | None]]:
    """(position, tested, accepted, alpha) of each draft: a chain's by position, a tree's nodes by depth
    (alpha None where the tree's rule has none), 0-based."""
    if it.tree is None:
        return [(j, d.tested, d.accepted, d.alpha) for j, d in enumerate(it.drafts)]
    depth = depths([nd.parent for nd in it.tree.nodes])
    return [(depth[j] - 1, nd.status != "untested", nd.status == "accepted", nd.alpha)
            for j, nd in enumerate(it.tree.nodes)]


def position_counts(trace: Trace) -> list[tuple[int, int, int, float | None]]:
    """Per draft position (0-based; a tree's nodes by depth): (proposed, tested, accepted, mean alpha over the
    tested drafts that have one, None when none has)."""
    rows: list[list] = []
    for it in trace.iterations:
        for pos, tested, accepted, alpha in _drafts(it):
            while len(rows) <= pos:
                rows.append([0, 0, 0, []])
            row = rows[pos]
            row[0] += 1
            row[1] += tested
            row[2] += accepted
            if tested and alpha is not None:
                row[3].append(alpha)
    return [(n, t, a, sum(al) / len(al) if al else None) for n, t, a, al in rows]


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
        o = outcome(it)
        drafted += o.drafted
        accepted += o.accepted
        out.append(accepted / drafted if drafted else None)
    return out

