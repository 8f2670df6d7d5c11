"""Learn, the busy-server chapter: the batch size where speculation stops paying on this machine.

The run decodes batches of ``SIZES`` chat requests with the trained feature-reading draft at a fixed K, each beside
the batched target-only baseline in lockstep (``specdec_core.teaching.batches``), and keeps, per batch size, the
pooled speedup with its 95 % interval (a bootstrap over the batch's forwards) as plain numbers (``SizeRow``: what a
class's room keeps). The answer is judged from those intervals alone (``crossover``, ``reveal_busy``: pure).

Why the feature draft on chat requests, K = 3, 48 tokens, B up to 8 (docs/batching.md has the numbers): prompt
lookup on copying requests still paid at B = 8 (its drafts are free and mostly kept: its crossover lies beyond the
sizes a chapter can run in seconds); the feature draft pays alone and its iterations grow dearer with B. With 24
tokens a row the intervals left the crossover undecided in every run measured, with 48 they decided it (about 20 s
on two cores). B = 16 alone would take longer than the rest together, so the sweep stops at 8 (the guess's top
means "8 or more"). The requests are eight on which the draft keeps half or more of its
drafts alone, so the tokens a row keeps per verify stay about the same at every B and the speedup moves with the
forward's cost, not with the mix of requests. The traces keep only what the figures need (``full_trace`` off).
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass, replace
from typing import Any

from components.pages.learn import reveal as rv
from components.pages.learn.basics import later, note
from components.pages.learn.book import Ask, Chapter, Guess, Measured, Step
from components.pages.learn.runs import batch_sweep, config, need
from components.render.batching import LOSES, PAYS, SizeRow, batch_speedup_figure, batch_work_figure
from components.serving.pairs import Pool

SIZES = (1, 2, 4, 8)
K = 3
TOKENS = 48                      # per row; the longer run twice as many
LONGER_TOKENS = 2 * TOKENS
REQUESTS = (                     # chat requests on which the feature draft keeps half or more of its drafts
    "Write a short poem about the sea at night.",
    "Why do we have seasons?",
    "Give three tips for sleeping better.",
    "Explain why the sky is blue.",
    "Explain how bees make honey.",
    "Give me three ideas for a rainy afternoon.",
    "Write a short letter thanking a teacher.",
    "Describe a cat to someone who has never seen one.",
)


# --- the answer, from the intervals alone ------------------------------------------------------------------

@dataclass(frozen=True)
class Crossover:
    """The batch sizes the run allows for the first B where speculation no longer pays: ``low`` … ``high`` (whole
    numbers; ``beyond``: no measured size clearly lost, so ``high``, the largest, stands for "that or more"), and
    how many measured sizes in that stretch the run could not call (``unsure``)."""
    low: int
    high: int
    unsure: int
    beyond: bool

    @property
    def decided(self) -> bool:
        return self.unsure <= 1

    def words(self) -> str:
        if self.beyond and not self.unsure:            # it paid at every size
            return f"still pays at B = {self.high}"
        more = " or more" if self.beyond else ""
        return (f"stops paying at B = {self.high}{more}" if self.low == self.high else
                f"stops paying between B = {self.low} and {self.high}{more}")


def crossover(rows: tuple[SizeRow, ...] | list[SizeRow]) -> Crossover:
    """Where speculation stops paying, as the 95 % intervals place it: after the last batch size that clearly pays
    (before the first that clearly does not), up to the first that clearly does not (or the largest measured, "or
    more", when none does). Sizes between are ones the run could not call."""
    rows = sorted(rows, key=lambda r: r.size)
    if not rows:
        raise ValueError("no batch size was run")
    verdicts = [r.verdict for r in rows]
    first_lose = next((i for i, v in enumerate(verdicts) if v == LOSES), None)
    end = len(rows) if first_lose is None else first_lose
    last_pay = max((i for i in range(end) if verdicts[i] == PAYS), default=None)
    start = 0 if last_pay is None else last_pay + 1
    high = rows[-1].size if first_lose is None else rows[first_lose].size
    low = min(high, 1 if last_pay is None else rows[last_pay].size + 1)
    return Crossover(low, high, end - start, first_lose is None)


def reveal_busy(guess: int, rows: tuple[SizeRow, ...] | list[SizeRow], k: int) -> rv.Answer:
    """The guessed batch size against where the run's intervals place the crossover: right inside it, wrong
    outside, can't tell when two or more measured sizes inside could not be called."""
    rows = sorted(rows, key=lambda r: r.size)
    x = crossover(rows)
    if x.low <= guess <= x.high:
        verdict = rv.RIGHT if x.decided else rv.CANT_TELL
    else:
        verdict = rv.WRONG
    first, last = rows[0], rows[-1]
    why = (f"at B = {first.size} an iteration took {first.iteration_ms / first.step_ms:.2f} × a baseline step and "
           f"gave each row {first.per_row:.2f} tokens (×{first.speedup:.2f}); at B = {last.size} one verify fed "
           f"{last.fed:.0f} tokens (up to {last.size} × {k + 1}), the iteration took "
           f"{last.iteration_ms / last.step_ms:.2f} × the baseline's {last.size}-token step for {last.per_row:.2f} "
           f"tokens a row (×{last.speedup:.2f}). "
           + ("Up to these sizes this machine's forward still had arithmetic to spare. " if x.beyond and not x.unsure
              else "")
           + "While a forward is bound by reading the weights, the drafts ride along almost free; once it is bound by "
           "arithmetic, B × (K + 1) tokens cost nearly K + 1 steps, more than the drafts give back. Serving engines "
           "lower K as the batch fills, down to K = 0.")
    each = "; ".join(f"B = {r.size}: ×{r.speedup:.2f} ({r.interval_text()}, {r.verdict})" for r in rows)
    judged = (f"Each batch size's speedup with its 95 % interval (a bootstrap over the batch's forwards): {each}. "
              "Right for any B after the last size that clearly pays, up to the first that clearly does not; can't "
              "tell when two or more sizes in that stretch hold ×1.")
    label = x.words()
    return rv.answer_html(f"B = {guess}", label, why, verdict, judged,
                          rv.Truth(None, x.low - 0.5, x.high + 0.5, tuple(range(x.low, x.high + 1)), label))


# --- the chapter ----------------------------------------------------------------------------------------------

def _rows(memo: Any) -> list[SizeRow]:
    return [SizeRow(**d) for d in need(memo, "rows")]


def _subtitle(tokens: int) -> str:
    return f"trained draft, K = {K}, greedy, {tokens} tokens a row"


def run_busy(pool: Pool, ask: Ask) -> Step:
    tokens = TOKENS if ask.scale == 1 else LONGER_TOKENS
    t0 = time.monotonic()
    sweep = batch_sweep(pool, REQUESTS, SIZES, replace(config(K, 0.0, tokens), full_trace=False))
    rows = [SizeRow.of(p) for p in sweep.points]
    kept = ", ".join(f"{r.per_row:.2f} at B = {r.size}" for r in rows)
    return Step([batch_work_figure(rows, K, _subtitle(tokens)), later("Measured speedup by batch size")],
                note(html.escape(f"Decoded batches of {', '.join(str(s) for s in SIZES)} requests, {tokens} tokens "
                                 f"per row, each side by side with the batched baseline "
                                 f"({time.monotonic() - t0:.0f} s)."),
                     html.escape(f"Tokens each row kept per verify: {kept}.")),
                memo={"rows": [r.to_dict() for r in rows], "tokens": tokens})


def measure_busy(pool: Pool, memo: Any, ask: Ask) -> Measured:
    rows = _rows(memo)
    x = crossover(rows)
    return Measured([None, batch_speedup_figure(rows, K, (x.low, x.high), _subtitle(need(memo, "tokens")))],
                    tuple(rows))


def judge_busy(guess: Any, rows: Any) -> rv.Answer:
    return reveal_busy(int(guess), rows, K)


BUSY = Chapter(
    "busy", "A busy server: when speculation stops paying",
    "A server decodes many requests at once: a **batch** of B rows shares every forward. Speculation then verifies "
    "B × (K + 1) tokens in one forward where plain decoding feeds B. While a forward is bound by reading the "
    "weights, the extra tokens are nearly free; once it is bound by arithmetic, they cost about what the drafts "
    "save. Serving engines lower K as the batch fills.\n\n"
    f"**Run** decodes batches of B = {', '.join(str(s) for s in SIZES)} chat requests ({TOKENS} tokens each, the "
    f"trained draft, K = {K}, greedy), each size side by side with the batched baseline; the chart shows what one "
    "forward takes. Guess: from which batch size on does speculation stop paying on this machine? Reveal shows "
    "every size's measured speedup with its 95 % interval.",
    Guess(f"the smallest batch size where speculation no longer pays? ({SIZES[-1]} counts as "
          f"“{SIZES[-1]} or more”)", SIZES[0], SIZES[-1], 1),
    run_busy, measure_busy, judge_busy, longer=f"{LONGER_TOKENS} tokens per row instead of {TOKENS}")

__all__ = ["BUSY", "SIZES", "K", "REQUESTS", "Crossover", "crossover", "reveal_busy"]
