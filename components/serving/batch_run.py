"""A batched run as the session runs it (``session.run_session`` with a batch size above 1): your prompt in row 1
and the other users' requests beside it (``batch.requests.fill_batch``), decoded together by the batched engine
(``batch.engine.stream_batch``), then the batched target-only baseline (``batch.baseline``).

``BatchRun`` has the same parts as ``session.SingleRun``: the rows' token ids, checked when it is made (every
row must fit the target's context, ``limits.check_batch_context`` names the one that does not); ``prepare``, the
cost-aware K policy's batch prices, measured once per server with the models held, before the run's clock
starts (``batch.prices``); the speculative and baseline streams; how the baseline so far goes into the trace
(each row its baseline row, the batch the batched baseline); and ``finish``, each row's intervals and the
pooled speedup (``batch.baseline.finish_batch``).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from specdec_core import SpecConfig, Trace
from specdec_core.batch.baseline import finish_batch, stream_batch_baseline
from specdec_core.batch.engine import batch_generate, stream_batch
from specdec_core.batch.prices import measured_batch_prices
from specdec_core.batch.requests import fill_batch

from components.serving.inputs import batch_prompt_ids, check_prompt
from components.serving.pairs import Pair

PRICES_NOTE = ("Measuring this machine's batch prices for the cost-aware K policy (once per server for this pair "
               "and K cap; about a minute the first time)…")


class BatchRun:
    """One batched run of ``pair``: ``size`` rows, row 1 your ``prompt``."""

    def __init__(self, pair: Pair, prompt: Any, cfg: SpecConfig, chat: bool, size: int) -> None:
        self.pair, self.cfg = pair, cfg
        self.texts = fill_batch(check_prompt(prompt), size)
        self.ids = batch_prompt_ids(pair.target, self.texts, chat, cfg.max_new_tokens)
        self.prices: Any = None
        # the start-up calibration prices single runs: a batch waits only for its first jobs (its own prices are
        # measured in ``prepare``)
        self.calibration_cfg = replace(cfg, k_policy="fixed") if cfg.k_policy == "cost" else cfg

    def prepare(self) -> Iterator[str]:
        """The cost-aware policy's batch prices, measured once per server (the models are held): a note first."""
        if self.cfg.k_policy == "cost":
            yield PRICES_NOTE
            self.prices = measured_batch_prices(self.pair.target.model, self.pair.drafter(), self.cfg,
                                                batch_generate)

    def speculative(self) -> Iterator[Trace]:
        lm = self.pair.target
        return stream_batch(lm.model, self.pair.drafter(), self.ids, self.cfg, lm.tokenizer, texts=self.texts,
                            meta=self.pair.meta, prices=self.prices)

    def baseline(self) -> Iterator[Any]:
        lm = self.pair.target
        return stream_batch_baseline(lm.model, self.ids, self.cfg, lm.tokenizer)

    @staticmethod
    def attach(trace: Trace, base: Any) -> None:
        """The batched baseline so far (each row's result, the batch's) into the trace; None drops it."""
        results, batch = base if base is not None else ([None] * len(trace.rows()), None)
        for row, res in zip(trace.rows(), results):
            row.baseline = res
        trace.batch.baseline = batch

    @staticmethod
    def finish(trace: Trace) -> None:
        rows = trace.rows()
        done = trace.batch.baseline is not None and all(r.baseline is not None for r in rows)
        finish_batch(trace, ([r.baseline for r in rows], trace.batch.baseline) if done else None)


__all__ = ["BatchRun", "PRICES_NOTE"]
