"""The best K schedule in hindsight, and a run's K decisions priced by one cost model.

A greedy run emits the baseline's tokens whatever its K policy, so for a drafter whose proposal is a
function of the sequence alone (prompt lookup) what every K would have given at every point of the output
is known once the output is: ``outcomes`` proposes K = 0..k_max drafts after each prefix of the output and
counts how many of them the output confirms. ``best_schedule`` is then an exact dynamic programme over the
tokens emitted: the least total time under ``theory.Costs``, and the K of each iteration that reaches it.
No K policy, which must decide before it sees the verify, can do better under the same costs; so
``priced_ms(heuristic run) / best_ms`` bounds what any policy could gain over the heuristic on that job.

``priced_ms(trace, costs)`` prices the decisions a run made (how many drafts each iteration verified) with
the same costs: two policies compared this way differ by what they decided, not by the machine's timing
noise between their runs. ``replay_policy`` goes one step further and needs no run at all: it re-enacts a K
policy on a known greedy output (the policy told prompt lookup's outlook, choosing K, observing the iteration
the output implies, its verify timed by the cost model), so a policy change can be tried on many recorded
answers in seconds (``bench_replay``). ``hindsight_split`` gives a greedy prompt-lookup run's best schedule as
a time split for the "where the time went" figure.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import MAX_K
from ..drafters.base import DraftPolicy
from ..drafters.ngram import NGramDrafter
from .costmodel import Costs, TimeSplit
from ..trace import DraftRecord, IterationRecord, Trace

MAX_REPLAY_TOKENS = 2048   # longer runs are not replayed for the time figure (~0.5 ms a token on this 2-core CPU)
Outcomes = list[list[tuple[int, int]]]   # [i][k]: (drafts proposed, drafts the output confirms) after i tokens


def iteration_cost(costs: Costs, k: int, proposed: int) -> float:
    """One iteration that asked for k drafts and got ``proposed``: drafting, one verify over them and the
    last token, and the per-iteration overhead."""
    return costs.overhead_ms + costs.draft_cost(proposed, k) + costs.t_verify(proposed + 1)


def _greedy_draw(eos_token_id: int | None) -> DraftPolicy:
    """How prompt lookup is asked for drafts here: greedy, no probabilities kept."""
    return DraftPolicy(temperature=0.0, top_k=0, top_p=1.0, generator=None, eos_token_id=eos_token_id,
                       raw_probs=False)


def _confirmed(tokens: Sequence[int], seq: Sequence[int], at: int) -> int:
    """How many of ``tokens``, left to right, ``seq`` has from position ``at`` on."""
    n = 0
    while n < len(tokens) and at + n < len(seq) and tokens[n] == seq[at + n]:
        n += 1
    return n


def outcomes(drafter: Any, prompt_ids: Sequence[int], output_ids: Sequence[int], k_max: int,
             eos_token_id: int | None = None, max_new_tokens: int | None = None) -> Outcomes:
    """For every i < len(output) and K = 0..min(k_max, L - i - 1): what the drafter proposes after
    prompt + output[:i] when asked for K, as (proposed, accepted), accepted = how many of them the output
    confirms, left to right. L is the run's limit, ``max_new_tokens``, for an output that ended with the
    end-of-sequence token before it (the engine lets K reach past the tokens left there: a draft of the
    end-of-sequence token that lands ends the run without a token of the target's), else the output's
    length. Only for a drafter without state beyond the sequence (prompt lookup): a draft model's
    proposals depend on its cache and, sampled, on its generator."""
    if getattr(drafter, "model", None) is not None or getattr(drafter, "reads_features", False):
        raise ValueError(f"hindsight needs a drafter whose proposals follow from the sequence alone "
                         f"(prompt lookup), not '{getattr(drafter, 'name', drafter)}'")
    policy = _greedy_draw(eos_token_id)
    out, seq = list(output_ids), list(prompt_ids) + list(output_ids)
    ended = eos_token_id is not None and bool(out) and out[-1] == eos_token_id
    limit = max(len(out), max_new_tokens or 0) if ended else len(out)
    drafter.start(list(prompt_ids))
    rows: Outcomes = []
    for i in range(len(out)):
        ids = seq[:len(prompt_ids) + i]
        row = []
        for k in range(min(k_max, limit - i - 1) + 1):
            tokens = drafter.propose(ids, k, policy).tokens[:k]
            row.append((len(tokens), _confirmed(tokens, out, i)))
        rows.append(row)
    return rows


def best_schedule(rows: Outcomes, costs: Costs) -> tuple[float, list[int]]:
    """The least total time to emit every token of ``rows``' output, and the K of each iteration on the way
    (the smallest K among equally fast ones): T(i) = min over K of iteration_cost(K) + T(i + accepted + 1),
    T(n) = 0 (an iteration whose drafts confirm the output to its end emits no token of the target's)."""
    n = len(rows)
    best = [0.0] * (n + 1)
    choice = [0] * n
    for i in range(n - 1, -1, -1):
        options = [(iteration_cost(costs, k, proposed) + best[min(n, i + accepted + 1)], k)
                   for k, (proposed, accepted) in enumerate(rows[i])]
        best[i], choice[i] = min(options)
    ks, i = [], 0
    while i < n:
        k = choice[i]
        ks.append(k)
        i += rows[i][k][1] + 1
    return best[0], ks


def replay_best(drafter: Any, prompt_ids: Sequence[int], output_ids: Sequence[int], k_max: int, costs: Costs,
                eos_token_id: int | None = None,
                max_new_tokens: int | None = None) -> tuple[float, list[int]] | None:
    """``best_schedule`` of the drafter's ``outcomes`` on this output: (ms, Ks); None for a drafter it cannot
    replay (a draft model) or an empty output."""
    try:
        rows = outcomes(drafter, prompt_ids, output_ids, k_max, eos_token_id, max_new_tokens)
    except ValueError:
        return None
    return best_schedule(rows, costs) if rows else None


def hindsight_tokens_per_s(drafter: Any, prompt_ids: Sequence[int], output_ids: Sequence[int], k_max: int,
                           costs: Costs, eos_token_id: int | None = None,
                           max_new_tokens: int | None = None) -> tuple[float, list[int]] | None:
    """``replay_best`` as a run's tokens/s (the prefill counted, as ``theory`` prices a run) and its Ks."""
    best = replay_best(drafter, prompt_ids, output_ids, k_max, costs, eos_token_id, max_new_tokens)
    if best is None:
        return None
    total = costs.prefill_ms + best[0]
    return (1000.0 * len(output_ids) / total if total > 0 else float("inf")), best[1]


def hindsight_split(trace: Trace, costs: Costs) -> TimeSplit | None:
    """For a greedy prompt-lookup run (the engine's ``NGramDrafter`` with its defaults): where the time of the
    best K schedule in hindsight would go, priced by ``costs`` (the run's own prefill); None for other runs."""
    cfg = trace.config
    if (cfg.get("drafter") != "ngram" or cfg.get("temperature") != 0 or not trace.new_token_ids
            or len(trace.new_token_ids) > MAX_REPLAY_TOKENS):
        return None
    k_max = min(MAX_K, max([int(cfg.get("k") or 0), *(it.k for it in trace.iterations)]))
    eos = trace.new_token_ids[-1] if trace.finish_reason == "eos" else None   # where the engine cut copies
    rows = outcomes(NGramDrafter(), trace.prompt_ids, trace.new_token_ids, k_max, eos, cfg.get("max_new_tokens"))
    _, ks = best_schedule(rows, costs)
    draft = verify = 0.0
    i = 0
    for k in ks:
        proposed, accepted = rows[i][k]
        draft += costs.draft_cost(proposed, k)
        verify += costs.t_verify(proposed + 1)
        i += accepted + 1
    return TimeSplit(costs.prefill_ms, draft, verify, costs.overhead_ms * len(ks), float(len(rows)))


def priced_ms(trace: Trace, costs: Costs) -> float:
    """The run's decisions (each iteration's K and the drafts it verified) priced by ``costs``."""
    return sum(iteration_cost(costs, it.k, len(it.drafts)) for it in trace.iterations)


def replay_policy(policy: Any, prompt_ids: Sequence[int], output_ids: Sequence[int], costs: Costs,
                  eos_token_id: int | None = None, max_new_tokens: int | None = None) -> tuple[float, list[int]]:
    """A K policy (``kpolicy``) run on prompt lookup's greedy output ``output_ids``, without a model: each
    iteration the policy is told the drafter's outlook and chooses K, the drafter proposes, the output says
    how many drafts it confirms, and the policy observes the iteration with the times of ``costs`` (verify,
    lookup, overhead). Returns the priced ms (``iteration_cost`` per iteration, the prefill not counted, as
    ``best_schedule``) and each iteration's K. A greedy engine run with a fixed or heuristic K makes the same
    decisions; a cost-aware run differs where its measured times lead it elsewhere. ``max_new_tokens``: the
    run's limit, if the output ended (end-of-sequence) before it (the policy plans for the tokens left)."""
    drafter = NGramDrafter()
    drafter.start(list(prompt_ids))
    draw = _greedy_draw(eos_token_id)
    full = list(prompt_ids) + list(output_ids)
    limit = len(prompt_ids) + max(len(output_ids), max_new_tokens or 0)
    seq, total, ks = list(prompt_ids), 0.0, []
    while len(seq) < len(full):
        k, why = policy.choose(limit - len(seq) - 1, drafter.outlook(seq, eos_token_id=eos_token_id))
        tokens = drafter.propose(seq, k, draw).tokens[:k] if k > 0 else []
        accepted = _confirmed(tokens, full, len(seq))
        drafts = [DraftRecord(t, "", 1.0, float(j < accepted), float(j < accepted), None, j < accepted,
                              tested=j <= accepted) for j, t in enumerate(tokens)]
        emitted = full[len(seq):len(seq) + accepted + 1]
        draft_ms = [costs.draft_cost(len(tokens), k)] if k > 0 else []
        policy.observe(IterationRecord(len(ks), len(seq), k, drafts, None, None, emitted, draft_ms,
                                       costs.t_verify(len(tokens) + 1), costs.overhead_ms, k_reason=why))
        total += iteration_cost(costs, k, len(tokens))
        ks.append(k)
        seq += emitted
    return total, ks
