"""Learn, chapters 7–13: practice. What temperature does to acceptance, when speculation pays (α, c, K, the
verify's cost, the same run priced on other hardware), choosing a draft, choosing K, token trees (``trees``), a busy
server (``busy``: the batch size where speculation stops paying), and the pitfalls (a draft as costly as the target;
a mismatched tokenizer or temperature).
"""
from __future__ import annotations

import html
from typing import Any

from specdec_core import Trace
from specdec_core.policy.closed_form import estimate_alpha, estimate_c
from specdec_core.policy.costmodel import predict_speedup
from specdec_core.policy.roofline import gpu_name

from components.pages.learn import reveal as rv
from components.pages.learn.basics import later, note, run_summary
from components.pages.learn.book import Ask, Chapter, Guess, Measured, Step
from components.pages.learn.busy import BUSY
from components.pages.learn.runs import (FEATURE, LONGER, NGRAM, TOKEN_ONLY, compare_drafts, config, need, sweep_k,
                                         trace_run, verify_curve)
from components.pages.learn.trees import TREES
from components.render.cost import forward_cost_figure
from components.render.figures import outcomes_figure, positions_figure, race_figure, theory_figure
from components.render.lab import acceptance_by_temperature_figure, compare_figure, ksweep_figure
from components.render.whatif import whatif_figure, whatif_rows
from components.serving.pairs import EXTRACTIVE_PROMPTS, OPEN_PROMPTS, PAIR_FEATURE, PAIR_NGRAM, PAIR_SELF, Pool

POEM = OPEN_PROMPTS[0]               # open-ended: where the trained draft helps
CODE = EXTRACTIVE_PROMPTS[1]         # rename a variable in a short function: the answer copies the prompt
K_MAX = 6
COSTLY_K = 4                         # chapter 11: the self-draft at this K ...
COSTLY_TOKENS = 60                   # ... over enough tokens for a speedup interval (at least 10 iterations)
TEMPERATURES = (0.3, 0.7, 1.0)       # the first is run, the others revealed


def alpha_c(trace: Trace) -> str:
    a, c = estimate_alpha(trace), estimate_c(trace)
    return html.escape(f"Measured: α̂ = {'–' if a is None else f'{a:.2f}'} (mean min(1, p/q) of the tested drafts), "
                       f"ĉ = {'–' if c is None else f'{c:.3f}'} (draft forward ÷ verify forward), K = "
                       f"{trace.config.get('k')}.")


# --- 6. temperature and acceptance ------------------------------------------------------------------------

def _temperature_rows(pool: Pool, temperature: float, scale: int) -> tuple[float, list[float]]:
    """The α of every tested draft at ``temperature``: the poem, and with a longer run the other open prompts too."""
    alphas: list[float] = []
    for prompt in OPEN_PROMPTS[:scale]:
        alphas += rv.acceptance_row(trace_run(pool, PAIR_FEATURE, prompt, config(4, temperature, 32), baseline=False))[1]
    return temperature, alphas


def run_temperature(pool: Pool, ask: Ask) -> Step:
    trace = trace_run(pool, PAIR_FEATURE, POEM, config(4, TEMPERATURES[0], 32), baseline=False)
    rows = [rv.acceptance_row(trace)]
    if ask.scale > 1:
        rows = [_temperature_rows(pool, TEMPERATURES[0], ask.scale)]
    alphas = rows[0][1]
    return Step([positions_figure(trace), later("Acceptance vs. temperature")],
                note(html.escape(run_summary(trace)),
                     html.escape(f"At T = {TEMPERATURES[0]:g}: mean α {sum(alphas) / max(1, len(alphas)):.0%} over "
                                 f"{len(alphas)} tested drafts" + (f" ({ask.scale} prompts)." if ask.scale > 1 else "."))),
                memo={"rows": rows, "scale": ask.scale})


def measure_temperature(pool: Pool, memo: Any, ask: Ask) -> Measured:
    scale = need(memo, "scale")
    rows = list(need(memo, "rows")) + [_temperature_rows(pool, t, scale) for t in TEMPERATURES[1:]]
    return Measured([None, acceptance_by_temperature_figure(rows)], rows)


def judge_temperature(guess: Any, rows: Any) -> rv.Answer:
    return rv.reveal_temperature(str(guess), rows)


TEMPERATURE = Chapter(
    "temperature", "Does temperature change acceptance?",
    "A rule of thumb says the temperature does not change how often drafts are accepted: both p and q are warmed "
    "alike. Put it to the test. The engine applies the same temperature (and top-k, top-p) to p and q before the "
    "test u < min(1, p/q), as exactness requires.\n\n"
    f"**Run** samples 32 tokens of a poem with the trained draft at T = {TEMPERATURES[0]:g}; the chart shows "
    f"acceptance at each draft position. Guess: at T = {TEMPERATURES[-1]:g}, is acceptance lower, about the same "
    f"(within {rv.SAME_MARGIN:.0%} points), or higher? Reveal runs the same prompt at T = "
    f"{' and '.join(f'{t:g}' for t in TEMPERATURES[1:])} and judges with the 95 % interval of the difference.",
    Guess(f"at T = {TEMPERATURES[-1]:g} acceptance will be…", choices=("lower", "about the same", "higher")),
    run_temperature, measure_temperature, judge_temperature,
    longer=f"{LONGER} prompts at every temperature instead of one")


# --- 7. when it pays ---------------------------------------------------------------------------------------

def run_pays(pool: Pool, ask: Ask) -> Step:
    trace = trace_run(pool, PAIR_FEATURE, POEM, config(4, 0.0, 32 * ask.scale), baseline=True)
    return Step([positions_figure(trace), later("Measured vs. theory")],
                note(html.escape(run_summary(trace)), alpha_c(trace)), memo={"trace": trace})


def measure_pays(pool: Pool, memo: Any, ask: Ask) -> Measured:
    trace = need(memo, "trace")
    return Measured([whatif_figure(trace, whatif_rows(trace, gpu_name())), theory_figure(trace, k_max=K_MAX)],
                    (trace, predict_speedup(trace, flat=True)))


def judge_pays(guess: Any, data: Any) -> rv.Answer:
    return rv.reveal_speedup(float(guess), *data)


PAYS = Chapter(
    "pays", "When it pays: α, c and K",
    "Three numbers decide. **α**: how often a draft is accepted. **c**: a draft forward's cost over a target "
    "forward. **K**: drafts per iteration. An iteration pays K draft forwards and one verify, and emits "
    "(1 − α^(K+1)) / (1 − α) tokens on average, so the closed form predicts a speedup of that over cK + 1 — "
    "*if* a verify costs one target forward. Below the break-even α, speculation loses.\n\n"
    "**Run** writes a short poem with the trained draft (K = 4), then the baseline does; the note gives the run's α̂ and ĉ, "
    "the chart acceptance at each draft position. Guess the measured speedup. Reveal sets it against the closed "
    "form and this CPU's cost model, and prices the same run on other hardware.",
    Guess(f"the measured speedup over the baseline (×)? (within the run's interval or ±{rv.SPEEDUP_TOLERANCE:g} "
          "counts)", 0.25, 3.0, 0.05),
    run_pays, measure_pays, judge_pays, longer=f"{32 * LONGER} tokens instead of 32")


# --- 8. choosing a draft -----------------------------------------------------------------------------------

def run_drafts(pool: Pool, ask: Ask) -> Step:
    sel = compare_drafts(pool, [CODE], config(4, 0.0, 24))
    rows = "; ".join(f"{r.name}: ×{r.mean_speedup:.2f}" for r in sel.ranking)
    return Step([compare_figure(sel), later("On an open-ended prompt")],
                note(html.escape(f"On the copying prompt: {rows}.")), memo={"copy": rows, "scale": ask.scale})


def measure_drafts(pool: Pool, memo: Any, ask: Ask) -> Measured:
    need(memo, "copy")
    sel = compare_drafts(pool, list(OPEN_PROMPTS[:need(memo, "scale")]), config(4, 0.0, 24))
    return Measured([None, compare_figure(sel)],
                    [(r.name, r.mean_speedup, r.mean_acceptance, r.interval) for r in sel.ranking])


def judge_drafts(guess: Any, rows: Any) -> rv.Answer:
    return rv.reveal_draft(str(guess), rows)


DRAFTS = Chapter(
    "drafts", "Choosing a draft",
    "No draft fits every job. **Prompt lookup** copies: it finds the last few tokens earlier in the text and "
    "proposes what followed them; free, and right whenever the answer repeats the prompt. The two **trained "
    "drafts** are small networks that guess any text at a small cost per draft: the *token-only* one sees the "
    "tokens, the *feature-reading* one also reads the target's last hidden state.\n\n"
    "**Run** sets all three against the baseline on a copying prompt (rename a variable in a short function). "
    "Now guess: on an open-ended prompt — a short poem — which wins? Reveal runs it. Any draft must share the "
    "target's tokenizer, not just its vocabulary size: otherwise its token ids mean other words to the target.",
    Guess("on the open-ended prompt, which wins?", choices=(NGRAM, TOKEN_ONLY, FEATURE)),
    run_drafts, measure_drafts, judge_drafts, longer=f"{LONGER} open-ended prompts instead of one")


# --- 9. choosing K -----------------------------------------------------------------------------------------

def run_k(pool: Pool, ask: Ask) -> Step:
    trace = trace_run(pool, PAIR_NGRAM, CODE, config(4, 0.0, 24), baseline=False)
    verify_ms = verify_curve(pool, K_MAX + 1)
    return Step([positions_figure(trace), forward_cost_figure(verify_ms)],
                note(html.escape(run_summary(trace)), alpha_c(trace)), memo={"verify_ms": verify_ms, "scale": ask.scale})


def measure_k(pool: Pool, memo: Any, ask: Ask) -> Measured:
    verify_ms = need(memo, "verify_ms")
    sw = sweep_k(pool, CODE, K_MAX, config(1, 0.0, 24 * need(memo, "scale")))
    return Measured([ksweep_figure(sw), None],
                    ([(r.k, r.tokens_per_s, r.speedup) for r in sw.runs], sw.baseline_tokens_per_s, verify_ms))


def judge_k(guess: Any, data: Any) -> rv.Answer:
    return rv.reveal_best_k(int(guess), *data)


CHOOSE_K = Chapter(
    "k", "Choosing K",
    "More drafts per iteration can mean more tokens per verify, but the j-th draft survives only if every one "
    "before it did (about α^j), and each draft adds its own cost and lengthens the verify.\n\n"
    "**Run** has prompt lookup rewrite a short function at K = 4 — the answer copies the prompt, and its drafts "
    f"cost nearly nothing — and times this device's forward over 1 … {K_MAX + 1} tokens. The charts show acceptance at each "
    f"draft position and that cost curve. Guess the fastest K; Reveal sweeps K = 1 … {K_MAX}, every run side by "
    "side with the baseline. With a flat, GPU-like verify the best K would be larger: the right K depends on the "
    "hardware, not only on α.",
    Guess("the fastest K here?", 1, K_MAX, 1),
    run_k, measure_k, judge_k, longer=f"{24 * LONGER} tokens at every K instead of 24")


# --- 10. pitfalls -------------------------------------------------------------------------------------------

def run_costly(pool: Pool, ask: Ask) -> Step:
    trace = trace_run(pool, PAIR_SELF, POEM, config(COSTLY_K, 0.0, COSTLY_TOKENS * ask.scale), baseline=True)
    return Step([outcomes_figure(trace), later("Race against the baseline")],
                note(html.escape(run_summary(trace)), html.escape(f"Acceptance: {trace.stats.acceptance_rate:.0%}.")),
                memo={"trace": trace})


def measure_costly(pool: Pool, memo: Any, ask: Ask) -> Measured:
    trace = need(memo, "trace")
    return Measured([None, race_figure(trace)], trace)


def judge_costly(guess: Any, trace: Any) -> rv.Answer:
    return rv.reveal_costly_draft(str(guess), trace)


PITFALLS = Chapter(
    "pitfalls", "Pitfalls",
    "Rules of thumb say speculation always helps. Test one: here the target **drafts for itself**, so q = p and "
    "every draft is accepted, as the chart shows. **Run**, then guess: faster or slower than the baseline?\n\n"
    "Two more classic mistakes. A draft **sampled at another temperature** than the q the rule uses biases the "
    "output (chapter 5's bug). A draft with **another tokenizer** proposes ids that mean other words to the "
    "target, even with a vocabulary of the same size; the app refuses such pairs, naming the check they fail "
    "(the Draft comparison tab shows one).",
    Guess("with a draft as costly as the target, speculation is…", choices=("faster", "slower")),
    run_costly, measure_costly, judge_costly, longer=f"{COSTLY_TOKENS * LONGER} tokens instead of {COSTLY_TOKENS}")


CHAPTERS = (TEMPERATURE, PAYS, DRAFTS, CHOOSE_K, TREES, BUSY, PITFALLS)

__all__ = ["CHAPTERS", "TEMPERATURE", "PAYS", "DRAFTS", "CHOOSE_K", "PITFALLS"]
