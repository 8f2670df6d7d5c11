"""``python -m specdec_core --batch B``: your prompt in row 1 and B − 1 other users' requests
(``batch.requests.fill_batch``) decoded together by the batched engine, then with ``--baseline`` the batched
target-only run. ``batch_lines`` says, for each row and pooled, the two acceptance figures engines report under
names users confuse: the **per-draft acceptance rate** (accepted ÷ drafted) and the **mean acceptance length**
(tokens emitted per target forward, the bonus or resampled token counted); then the pooled measured speedup and
whether every row's text equals its baseline row. ``--json`` writes the "specdec-trace/2" trace."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import limits
from ..config import SpecConfig
from ..trace import Trace
from .lines import different_draws, pair_line

RATE = "per-draft acceptance rate"
LENGTH = "mean acceptance length"
FINISHED = {"eos": "end of sequence", "length": "max new tokens reached"}


def batch_number(raw: str) -> Any:
    """``--batch`` as typed: an integer, else a decimal, else the text (``limits.check_batch`` refuses 2.5 and
    "abc" in its own words, as the app's entrances do)."""
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def batch_prompts(args: argparse.Namespace, cfg: SpecConfig, target: Any) -> tuple[list[str], list[list[int]]]:
    """The batch's rows (``args.prompt`` then ``args.batch`` - 1 other users' requests) and their token ids, every
    row checked against the target's context (ValueError naming the row)."""
    from ..batch.requests import fill_batch
    from ..models.loading import encode_prompt
    texts = fill_batch(args.prompt, args.batch)
    ids = [encode_prompt(target.tokenizer, t, chat=not args.raw) for t in texts]
    limits.check_batch_context([len(i) for i in ids], cfg.max_new_tokens, limits.context_length(target.model))
    return texts, ids


def run_batch(args: argparse.Namespace, cfg: SpecConfig, target: Any, drafter: Any, texts: list[str],
              ids: list[list[int]]) -> Trace:
    """The batched run of the rows ``texts`` (token ids ``ids``), then with ``args.baseline`` the batched baseline
    (each row's intervals and the pooled speedup filled in)."""
    from ..batch.baseline import batch_baseline, finish_batch
    from ..batch.engine import batch_generate
    if cfg.k_policy == "cost":
        print("measuring this machine's batch prices for the cost-aware K policy (once per process; about a "
              "minute)…", file=sys.stderr, flush=True)
    trace = batch_generate(target.model, drafter, ids, cfg, target.tokenizer, texts=texts,
                           meta={"target": target.label, "draft": args.draft})
    finish_batch(trace, batch_baseline(target.model, ids, cfg, target.tokenizer) if args.baseline else None)
    return trace


def _same(row: Trace) -> bool:
    return row.baseline is not None and row.baseline.new_token_ids == row.new_token_ids


def _rate(accepted: int, drafted: int) -> str:
    return f"{100 * accepted / drafted:.1f} % ({accepted}/{drafted})" if drafted else "– (nothing drafted)"


def batch_texts(trace: Trace) -> list[str]:
    """Every row's generated text under a header naming the row and its request."""
    out = []
    for b, row in enumerate(trace.rows()):
        who = "your prompt" if b == 0 else f"another user's request: {row.prompt!r}"
        out += [f"[row {b + 1} · {who}]", row.text]
    return out


def batch_lines(trace: Trace, settings: str) -> list[str]:
    """Each row's and the pooled figures, both acceptance names, the ``settings`` line, then times, the pooled
    speedup and whether every row equals its baseline row."""
    batch, c = trace.batch, trace.config
    st, base = batch.stats, batch.baseline
    lines = [pair_line(c),
             f"batch: {batch.size} rows (row 1 your prompt, the rest other users' requests), {st.iterations} batch "
             "iterations, each one draft pass and ONE target verify for every row still running",
             f"{RATE} = accepted ÷ drafted; {LENGTH} = tokens emitted per target forward (the bonus or resampled "
             "token counted)"]
    for b, row in enumerate(trace.rows()):
        rs = row.stats
        same = "" if row.baseline is None else f", identical to its baseline row: {'yes' if _same(row) else 'no'}"
        lines.append(f"row {b + 1}{' (yours)' if b == 0 else ''}: {rs.new_tokens} tokens "
                     f"({FINISHED.get(row.finish_reason, row.finish_reason)}), {RATE} {_rate(rs.accepted, rs.drafted)}, "
                     f"{LENGTH} {rs.mean_tokens_per_iteration:.2f}{same}")
    lines += [f"pooled: {st.new_tokens} tokens, {RATE} {_rate(st.accepted, st.drafted)}, {LENGTH} "
              f"{st.mean_acceptance_length:.2f}; target forwards {st.target_forwards}, draft forwards {st.draft_forwards}",
              settings,
              f"speculative: {st.wall_ms:.0f} ms, {st.tokens_per_s:.2f} tokens/s (all rows, measured)"]
    if base is not None:
        same = sum(_same(row) for row in trace.rows())
        lines += [f"baseline:    {base.wall_ms:.0f} ms, {base.tokens_per_s:.2f} tokens/s (batched, target only, "
                  f"target forwards {base.target_forwards}, measured)",
                  f"pooled speedup: ×{st.speedup:.2f}" if st.speedup > 0 else "pooled speedup: n/a",
                  f"every row identical to its baseline row: {'yes' if same == batch.size else 'no'} "
                  f"({same} of {batch.size})" + different_draws(same == batch.size, c)]
    return lines


__all__ = ["batch_number", "batch_prompts", "run_batch", "batch_lines", "batch_texts"]
