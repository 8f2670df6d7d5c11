"""The batched target-only run: every speedup of a batch is measured against it, side by side.

The same rows (row b with seed ``cfg.seed + b``), the same ragged cache and forwards (``BatchTarget``), the same
warping and samplers and the same clocks as the batched speculative loop: one forward per step feeds every active
row its last token, each row draws its next token from its own stream (greedy: the argmax), finished rows leave.
Each row's result is a ``BaselineResult`` (its ``token_ms`` are the steps it took part in; its ``wall_ms`` runs
until it finished); the batch's is a ``BatchBaseline``.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..config import SpecConfig
from ..decoding.record import RunningText, finish_reason
from ..decoding.target import _resolve_eos, normalize_input_ids
from ..sampling import warp_logits
from ..sampling.coupled import make_sampler
from ..stats.intervals import fill_stats
from ..timing import now_ms
from ..trace import BaselineResult, BatchBaseline, Trace
from .target import BatchTarget


def stream_batch_baseline(target: torch.nn.Module, prompts: list[Any], cfg: SpecConfig, tokenizer: Any = None,
                          eos_token_id: int | None = None) -> Iterator[tuple[list[BaselineResult], BatchBaseline]]:
    """Target-only generation of every row at once; yields (each row's result, the batch's) after every step."""
    rows = [normalize_input_ids(p) for p in prompts]
    eos = _resolve_eos(eos_token_id, tokenizer)
    tgt = BatchTarget(target, len(rows))
    device = tgt.device
    samplers = [make_sampler(cfg.sampler, cfg.seed + b, torch.Generator().manual_seed(cfg.seed + b))
                for b in range(len(rows))]
    results = [BaselineResult(new_token_ids=[], text="", token_ms=[], wall_ms=0.0, tokens_per_s=0.0) for _ in rows]
    texts = [RunningText(tokenizer) for _ in rows]
    batch = BatchBaseline(new_tokens=0, wall_ms=0.0, tokens_per_s=0.0, target_forwards=0)
    t_run = t_prev = now_ms(device)
    tgt.forward([ids[:-1] for ids in rows], logits=False)
    active = list(range(len(rows)))
    done = [False] * len(rows)
    try:
        while active:
            logits = tgt.forward([rows[b] for b in active])
            keep = []
            for j, b in enumerate(active):
                lg, res = logits[j][-1], results[b]
                samplers[b].start_iteration(len(res.new_token_ids), len(rows[b]))
                tok = (int(lg.argmax()) if cfg.greedy
                       else int(samplers[b].draw(warp_logits(lg, cfg.temperature, cfg.top_k, cfg.top_p), len(rows[b]))))
                rows[b] = rows[b] + [tok]
                res.new_token_ids.append(tok)
                done[b] = bool(finish_reason([tok], eos, len(res.new_token_ids), cfg.max_new_tokens))
                if not done[b]:
                    keep.append(j)
            t = now_ms(device)
            batch.step_ms.append(t - t_prev)
            batch.step_rows.append(len(active))
            t_prev = t
            for b in active:
                res = results[b]
                res.token_ms.append(batch.step_ms[-1])
                res.wall_ms = t - t_run
                res.tokens_per_s = len(res.new_token_ids) / (res.wall_ms / 1000) if res.wall_ms > 0 else 0.0
                res.target_forwards = tgt.forwards
                if done[b]:
                    res.text = texts[b].final(res.new_token_ids)
                elif cfg.full_trace:
                    res.text = texts[b].update(res.new_token_ids)
            batch.new_tokens = sum(len(r.new_token_ids) for r in results)
            batch.wall_ms, batch.target_forwards = t - t_run, tgt.forwards
            batch.tokens_per_s = batch.new_tokens / (batch.wall_ms / 1000) if batch.wall_ms > 0 else 0.0
            if len(keep) < len(active) and keep:
                tgt.select(keep)
            active = [active[j] for j in keep]
            t_yield = now_ms(device)
            yield results, batch
            paused = now_ms(device) - t_yield  # time the consumer held the generator is not generation time
            t_run += paused
            t_prev += paused
    finally:   # closed early (or failed): the text of what was produced
        for b, res in enumerate(results):
            if not done[b]:
                res.text = texts[b].final(res.new_token_ids)


def batch_baseline(target: torch.nn.Module, prompts: list[Any], cfg: SpecConfig, tokenizer: Any = None,
                   eos_token_id: int | None = None) -> tuple[list[BaselineResult], BatchBaseline]:
    out = None
    for out in stream_batch_baseline(target, prompts, cfg, tokenizer, eos_token_id):
        pass
    assert out is not None
    return out


def attach_batch_baseline(trace: Trace, results: list[BaselineResult], batch: BatchBaseline) -> None:
    """Give each row of a batched trace its baseline row and the batch its baseline; fill every row's speedup and
    interval (``stats.intervals.fill_stats``) and the batch's pooled speedup."""
    for row, res in zip(trace.rows(), results):
        row.baseline = res
        fill_stats(row)
    st = trace.batch.stats
    trace.batch.baseline = batch
    st.speedup = st.tokens_per_s / batch.tokens_per_s if batch.tokens_per_s > 0 else 0.0


def finish_batch(trace: Trace, baseline: tuple[list[BaselineResult], BatchBaseline] | None) -> None:
    """A finished batched run's statistics: with its baseline (each row's result, the batch's) attached, or, without
    one, each row's own (``fill_stats``)."""
    if baseline is not None:
        attach_batch_baseline(trace, *baseline)
        return
    for row in trace.rows():
        fill_stats(row)
