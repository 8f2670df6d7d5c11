"""The answers of the Learn tab's predict-then-reveal: pure functions from the learner's guess and what a
run measured to one short HTML block (the guess, the measurement, one line of why). Nothing here runs a
model, and nothing an answer states is fixed in advance: every number comes from the run passed in.
All text is escaped here (model tokens and values reach the page through these blocks).
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from specdec_core import Trace
from specdec_core.stats.intervals import Interval, mean_difference, speedup_interval
from specdec_core.policy.closed_form import estimate_alpha, estimate_c, speedup
from specdec_core.teaching.lab import BIASED_P, CLEAN_P
from specdec_core.trace import DraftRecord, IterationRecord

from components.render.base import instructive_index
from components.render.measures import identical_to_baseline, measured_speedup


def shown(text: str, limit: int = 24) -> str:
    """A token for a sentence: quoted, whitespace made visible, cut at ``limit`` (not escaped yet)."""
    s = text.replace("\n", "↵").replace("\t", "⇥")
    return "“" + (s if len(s) <= limit else s[: limit - 1] + "…") + "”"


RIGHT, WRONG, CANT_TELL = "right", "wrong", "can't tell"


@dataclass(frozen=True)
class Truth:
    """What a run measured, as a class's chart of its guesses draws it: a number with the band a guess counts
    in (its 95 % interval, or the chapter's tolerance), and/or the discrete answers judged right (choices, or
    whole numbers such as K)."""
    value: float | None = None
    low: float | None = None
    high: float | None = None
    right: tuple[Any, ...] = ()
    label: str = ""              # the measurement in words, for the chart


@dataclass(frozen=True)
class Answer:
    """A judged guess: the block the page shows, the verdict (RIGHT, WRONG, CANT_TELL, or None when not judged)
    and what the run measured (the same for every guess); ``measured`` and ``why`` (plain text) and ``extra`` (HTML
    after the block) and how it was judged are the parts that do not depend on the guess, for a class's summary."""
    html: str
    verdict: str | None
    truth: Truth
    measured: str = ""
    why: str = ""
    judged: str = ""
    extra: str = ""

    def plus(self, extra_html: str) -> Answer:
        """The same answer with more HTML after its block (already escaped by the caller)."""
        return replace(self, html=self.html + extra_html, extra=self.extra + extra_html)


MARKS = {RIGHT: " ✓ right", WRONG: " ✗ not this time", CANT_TELL: " ? can’t tell from this run"}
CLASSES = {RIGHT: " sd-learn-hit", WRONG: " sd-learn-miss", CANT_TELL: " sd-learn-unsure"}


def answer_html(guess: str, measured: str, why: str, verdict: str | None = None, judged: str = "",
                truth: Truth = Truth()) -> Answer:
    """The reveal block: the guess next to the measurement, the verdict (right, wrong, or can't tell from this
    run; none for a guess that is not judged), how it was judged, and the why; with the verdict and ``truth``."""
    mark, cls = MARKS.get(verdict, ""), CLASSES.get(verdict, "")
    more = (" Press <b>Run longer</b> for a measurement that can tell." if verdict == CANT_TELL else "")
    rule = f'<p class="sd-learn-judged">{html.escape(judged)}{more}</p>' if judged or more else ""
    return Answer(f'<div class="sd-learn-reveal{cls}"><p><b>Your guess:</b> {html.escape(guess)} &nbsp;·&nbsp; '
                  f'<b>This run:</b> {html.escape(measured)}<b>{html.escape(mark)}</b></p>{rule}'
                  f'<p class="sd-learn-why">Why: {html.escape(why)}</p></div>', verdict, truth,
                  measured=measured, why=why, judged=judged)


def message_html(text: str) -> str:
    """A friendly line where the answer goes (Reveal before Run, or before a guess): no verdict, no error."""
    return f'<div class="sd-learn-reveal sd-learn-wait"><p>{html.escape(text)}</p></div>'


def close(guess: float, value: float, rel: float = 0.2, abs_: float = 0.0) -> bool:
    """A numeric guess counts as right within ``rel`` of the value (or ``abs_``, whichever is larger)."""
    return abs(guess - value) <= max(abs(value) * rel, abs_)


def judge_value(guess: float, point: float, low: float, high: float, tolerance: float, widest: float) -> str:
    """A numeric guess against a measurement with its 95 % interval: right inside the interval or within
    ``tolerance`` of the point; wrong outside both (however wide the interval); can't tell when the interval is
    wider than ``widest`` and the guess is inside it (such a run cannot tell a good guess from a poor one)."""
    if not (low <= guess <= high or abs(guess - point) <= tolerance):
        return WRONG
    return CANT_TELL if high - low > widest else RIGHT


def trend_verdict(low: float, high: float, margin: float) -> set[str]:
    """The answers the 95 % interval [low, high] of a difference (hot − cool) supports: "lower" when it lies wholly
    below 0, "higher" when wholly above, "about the same" when wholly within ±``margin`` (a small but clear
    difference supports two answers); none (can't tell) when it straddles."""
    said = set()
    if high < 0:
        said.add("lower")
    if low > 0:
        said.add("higher")
    if -margin <= low and high <= margin:
        said.add("about the same")
    return said


def judge_choice(guess: str, measured: str | set[str] | None) -> str:
    """A chosen answer against what the run supports (one answer, several, or none: can't tell)."""
    supported = {measured} if isinstance(measured, str) else set(measured or ())
    return CANT_TELL if not supported else RIGHT if guess in supported else WRONG


# --- choosing what to show -------------------------------------------------------------------------------

def iteration(trace: Trace, index: int) -> IterationRecord:
    return next(it for it in trace.iterations if it.index == index)


# --- one token per forward --------------------------------------------------------------------

def forward_ratio(verify_ms: Sequence[float], n: int) -> float:
    """t(n) / t(1): what one forward over n tokens costs in one-token forwards."""
    if not 1 <= n <= len(verify_ms) or verify_ms[0] <= 0:
        raise ValueError(f"need a measured curve up to n = {n} with t(1) > 0")
    return verify_ms[n - 1] / verify_ms[0]


FORWARD_TOLERANCE = 0.25          # chapter 1 judges a guess within 25 % of the measured ratio


def reveal_forward_cost(guess: float, verify_ms: Sequence[float], n: int = 8) -> Answer:
    r = forward_ratio(verify_ms, n)
    gain = "still far less than" if r < 0.6 * n else "close to" if r < n * 0.95 else "no less than"
    why = (f"a GPU streams the weights from memory once per forward, so {n} tokens cost about one forward; this "
           f"CPU has less to spare: {n} tokens in one forward took {r:.2f} × a one-token forward "
           f"({verify_ms[n - 1]:.0f} vs {verify_ms[0]:.0f} ms), {gain} the {n} forwards the baseline would pay.")
    low, high = r * (1 - FORWARD_TOLERANCE), r * (1 + FORWARD_TOLERANCE)
    return answer_html(f"{guess:g} ×", f"{r:.2f} ×", why, RIGHT if close(guess, r, FORWARD_TOLERANCE) else WRONG,
                       f"Judged right within {FORWARD_TOLERANCE:.0%} of the measured ratio ({low:.2f}–{high:.2f} ×).",
                       Truth(r, low, high, label=f"{r:.2f} ×"))


# --- draft, then verify in one forward ---------------------------------------------------------

def reveal_kept(guess: int, trace: Trace, index: int) -> Answer:
    it = iteration(trace, index)
    kept = sum(d.accepted for d in it.drafts)
    n = len(it.drafts)
    greedy = trace.config.get("temperature", 0) == 0
    if kept == n:
        why = (f"the target agreed with all {n} drafts, so the same forward also gave a bonus token: "
               f"{n + 1} tokens for one target forward.")
    else:
        d = it.drafts[kept]
        test = ("was not the target's own choice" if greedy else
                f"had α = min(1, p/q) = {d.alpha:.2f} and the draw u = {d.u:.2f} was not below it"
                if d.u is not None else "was rejected")
        repl = it.resampled.text if it.resampled is not None else ""
        why = (f"draft {kept + 1} {shown(d.text)} {test}; the target put {shown(repl)} there instead and threw "
               f"away the {n - kept - 1} draft{'s' if n - kept - 1 != 1 else ''} after it: {kept + 1} token"
               f"{'s' if kept else ''} from one target forward.")
    return answer_html(f"{guess} of {n}", f"{kept} of {n} kept", why, RIGHT if guess == kept else WRONG,
                       truth=Truth(kept, right=(kept,), label=f"{kept} of {n} kept"))


# --- greedy output is the baseline's ----------------------------------------------------------

def reveal_identical(guess: str, trace: Trace) -> Answer:
    same = identical_to_baseline(trace)
    if same is None:
        raise ValueError("the run has no baseline to compare with")
    n = len(trace.new_token_ids)
    greedy = trace.config.get("temperature", 0) == 0
    measured = f"identical ({n} tokens)" if same else "different"
    if greedy:
        why = ("in greedy decoding a draft survives only if it is the target's argmax, and a rejected one is "
               "replaced by the target's own choice, so every token is the one the baseline picks"
               + ("." if same else " (a tie between two equally likely tokens can still split them)."))
    else:
        why = ("sampling keeps the target's distribution, not its draws: the speculative run spends its random "
               "numbers on u and on the residual, so the same seed gives another sample"
               + (" (here they happened to agree)." if same else "."))
    return answer_html(guess, measured, why, RIGHT if (guess == "identical") == same else WRONG,
                       truth=Truth(right=("identical" if same else "different",), label=measured))


# --- α = min(1, p/q) ----------------------------------------------------------------------------

def alpha_question(trace: Trace, min_q: float = 0.05, toss: tuple[float, float] = (0.05, 0.95)) -> tuple[int, int] | None:
    """(iteration, draft) to ask α about: a tested draft whose q is at least ``min_q`` (its p and q read well
    at three decimals), the first whose α is within ``toss`` (a real coin toss) in an iteration with a rejection (so the
    residual can be shown), else in any iteration, else the first such draft, else the first draft of the
    iteration a run opens on (``render.base.instructive_index``); None when nothing was drafted."""
    tested = [(it, j, d) for it in trace.iterations for j, d in enumerate(it.drafts) if d.tested and d.q >= min_q]
    def tossed(d: DraftRecord) -> bool:
        return toss[0] <= d.alpha <= toss[1]
    for ok in (lambda it, d: tossed(d) and it.resampled is not None, lambda it, d: tossed(d), lambda it, d: True):
        for it, j, d in tested:
            if ok(it, d):
                return it.index, j
    i = instructive_index(trace)
    return None if i is None or not iteration(trace, i).drafts else (i, 0)


ALPHA_TOLERANCE = 0.05


def reveal_alpha(guess: float, trace: Trace, index: int, j: int = 0) -> Answer:
    d = iteration(trace, index).drafts[j]
    verdict = ("accepted" if d.accepted else "rejected") if d.u is not None else "decided without a draw"
    why = (f"draft {j + 1} {shown(d.text)} has p = {d.p:.3g} and q = {d.q:.3g}, so α = min(1, {d.p:.3g} / {d.q:.3g}) = "
           f"{d.alpha:.3f}; the draw u = {'–' if d.u is None else f'{d.u:.3f}'}: {verdict}. A rejected draft is "
           "replaced by a draw from norm(max(0, p − q)): the mass the draft under-proposed.")
    return answer_html(f"{guess:.2f}", f"α = {d.alpha:.3f}", why,
                       RIGHT if close(guess, d.alpha, 0.0, ALPHA_TOLERANCE) else WRONG,
                       f"Judged right within ±{ALPHA_TOLERANCE:g} of α (it is computed, not sampled).",
                       Truth(d.alpha, d.alpha - ALPHA_TOLERANCE, d.alpha + ALPHA_TOLERANCE, label=f"α = {d.alpha:.3f}"))


# --- exactness --------------------------------------------------------------------------------

def reveal_exact(guess: str, bug: str, verdict: str, tv: float, tv_noise: float, p_value: float | None) -> Answer:
    measured = {"exact": "no bias detected", "biased": "biased", "inconclusive": "inconclusive"}[verdict]
    pv = "–" if p_value is None else f"{p_value:.3g}"
    why = (f"with “{bug}” the sampled frequencies are {tv:.3f} away from the target's exact distribution "
           f"(total variation; an exact sampler at this N: about {tv_noise:.3f}), chi-square p = {pv}.")
    judged = CANT_TELL if verdict == "inconclusive" else RIGHT if (guess == "stays exact") == (verdict == "exact") \
        else WRONG
    return answer_html(guess, measured, why, judged,
                       f"Judged by the chi-square test: biased when its p < {BIASED_P:g} (or an impossible outcome "
                       f"appears), exact (no bias detected) when p ≥ {CLEAN_P:g}, inconclusive between.",
                       Truth(right={"exact": ("stays exact",), "biased": ("biased",)}.get(verdict, ()), label=measured))


# --- temperature and acceptance ---------------------------------------------------------------------------

SAME_MARGIN = 0.10          # "about the same": within 10 points of acceptance


def acceptance_row(trace: Trace) -> tuple[float, list[float]]:
    """(temperature, α of every tested draft) of a run. α = min(1, p/q) is the chance that draft is accepted, so
    the mean α estimates acceptance with less noise than the accept/reject coin flips themselves."""
    alphas = [d.alpha for it in trace.iterations for d in it.drafts if d.tested]
    return float(trace.config.get("temperature", 0.0)), alphas


def reveal_temperature(guess: str, rows: Sequence[tuple[float, list[float]]]) -> Answer:
    """``rows`` from ``acceptance_row`` (several runs at one temperature pooled), coolest first; the guess is about
    the hottest against the coolest, judged by the 95 % interval of the difference of their mean α."""
    if len(rows) < 2 or len(rows[0][1]) < 2 or len(rows[-1][1]) < 2:
        raise ValueError("need two runs that tested at least two drafts each")
    (t0, a0), (t1, a1) = rows[0], rows[-1]
    d, low, high = mean_difference(a1, a0)
    supported = trend_verdict(low, high, SAME_MARGIN)
    listed = ", ".join(f"{sum(a) / len(a):.0%} at T = {t:g} ({len(a)} drafts)" for t, a in rows if a)
    why = (f"acceptance (the mean α of the tested drafts) was {listed}. Temperature reshapes p and q alike, but not "
           "equally: cooled, both pile onto their top token, so α is near 1 where they agree on it and near 0 where "
           "they do not; warmed, both spread out and α = min(1, p/q) is decided by the tails too. Acceptance is a "
           "property of the pair and the settings, not of the pair alone.")
    said = " and ".join(a for a in ("lower", "about the same", "higher") if a in supported) or "can't tell"
    return answer_html(guess, f"{said}: {d:+.0%} (95 % interval {low:+.0%} to {high:+.0%})", why,
                       judge_choice(guess, supported),
                       f"Judged by the 95 % interval of the difference T = {t1:g} minus T = {t0:g}: lower or higher "
                       f"when it lies wholly below or above 0, about the same when wholly within ±{SAME_MARGIN:.0%}, "
                       "can't tell otherwise.", Truth(d, low, high, tuple(sorted(supported)), f"{d:+.0%}"))


# --- when it pays -------------------------------------------------------------------------------

SPEEDUP_TOLERANCE = 0.1     # a speedup guess within ±0.1 of the measured one counts
SPEEDUP_WIDEST = 0.6        # an interval wider than this cannot judge a speedup guess


def _interval_text(iv: Interval) -> str:
    return f"95 % interval ×{iv.low:.2f}–×{iv.high:.2f}"


def reveal_speedup(guess: float, trace: Trace, flat_prediction: float | None) -> Answer:
    s, iv = measured_speedup(trace), speedup_interval(trace)
    alpha, c = estimate_alpha(trace), estimate_c(trace)
    if s is None or iv is None or alpha is None or c is None:
        raise ValueError("the run needs a baseline and at least one iteration with drafts")
    k = int(trace.config.get("k", 1))
    why = (f"with α̂ = {alpha:.2f}, ĉ = {c:.2f} and K = {k} the closed form (1 − α^(K+1)) / ((1 − α)(cK + 1)) "
           f"gives ×{speedup(alpha, k, c):.2f} if a verify cost one forward; on this CPU a {k + 1}-token verify "
           "costs more")
    why += (f" — priced with a flat, GPU-like verify the same run would give ×{flat_prediction:.2f}."
            if flat_prediction is not None else ".")
    verdict = judge_value(guess, s, iv.low, iv.high, SPEEDUP_TOLERANCE, SPEEDUP_WIDEST) if iv.enough else CANT_TELL
    return answer_html(f"×{guess:.2f}", f"×{s:.2f} ({_interval_text(iv)})", why, verdict,
                       f"Judged right inside the run's 95 % interval (a bootstrap over its iterations) or within "
                       f"±{SPEEDUP_TOLERANCE:g} of the measured speedup.", Truth(s, iv.low, iv.high, label=f"×{s:.2f}"))


# --- choosing a draft ---------------------------------------------------------------------------

def reveal_draft(guess: str, rows: Sequence[tuple[str, float, float, Interval | None]]) -> Answer:
    """``rows``: (draft, speedup, acceptance, its speedup's 95 % interval) for each draft run, best first."""
    if not rows:
        raise ValueError("no draft was run")
    best = rows[0]
    detail = "; ".join(f"{name}: ×{s:.2f}" + (f" ({iv.low:.2f}–{iv.high:.2f})" if iv else "") +
                       f", {a:.0%} of drafts accepted" for name, s, a, iv in rows)
    if best[1] < 1:
        detail += f" ({'neither' if len(rows) == 2 else 'none'} beat the baseline this time)"
    clear = len(rows) == 1 or (best[3] is not None and rows[1][3] is not None and best[3].low > rows[1][3].high)
    why = (f"{detail}. Prompt lookup copies spans of the prompt: free to draft, but it only proposes where the "
           "answer repeats the prompt; a trained draft guesses open-ended text, at a small cost per draft.")
    measured = f"{best[0]} wins" if clear else f"{best[0]} ahead, within the noise of {rows[1][0]}"
    return answer_html(guess, measured, why, judge_choice(guess, best[0] if clear else None),
                       "Judged when the winner's 95 % interval lies wholly above the runner-up's; otherwise this run "
                       "cannot tell them apart.", Truth(right=(best[0],) if clear else (), label=measured))


# --- choosing K ---------------------------------------------------------------------------------

def reveal_best_k(guess: int, rows: Sequence[tuple[int, float, Interval | None]], baseline_tokens_per_s: float,
                  verify_ms: Sequence[float]) -> Answer:
    """``rows``: (K, measured tokens/s, its speedup's 95 % interval) for every K swept."""
    if not rows:
        raise ValueError("no K was run")
    best_k, best, best_iv = max(rows, key=lambda r: r[1])
    gained = f"×{best / baseline_tokens_per_s:.2f} over the baseline" if baseline_tokens_per_s > 0 else ""
    why = f"K = {best_k} ran at {best:.1f} tokens/s {gained}. Each extra draft is kept less often (α^j), "
    if len(verify_ms) > best_k + 1 and verify_ms[0] > 0:
        why += (f"while the verify grows with it: here one forward over {best_k + 1} tokens cost "
                f"{verify_ms[best_k] / verify_ms[0]:.2f} × t(1), over {len(verify_ms)} tokens "
                f"{verify_ms[-1] / verify_ms[0]:.2f} ×; with a flat verify larger K would cost nothing extra.")
    else:
        why += "while every draft and the larger verify cost time."
    mine = next((iv for k, _, iv in rows if k == guess), None)
    if guess == best_k:
        verdict = RIGHT
    elif mine is None or best_iv is None:
        verdict = CANT_TELL
    else:
        verdict = RIGHT if mine.high >= best_iv.low else WRONG       # within the noise of the best, or below it
    tied = [k for k, _, iv in rows if k != best_k and iv is not None and best_iv is not None and iv.high >= best_iv.low]
    measured = f"best K = {best_k}" + (f" (K = {', '.join(map(str, tied))} within its noise)" if tied else "")
    return answer_html(f"K = {guess}", measured, why, verdict,
                       "Judged right for the best K, or a K whose speedup interval reaches the best one's (this run "
                       "cannot tell them apart).", Truth(best_k, right=(best_k, *tied), label=measured))


# --- pitfalls -----------------------------------------------------------------------------------

def reveal_costly_draft(guess: str, trace: Trace) -> Answer:
    """Faster or slower than the baseline, as the run's 95 % speedup interval says (can't tell when it holds ×1)."""
    s, iv = measured_speedup(trace), speedup_interval(trace)
    c = estimate_c(trace)
    if s is None or iv is None or c is None:
        raise ValueError("the run needs a baseline and at least one iteration with drafts")
    k = int(trace.config.get("k", 1))
    measured = "slower" if iv.high < 1 else "faster" if iv.low > 1 else None
    why = (f"{trace.stats.acceptance_rate:.0%} of the tested drafts were accepted, but every draft is a forward of the "
           f"whole target: c = {c:.2f} (one draft forward ÷ one {k + 1}-token verify). Each iteration pays K = {k} "
           f"draft forwards and a verify for at most {k + 1} tokens, where the baseline pays {k + 1} one-token "
           "forwards; a useful draft costs a small fraction of the target.")
    return answer_html(guess, f"×{s:.2f} ({_interval_text(iv)})", why, judge_choice(guess, measured),
                       "Judged by the run's 95 % interval: slower when it lies wholly below ×1, faster when wholly "
                       "above, can't tell when it holds ×1.", Truth(s, iv.low, iv.high, (measured,) if measured else (),
                                                                     f"×{s:.2f}"))


# --- coupled sampling -------------------------------------------------------------------------------------

def tested_acceptance(trace: Trace) -> tuple[int, int]:
    """(accepted, tested) drafts of a run."""
    drafts = [d for it in trace.iterations for d in it.drafts if d.tested]
    return sum(d.accepted for d in drafts), len(drafts)


def reveal_coupled(guess: str, standard: Sequence[Trace], coupled: Sequence[Trace]) -> Answer:
    """``standard`` and ``coupled``: (a draft's run with its baseline, another draft's run), the same prompt and
    seed under each rule; the guess is whether the coupled rule's three texts are identical."""
    def same(runs: Sequence[Trace]) -> bool:
        texts = [runs[0].baseline.new_token_ids, *(r.new_token_ids for r in runs)]
        return all(t == texts[0] for t in texts)
    if any(r[0].baseline is None for r in (standard, coupled)):
        raise ValueError("the runs need their baseline")
    measured = "all three identical" if same(coupled) else "different"
    paid = "; ".join(f"{r.config.get('draft') or r.config.get('drafter')}: {a / max(n, 1):.0%} of {n} tested drafts "
                     f"accepted under the standard rule, {b / max(m, 1):.0%} of {m} under the coupled one"
                     for r, (a, n), (b, m) in ((s, tested_acceptance(s), tested_acceptance(c))
                                               for s, c in zip(standard, coupled)))
    why = (("under the standard rule the three texts " + ("happened to agree" if same(standard) else "differed")
            + "; under the coupled rule every written token is the target's own sample for its position, the same "
            "noise for every run, so a draft only decides how many tokens one forward yields, never which. ")
           + f"The price is in acceptance: a draft is kept only when it equals the target's sample, not with "
           f"probability min(1, p/q) ({paid}; short runs, so the rates carry several points of noise).")
    return answer_html(guess, measured, why, RIGHT if guess == measured else WRONG,
                       truth=Truth(right=(measured,), label=measured))


# --- token trees --------------------------------------------------------------------------------

TREE_RULES = {
    "greedy": "in greedy decoding the walk follows the child that is argmax p, and emits argmax p where none is",
    "target_draw": ("its siblings are the draft's top candidates, chosen, not drawn from q, so the ratio test would "
                    "bias them: the target draws y ~ p and descends into the child equal to y, else emits y"),
    "recursive_rejection": ("its siblings were drawn from q, so they are tried in order with u < min(1, p/q), p "
                            "becoming norm(max(0, p − q)) after each rejection"),
}


def tokens_per_iteration(trace: Trace) -> float:
    """Tokens emitted per iteration (accepted drafts and the one token every iteration adds)."""
    if not trace.iterations:
        raise ValueError("the run has no iterations")
    return sum(len(it.emitted) for it in trace.iterations) / len(trace.iterations)


def mean_verify_ms(trace: Trace) -> float:
    return sum(it.verify_ms for it in trace.iterations) / max(len(trace.iterations), 1)


def flat_iteration_cost(trace: Trace, verify_ratio: float) -> float:
    """A run's mean iteration in one-token forwards if its verify cost one (a flat, GPU-like verify): its drafting
    and overhead over its own verify time ÷ ``verify_ratio`` (t(n)/t(1) of its verify), plus that one forward."""
    one = mean_verify_ms(trace) / verify_ratio
    rest = sum(sum(it.draft_ms) + it.other_ms for it in trace.iterations) / max(len(trace.iterations), 1)
    return 1 + rest / one if one > 0 else float("nan")


TREE_TOLERANCE = 0.25       # tokens per iteration
TREE_WIDEST = 1.5


def reveal_tree_gain(guess: float, chain: Trace, tree: Trace, verify_ms: Sequence[float]) -> Answer:
    """How many more tokens per iteration the tree run gave than the chain run (with the 95 % interval of that
    difference), what its verify costs here (``verify_ms``: a forward over 1, 2, … tokens, measured with the runs),
    what a flat verify would make of the two runs, and the rule that kept the tree exact."""
    rules = [it.tree.rule for it in tree.iterations if it.tree is not None]
    if not rules:
        raise ValueError("the tree run verified no tree")
    c, t = tokens_per_iteration(chain), tokens_per_iteration(tree)
    gain, low, high = mean_difference([len(it.emitted) for it in tree.iterations],
                                      [len(it.emitted) for it in chain.iterations])
    k, n = int(chain.config.get("k", 1)), int(tree.config.get("tree_nodes", 0))
    if len(verify_ms) <= max(n, k) or verify_ms[0] <= 0:
        raise ValueError(f"need a forward's cost measured up to {max(n, k) + 1} tokens")
    flat = (t / flat_iteration_cost(tree, verify_ms[n] / verify_ms[0])) / \
        (c / flat_iteration_cost(chain, verify_ms[k] / verify_ms[0]))
    more = ("so the target's choice was more often among them" if gain > 0 else
            "but they took nodes the chain spent on depth, and did not pay off here")
    verify = (f"its verify is a forward over {n + 1} tokens, as the chain's" if n == k else
              f"its verify, a forward over {n + 1} tokens, costs {verify_ms[n] / verify_ms[k]:.2f} × the chain's over "
              f"{k + 1} here ({verify_ms[n]:.0f} vs {verify_ms[k]:.0f} ms, measured with the runs)")
    ts, cs = tree.stats.tokens_per_s, chain.stats.tokens_per_s
    why = (f"the chain's {k} drafts stand in a row; the tree's {n} nodes branch where the draft is unsure, {more}; "
           f"{verify}. Measured, the tree ran at {ts:.1f} tokens/s, the chain at {cs:.1f}"
           f"{f' (×{ts / cs:.2f})' if cs > 0 else ''}. With a flat verify (a GPU's, nearly) the same runs would make "
           f"the tree ×{flat:.2f} as fast as the chain. Exact because {TREE_RULES.get(rules[0], rules[0])}.")
    return answer_html(f"{guess:+.2f} tokens per iteration",
                       f"{gain:+.2f} ({t:.2f} vs {c:.2f}; 95 % interval {low:+.2f} to {high:+.2f})", why,
                       judge_value(guess, gain, low, high, TREE_TOLERANCE, TREE_WIDEST),
                       f"Judged right inside the 95 % interval of the difference or within ±{TREE_TOLERANCE:g} of it.",
                       Truth(gain, low, high, label=f"{gain:+.2f}"))


__all__ = ["RIGHT", "WRONG", "CANT_TELL", "Truth", "Answer", "answer_html", "message_html", "close", "judge_value", "trend_verdict",
           "judge_choice", "iteration", "forward_ratio", "reveal_forward_cost", "reveal_kept", "reveal_identical",
           "alpha_question", "reveal_alpha", "reveal_exact", "acceptance_row", "reveal_temperature", "reveal_speedup",
           "reveal_draft", "reveal_best_k", "reveal_costly_draft", "shown", "tokens_per_iteration", "mean_verify_ms",
           "flat_iteration_cost", "reveal_tree_gain", "tested_acceptance", "reveal_coupled"]
