"""Learn, chapters 1–5: the mechanism. One token per forward; draft, then verify in one forward; greedy
keeps the baseline's text; sampling accepts with min(1, p/q) and replaces from norm(max(0, p − q)); and
why that is exactly the target's distribution (then one bug that breaks it).

Each chapter's ``run`` and ``reveal`` use the app's own runs (``runs``) and figure builders; the answers
are ``reveal``'s pure functions of what the run recorded.
"""
from __future__ import annotations

import html
from typing import Any

from specdec_core import Trace

from components.pages.learn import reveal as rv
from components.pages.learn.book import Ask, Chapter, Guess, Setting, Step
from components.pages.learn.runs import BUGS, LAB_RUNS, config, exactness, forward_costs, need, trace_run
from components.render.anatomy import anatomy_figure
from components.render.base import empty_figure, instructive_index
from components.render.cost import baseline_forwards_figure, forward_cost_figure
from components.render.figures import outcomes_figure, race_figure, residual_figure, timeline_figure
from components.render.lab import exactness_figure
from components.serving.messages import page_error
from components.serving.pairs import OPEN_PROMPTS, PAIR_FEATURE, Pool

FORWARD_N = 8           # chapter 1 asks for the cost of a forward over this many tokens
POEM = OPEN_PROMPTS[0]
FACTS = OPEN_PROMPTS[1]


def later(title: str) -> Any:
    """The figure slot the reveal fills: blank, saying so."""
    return empty_figure(title, "Make your guess, then press Reveal: the answer is drawn here.")


def run_summary(trace: Trace, verdicts: bool = True) -> str:
    """The run in a sentence; ``verdicts=False`` leaves out how many drafts were accepted (before a Reveal that
    asks about it)."""
    s = trace.stats
    tested = sum(d.tested for it in trace.iterations for d in it.drafts)
    kept = (f", {s.accepted} of the {tested} tested drafts accepted ({s.drafted} drafted; those after a rejection "
            "are not tested)" if verdicts else f", {s.drafted} drafts proposed")
    return (f"{s.new_tokens} tokens in {s.iterations} iterations ({s.target_forwards} target forwards, prefill "
            f"included){kept}.")


def quoted(text: str) -> str:
    return f'<blockquote class="sd-learn-text-out">{html.escape(text.strip()) or "(nothing)"}</blockquote>'


def note(*parts: str) -> str:
    return '<div class="sd-learn-note">' + "".join(f"<p>{p}</p>" for p in parts) + "</div>"


def pick(trace: Trace) -> int:
    """The iteration a chapter shows: the one a finished run opens on (its first rejection, else its first drafts)."""
    i = instructive_index(trace)
    if i is None or not rv.iteration(trace, i).drafts:
        raise page_error("The draft proposed nothing in this run; press Run again.")
    return i


# --- 1. one token per forward ------------------------------------------------------------------------------

def run_forwards(pool: Pool, ask: Ask) -> Step:
    token_ms, verify_ms = forward_costs(pool, POEM)
    return Step([baseline_forwards_figure(token_ms), later("One forward over n tokens")],
                note(html.escape(f"The baseline made {len(token_ms)} tokens with {len(token_ms)} target forwards. "
                                 f"One forward over 1 … {len(verify_ms)} new tokens was timed too.")),
                memo={"verify_ms": verify_ms})


def reveal_forwards(pool: Pool, guess: Any, memo: Any, ask: Ask) -> Step:
    verify_ms = need(memo, "verify_ms")
    return Step([None, forward_cost_figure(verify_ms)], answer=rv.reveal_forward_cost(guess, verify_ms, FORWARD_N))


FORWARDS = Chapter(
    "forward", "One token per forward",
    "A language model writes **one token per forward pass**: each token depends on the one before, so the target "
    "runs once for every token it writes (p is its distribution over the next token). **Run** times the bundled "
    "target generating alone — the *baseline* — and then one forward over 1, 2, … 16 new tokens at once.\n\n"
    "On a GPU a forward is limited by reading the weights from memory, once per forward however many tokens it "
    "takes, so a forward over a few tokens costs about as much as over one. That spare capacity is what "
    "speculative decoding spends. A CPU has far less to spare: what does a forward over several tokens cost here?",
    Guess(f"one forward over {FORWARD_N} tokens costs how many one-token forwards here? (within "
          f"{rv.FORWARD_TOLERANCE:.0%} counts)", 1.0, 8.0, 0.25),
    run_forwards, reveal_forwards)


# --- 2. draft, then verify in one forward -----------------------------------------------------------------

def run_anatomy(pool: Pool, ask: Ask) -> Step:
    trace = trace_run(pool, PAIR_FEATURE, POEM, config(4, 0.0, 24), baseline=False)
    i = pick(trace)
    return Step([anatomy_figure(trace, i, stage=1, narrow=ask.narrow), timeline_figure(trace, verdicts=False)],
                note(html.escape(run_summary(trace, verdicts=False)), f"Shown: iteration {i + 1}, its drafts and their q."),
                memo={"trace": trace, "index": i})


def reveal_anatomy(pool: Pool, guess: Any, memo: Any, ask: Ask) -> Step:
    trace, i = need(memo, "trace"), need(memo, "index")
    return Step([anatomy_figure(trace, i, narrow=ask.narrow), None], answer=rv.reveal_kept(int(guess), trace, i))


ANATOMY = Chapter(
    "anatomy", "Draft, then verify in ONE forward",
    "A small **draft** model proposes K tokens, one after another, each with its probability **q**. The target then "
    "checks all K in **one** forward pass over them, which gives **p** at every position at once: one target "
    "forward can now yield several tokens.\n\n"
    "**Run** writes 24 tokens with the trained draft (K = 4, greedy). The timeline shows, per iteration, K short "
    "draft forwards and one verify forward. The anatomy stops at step ①: the drafts (greedy: each is the draft's "
    "top choice, so its warped q is 1). The target keeps "
    "drafts from the left while they pass its test and stops at the first that fails; the same forward then "
    "supplies the next token. How many of these drafts will it keep?",
    Guess("how many of these drafts will the target keep?", 0, 4, 1),
    run_anatomy, reveal_anatomy)


# --- 3. greedy: the baseline's text ----------------------------------------------------------------------

def run_greedy(pool: Pool, ask: Ask) -> Step:
    temperature = 0.0 if ask.setting is None else float(ask.setting)
    trace = trace_run(pool, PAIR_FEATURE, POEM, config(4, temperature, 32), baseline=True)
    return Step([outcomes_figure(trace), later("Race against the baseline")],
                note(html.escape(run_summary(trace)), "The speculative text:" + quoted(trace.text)),
                memo={"trace": trace})


def reveal_greedy(pool: Pool, guess: Any, memo: Any, ask: Ask) -> Step:
    trace = need(memo, "trace")
    answer = rv.reveal_identical(str(guess), trace) + "<p>The baseline's text:</p>" + quoted(trace.baseline.text)
    return Step([None, race_figure(trace)], answer=answer)


GREEDY = Chapter(
    "greedy", "Greedy: the baseline's text, with fewer forwards",
    "At temperature 0 (**greedy**) the target always takes its most likely token, argmax p. A draft passes only if "
    "it *is* that token; at the first that is not, the target's own choice takes its place, and the drafts after "
    "it are dropped. So every token written is one the target would have picked.\n\n"
    "Pick greedy or sampling and **Run**: the trained draft writes 32 tokens, then the baseline does, with the same "
    "seed. The chart shows what each iteration kept. Will the speculative text be identical to the baseline's?",
    Guess("the speculative text and the baseline's are…", choices=("identical", "different")),
    run_greedy, reveal_greedy,
    Setting("decoding", (("greedy (temperature 0)", 0.0), ("sampling (temperature 1)", 1.0)), 0.0))


# --- 4. sampling: α = min(1, p/q) and the residual --------------------------------------------------------

def run_sampling(pool: Pool, ask: Ask) -> Step:
    trace = trace_run(pool, PAIR_FEATURE, FACTS, config(4, 1.0, 24), baseline=False)
    asked = rv.alpha_question(trace)
    if asked is None:
        raise page_error("The draft proposed nothing in this run; press Run again.")
    i, j = asked
    d = rv.iteration(trace, i).drafts[j]
    return Step([anatomy_figure(trace, i, stage=2, narrow=ask.narrow), later("The residual at the rejection")],
                note(html.escape(run_summary(trace, verdicts=False)),
                     html.escape(f"Shown: iteration {i + 1} up to step ②, q and p of each draft. The question: "
                                 f"α for draft {j + 1}, {rv.shown(d.text)}.")),
                memo={"trace": trace, "index": i, "draft": j})


def reveal_sampling(pool: Pool, guess: Any, memo: Any, ask: Ask) -> Step:
    trace, i, j = need(memo, "trace"), need(memo, "index"), need(memo, "draft")
    return Step([anatomy_figure(trace, i, narrow=ask.narrow), residual_figure(trace, i)],
                answer=rv.reveal_alpha(float(guess), trace, i, j))


SAMPLING = Chapter(
    "sampling", "Sampling: accept with probability min(1, p/q)",
    "When sampling, the draft draws token x from q, and the target accepts it with probability "
    "**α = min(1, p(x)/q(x))**: draw u uniformly from [0, 1), accept iff u < α. A token the draft over-proposes "
    "(q > p) is thinned down to p; one it under-proposes (q ≤ p) always passes. At the first rejection the "
    "replacement is drawn from the **residual norm(max(0, p − q))**: the probability the draft left out.\n\n"
    "**Run** samples 24 tokens at temperature 1 with the trained draft. The anatomy stops at step ②: q and p of "
    "each draft. Work out α for the draft the note names, then reveal the test, the emitted tokens and the residual.",
    Guess(f"α = min(1, p/q) for the draft named above? (within ±{rv.ALPHA_TOLERANCE:g} counts)", 0.0, 1.0, 0.01),
    run_sampling, reveal_sampling)


# --- 5. exactly the target's distribution -----------------------------------------------------------------

def lab_note(result: Any) -> str:
    c = result.comparison
    return html.escape(f"{result.outcomes.n_runs:,} runs: total variation {c.tv:.3f} from p (an exact sampler at "
                       f"this N: about {c.tv_noise:.3f}); verdict: {c.verdict}.")


def run_exact(pool: Pool, ask: Ask) -> Step:
    result = exactness(next(iter(BUGS)), runs=LAB_RUNS * ask.scale)
    return Step([exactness_figure(result), later("The same test with the bug")],
                note("The correct sampler: " + lab_note(result)), memo={"checked": True, "scale": ask.scale})


def reveal_exact(pool: Pool, guess: Any, memo: Any, ask: Ask) -> Step:
    need(memo, "checked")
    result = exactness(str(ask.setting), runs=LAB_RUNS * need(memo, "scale"))
    c = result.comparison
    return Step([None, exactness_figure(result)],
                answer=rv.reveal_exact(str(guess), str(ask.setting), c.verdict, c.tv, c.tv_noise, c.p_value))


EXACT = Chapter(
    "exact", "Exactly the target's distribution",
    "Accept with min(1, p/q), replace from norm(max(0, p − q)): together they emit each token with probability "
    "**exactly p**. The draft changes the speed, never the distribution. This is not an approximation.\n\n"
    f"**Run** checks it. The Exactness lab samples the next token {LAB_RUNS:,} times and compares the frequencies "
    "with p; here on the toy ten-word pair (the same engine over a tiny vocabulary, so thousands of runs take "
    "seconds). Then pick a bug — one step of the rule done differently — and guess: does the output stay exact? "
    "Reveal runs the sampler again with the bug switched on.",
    Guess("with this bug, the output…", choices=("stays exact", "biased")),
    run_exact, reveal_exact,
    Setting("the bug to switch on", tuple((b, b) for b in list(BUGS)[1:]), list(BUGS)[1], at_reveal=True),
    longer=f"{3 * LAB_RUNS:,} runs instead of {LAB_RUNS:,}")


CHAPTERS = (FORWARDS, ANATOMY, GREEDY, SAMPLING, EXACT)

__all__ = ["CHAPTERS", "FORWARDS", "ANATOMY", "GREEDY", "SAMPLING", "EXACT"]
