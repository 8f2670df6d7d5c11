"""The batched speculative loop: B sequences, one draft pass and ONE target verify per iteration.

Row b runs with seed ``cfg.seed + b`` (its own generator, sampler and draft policy), so row 0 is the single run
with the same settings and any row can be replayed alone. One iteration, in order:
 0. K      - the batch's K policy chooses one K for the iteration from the batch size (``BatchKPolicy``); each
             row asks for at most what it has left;
 1. draft  - the batched drafter proposes for every row in one pass (``drafters``): each row's drafts and the
             q each was drawn from, from its own random stream;
 2. target - ONE target forward over every row's unseen tokens and drafts (ragged: ``models.ragged_cache``)
             gives each row its n_b + 1 rows of logits (and a feature-reading draft its features);
 3. verify - each row alone, by the single-sequence rule (``decoding.verify``, or ``verify_coupled``), with its
             own uniforms;
 4. rollback - each row's caches cut to its own accepted prefix (the drafter absorbs the new token next time);
 5. record - each row's iteration appended to its own trace, the shared forwards to the batch's record; rows
             that finished leave the batch. The streaming form yields row 0's trace (``Trace.batch`` holds the
             rest) here.
Token trees stay single-row (``decoding``): a batch drafts chains.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..config import SpecConfig
from ..decoding.coupled_verify import verify_coupled
from ..decoding.record import (RunningText, Step, add_iteration, cut_at_eos, finish_reason, new_records,
    timed_iteration, token_texts)
from ..decoding.target import _resolve_eos, as_drafter, normalize_input_ids
from ..decoding.verify import Verdict, verify
from ..drafters.base import DraftPolicy
from ..policy.batch_cost import BatchKPolicy, make_batch_k_policy
from ..policy.roofline import shape_meta
from ..sampling import Warping
from ..sampling.coupled import CoupledSampler, Sampler, make_sampler
from ..timing import now_ms
from ..trace import BatchForward, BatchRecord, Trace
from .drafters import BatchDrafter, batch_drafter
from .prices import measured_batch_prices
from .target import BatchTarget


@dataclass
class Row:
    """One sequence of the batch."""
    index: int                      # its row in the trace (0: the trace itself)
    ids: list[int]                  # prompt + generated
    prompt_len: int
    gen: torch.Generator
    sampler: Sampler
    policy: DraftPolicy
    trace: Trace
    text: RunningText
    done: str = ""                  # why it finished ("eos", "length"); "" while in the batch


def stream_batch(target: torch.nn.Module, draft: Any, prompts: list[Any], cfg: SpecConfig, tokenizer: Any = None,
                 eos_token_id: int | None = None, *, bugs: InjectedBugs = NO_BUGS, texts: list[str] | None = None,
                 meta: dict | None = None, prices: Any = None) -> Iterator[Trace]:
    """Batched speculative decoding of ``prompts`` (token ids each), yielding row 0's growing Trace (its
    ``batch`` holds the other rows and the shared forwards) after every iteration. ``prices``: the batch's
    ``BatchPrices`` (or a trace's ``batch_calibration``) instead of this process's measured ones."""
    if cfg.tree_nodes:
        raise ValueError("token trees run one sequence at a time: a batch drafts chains (tree nodes 0)")
    rows_ids = [normalize_input_ids(p) for p in prompts]
    if not rows_ids:
        raise ValueError("a batch needs at least one prompt")
    single = as_drafter(draft, target)
    drafter = batch_drafter(single)
    eos = _resolve_eos(eos_token_id, tokenizer)
    tgt = BatchTarget(target, len(rows_ids), keep_features=drafter.reads_features)
    config = {**cfg.trace_dict(), "drafter": getattr(single, "name", type(single).__name__),
              "device": str(tgt.device), "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
              "batch_size": len(rows_ids), **shape_meta(target, single), **(meta or {})}
    rows = [_row(b, ids, cfg, config, eos, bugs, tokenizer, texts[b] if texts else "")
            for b, ids in enumerate(rows_ids)]
    if cfg.k_policy == "cost" and prices is None:   # measured once per process, before the clock starts
        prices = measured_batch_prices(target, single, cfg, batch_generate)
    k_policy = make_batch_k_policy(cfg, target, single, prices)
    head = rows[0].trace
    head.batch = BatchRecord(size=len(rows), rows=[r.trace for r in rows[1:]],
                             prices=k_policy.prices.to_dict() if k_policy.prices is not None else None)
    head.calibration = k_policy.calibration
    text = token_texts(tokenizer)
    device, warping = tgt.device, Warping(cfg.temperature, cfg.top_k, cfg.top_p)
    t_run = now_ms(device)
    _prefill(tgt, drafter, rows)
    head.batch.stats.prefill_ms = now_ms(device) - t_run
    for r in rows:
        r.trace.stats.prefill_ms = head.batch.stats.prefill_ms
    active = list(rows)
    try:
        while active:
            # 0. one K for the batch, priced at its size; each row clipped to what it has left
            left = [cfg.max_new_tokens - (len(r.ids) - r.prompt_len) for r in active]
            looks = drafter.outlooks([r.ids for r in active], eos) if k_policy.reads_outlooks else None
            k, k_reason = k_policy.choose(len(active), max(left) - 1, looks)
            ks = [max(0, min(k, n - 1)) for n in left]
            t_iter = now_ms(device)
            for r in active:
                r.sampler.start_iteration(len(r.trace.iterations), len(r.ids))
            # 1. draft: one pass for every row
            bp = drafter.propose([r.ids for r in active], ks, [r.policy.at(len(r.ids)) for r in active])
            # 2. ONE target forward over every row's unseen tokens + drafts
            t_v = now_ms(device)
            logits = tgt.forward([r.ids for r in active], [p.tokens for p in bp.rows])
            verify_ms = now_ms(device) - t_v
            if drafter.reads_features:
                for j, feats in enumerate(tgt.features):
                    drafter.observe_features(j, tgt.features_from[j], feats)
            # 3. verify each row with its own randomness
            verdicts = _verify_rows(active, logits, bp.rows, warping, bugs, cfg.full_trace)
            # 4. rollback: each row's caches to its own accepted prefix
            emitted = [cut_at_eos(v.emitted, eos) for v in verdicts]
            valid = [min(len(r.ids) + v.n_accepted, len(r.ids) + len(e) - 1)
                     for r, v, e in zip(active, verdicts, emitted)]
            tgt.rollback(valid, one_crop=bugs.batch_one_crop)
            drafter.rollback(valid)
            # 5. record every row, then the shared forwards; finished rows leave
            t_end = now_ms(device)
            for r, v, e, prop, kb in zip(active, verdicts, emitted, bp.rows, ks):
                drafts, resampled, bonus = new_records(v, prop.tokens, e, text, cfg.full_trace)
                step = Step(prop=prop, verify_ms=verify_ms, n_accepted=v.n_accepted, emitted=e, drafts=drafts,
                            resampled=resampled, bonus=bonus)
                it = timed_iteration(r.trace, step, start_len=len(r.ids), k=kb, k_reason=k_reason, t_iter=t_iter,
                                     t_run=t_run, t_end=t_end)
                add_iteration(r.trace, it, v.n_accepted, prop.forwards, tgt.forwards, t_end - t_run)
                r.ids = r.ids + e
                r.done = finish_reason(e, eos, len(r.ids) - r.prompt_len, cfg.max_new_tokens)
                r.trace.finish_reason = r.done
                if r.done:
                    r.trace.text = r.text.final(r.trace.new_token_ids)
                elif cfg.full_trace:   # the text as it grows (else decoded once, at the end)
                    r.trace.text = r.text.update(r.trace.new_token_ids)
            k_policy.observe([r.trace.iterations[-1] for r in active])
            head.batch.forwards.append(BatchForward(
                index=len(head.batch.forwards), rows=[r.index for r in active], k=k,
                fed=sum(len(p.tokens) for p in bp.rows) + len(active), draft_ms=bp.step_ms, verify_ms=verify_ms,
                other_ms=max(0.0, t_end - t_iter - sum(bp.step_ms) - verify_ms), t_start_ms=t_iter - t_run,
                k_reason=k_reason, tokens=sum(len(e) for e in emitted)))
            _pool(head, rows, tgt.forwards, bp.forwards, t_end - t_run)
            keep = [j for j, r in enumerate(active) if not r.done]
            if len(keep) < len(active) and keep:
                tgt.select(keep)
                drafter.select(keep)
            active = [active[j] for j in keep]
            t_yield = now_ms(device)
            yield head
            t_run += now_ms(device) - t_yield  # time the consumer held the generator is not generation time
    finally:   # closed early (or failed): the text of what was produced
        for r in rows:
            if not r.done:
                r.trace.text = r.text.final(r.trace.new_token_ids)


def _row(b: int, ids: list[int], cfg: SpecConfig, config: dict, eos: int | None, bugs: InjectedBugs,
         tokenizer: Any, prompt: str) -> Row:
    seed = cfg.seed + b
    gen = torch.Generator().manual_seed(seed)
    sampler = make_sampler(cfg.sampler, seed, gen, bugs)
    policy = DraftPolicy(cfg.temperature, cfg.top_k, cfg.top_p, gen, eos, bugs, raw_probs=cfg.full_trace,
                         confidence_stop=cfg.confidence_stop, sampler=sampler)
    trace = Trace(config={**config, "seed": seed}, prompt=prompt, prompt_ids=list(ids))
    return Row(index=b, ids=list(ids), prompt_len=len(ids), gen=gen, sampler=sampler, policy=policy, trace=trace,
               text=RunningText(tokenizer))


def _prefill(tgt: BatchTarget, drafter: BatchDrafter, rows: list[Row]) -> None:
    """The target's cache gets all but the last prompt token of every row, in ONE forward; the drafter starts
    (a model draft fills its cache on its first draft step)."""
    drafter.start([r.ids for r in rows])
    tgt.forward([r.ids[:-1] for r in rows], logits=False)
    if drafter.reads_features:
        for j, feats in enumerate(tgt.features):
            if feats is not None and feats.shape[0]:
                drafter.observe_features(j, tgt.features_from[j], feats)
    for r in rows:
        r.trace.stats.target_forwards = tgt.forwards


def _verify_rows(rows: list[Row], logits: list[torch.Tensor], props: list[Any], warping: Warping,
                 bugs: InjectedBugs, show: bool) -> list[Verdict]:
    """Step 3 for each row: the standard rule with the row's own generator, or the coupled rule with its keyed
    noise. The ``batch_shared_uniforms`` bug hands every row the first row's random stream."""
    shared = rows[0].gen.get_state() if bugs.batch_shared_uniforms else None
    out = []
    for r, lg, prop in zip(rows, logits, props):
        noise = _noise(r, len(r.ids), lg.shape[-1], warping, lg.device)
        if noise is not None:
            out.append(verify_coupled(lg, prop, warping, noise, bugs, show=show))
            continue
        if shared is not None:
            r.gen.set_state(shared)
        out.append(verify(lg, prop, warping, r.gen, bugs, show=show))
    return out


def _noise(r: Row, start: int, vocab_size: int, warping: Warping, device: torch.device
           ) -> Callable[[int], torch.Tensor] | None:
    """The row's keyed noise by offset from ``start`` under coupled sampling above temperature 0, else None."""
    sampler = r.sampler
    if not isinstance(sampler, CoupledSampler) or warping.greedy:
        return None
    return lambda offset: sampler.noise(start + offset, vocab_size, device)


def _pool(head: Trace, rows: list[Row], target_forwards: int, draft_forwards: int, wall_ms: float) -> None:
    """The batch's pooled stats from its rows' (each row's own are kept by ``add_iteration``)."""
    st = head.batch.stats
    row_stats = [r.trace.stats for r in rows]
    st.new_tokens = sum(s.new_tokens for s in row_stats)
    st.iterations = len(head.batch.forwards)
    st.row_iterations = sum(s.iterations for s in row_stats)
    st.drafted = sum(s.drafted for s in row_stats)
    st.accepted = sum(s.accepted for s in row_stats)
    st.acceptance_rate = st.accepted / st.drafted if st.drafted else 0.0
    st.mean_acceptance_length = st.new_tokens / st.row_iterations if st.row_iterations else 0.0
    st.target_forwards = target_forwards
    st.draft_forwards += draft_forwards
    st.wall_ms = wall_ms
    st.tokens_per_s = st.new_tokens / (wall_ms / 1000) if wall_ms > 0 else 0.0


def batch_generate(target: torch.nn.Module, draft: Any, prompts: list[Any], cfg: SpecConfig, tokenizer: Any = None,
                   eos_token_id: int | None = None, *, bugs: InjectedBugs = NO_BUGS, texts: list[str] | None = None,
                   meta: dict | None = None, on_iteration: Callable[[Trace], None] | None = None,
                   prices: Any = None) -> Trace:
    """Run the batch to the end and return row 0's Trace with its ``batch`` (``on_iteration`` sees it grow)."""
    trace = None
    for trace in stream_batch(target, draft, prompts, cfg, tokenizer, eos_token_id, bugs=bugs, texts=texts,
                              meta=meta, prices=prices):
        if on_iteration is not None:
            on_iteration(trace)
    assert trace is not None
    return trace


__all__ = ["stream_batch", "batch_generate", "BatchKPolicy"]
