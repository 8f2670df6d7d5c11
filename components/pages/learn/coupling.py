"""Learn, the coupled chapter: same seed, same text? The baseline and two different drafts (the trained
feature-reading draft and prompt lookup) sample the same prompt with the same seed, first under the standard
rule, then under the coupled one (noise keyed by seed and position, ``specdec_core.sampling.coupled``); the answer is
whether the three texts match, with the acceptance each rule paid, from those runs.
"""
from __future__ import annotations

import html
from typing import Any

from specdec_core import Trace

from components.pages.learn import reveal as rv
from components.pages.learn.basics import later, note, quoted
from components.pages.learn.book import Ask, Chapter, Guess, Measured, Step
from components.pages.learn.runs import FEATURE, NGRAM, config, need, trace_run
from components.render.figures import race_figure
from components.render.lab import acceptance_by_rule_figure
from components.serving.pairs import OPEN_PROMPTS, PAIR_FEATURE, PAIR_NGRAM, Pool

K = 4
TEMPERATURE = 0.8
TOKENS = 24
SEED = 7
POEM = OPEN_PROMPTS[0]


def _runs(pool: Pool, sampler: str) -> tuple[Trace, Trace]:
    """(the feature draft's run with its baseline, prompt lookup's run), same prompt, seed and rule."""
    cfg = config(K, TEMPERATURE, TOKENS, seed=SEED, sampler=sampler)
    return (trace_run(pool, PAIR_FEATURE, POEM, cfg, baseline=True),
            trace_run(pool, PAIR_NGRAM, POEM, cfg, baseline=False))


def _texts(feature: Trace, lookup: Trace) -> str:
    return ("The baseline (target alone):" + quoted(feature.baseline.text) + f"With {FEATURE}:" + quoted(feature.text)
            + f"With {NGRAM}:" + quoted(lookup.text))


def run_coupling(pool: Pool, ask: Ask) -> Step:
    feature, lookup = _runs(pool, "standard")
    return Step([race_figure(feature), later("Acceptance under each rule")],
                note(html.escape(f"Standard rule, T = {TEMPERATURE:g}, seed {SEED}, {TOKENS} tokens each."),
                     _texts(feature, lookup)),
                memo={"standard": (feature, lookup)})


def measure_coupling(pool: Pool, memo: Any, ask: Ask) -> Measured:
    standard = need(memo, "standard")
    coupled = _runs(pool, "coupled")
    return Measured([None, acceptance_by_rule_figure([(FEATURE, standard[0], coupled[0]),
                                                      (NGRAM, standard[1], coupled[1])])], (standard, coupled))


def judge_coupling(guess: Any, data: Any) -> rv.Answer:
    standard, coupled = data
    return rv.reveal_coupled(str(guess), standard, coupled).plus("<p>Under the coupled rule:</p>" + _texts(*coupled))


COUPLING = Chapter(
    "coupling", "Same seed, same text?",
    "Greedy speculation writes the baseline's text. Sampling keeps the target's *distribution* but not its draws: the "
    "standard rule spends its random numbers on u and the residual, so the same seed writes another sample.\n\n"
    "A **coupled** rule fixes that. At each position t, noise keyed by (seed, t) picks the target's own sample — the "
    "token with the largest p ÷ noise — and the draft proposes its largest q ÷ the *same* noise. A draft is kept while "
    "it equals the target's token; at the first that does not, the target's token is written. Every token is the "
    "target's own sample, whatever the draft.\n\n"
    f"**Run** samples {TOKENS} tokens at T = {TEMPERATURE:g}, seed {SEED}: the baseline, the trained draft and prompt "
    "lookup, with the standard rule. Guess what the coupled rule writes.",
    Guess("with the coupled rule, the baseline's and the two drafts' texts are…",
          choices=("all three identical", "different")),
    run_coupling, measure_coupling, judge_coupling)

__all__ = ["COUPLING"]
