"""The teaching tabs: Exactness lab, Simulator, Theory, Draft comparison, K sweep.

``add_teaching_tabs(ctx)`` is called by the app inside its ``gr.Tabs()``. Every handler is a
module-level function (the model pool passed explicitly, bound with ``functools.partial``), so the
tests call them without a browser. The logic lives in ``specdec_core.lab`` / ``sweeps`` / ``toy``;
the figures in ``lab_figures``; the simulator reuses the Live tab's trace viewer.

Stable elem_ids (for the browser tests): lab-run, lab-plot, lab-verdict, lab-details, lab-setup;
sim-run, sim-plot, sim-position, sim-sweep-run, sim-sweep-plot, sim-speedup-table (and the viewer's
sim-tokens, sim-iteration, sim-plot-pq, ...); theory-k, theory-c, theory-refresh, theory-heatmap,
theory-kcurves, theory-formulas, theory-md; compare-run, select-run, compare-plot, compare-table,
compare-rejected, compare-summary; ksweep-run, ksweep-plot, ksweep-table, ksweep-md.
"""
from __future__ import annotations

import functools
import html
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gradio as gr

from specdec_core import InjectedBugs, LoadedModel, NGramDrafter, SpecConfig, Trace, encode_prompt
from specdec_core.engine import baseline_generate, stream_speculative
from specdec_core.lab import LabResult, LabSettings, run_exactness
from specdec_core.models import make_drafter
from specdec_core.sweeps import (KSweep, Selection, acceptance_vs_agreement, evaluate_drafts, k_sweep,
                                 pool_candidates, speedup_table)
from specdec_core.theory import approximate_speedup, break_even_alpha, estimate_alpha, estimate_c, optimal_k, speedup
from specdec_core.toy import WORDS, make_toy_pair, pair_from_config, pair_meta, step_view

from .context import AppContext
from .gpu import gpu_task
from .cost_ui import VERIFY_MEASURED, build_cost_view, cost_point
from .lab_figures import (MeasuredPoint, agreement_figure, compare_figure, exactness_figure, formula_figure,
                          ksweep_figure, speedup_heatmap, speedup_vs_k_figure, toy_step_figure)
from .measures import measured_speedup
from .viewer import build_viewer, parse_state, render_iteration, render_trace, target_index

LOCK_WAIT_S = 300.0
MAX_PROMPT_CHARS = 5_000

# --- exactness lab settings ----------------------------------------------------------------------
SETUP_CHOICES = [
    ("Toy 10-word pair: the draft disagrees with the target (instant)", "toy"),
    ("SmolLM2 (bundled) + prompt-lookup (n-gram) drafter", "ngram"),
    ("SmolLM2 (bundled) drafting for itself (q = p)", "self"),
]
LAB_DEFAULTS = {   # setup -> (prompt, chat template, default N)
    "toy": ("the cat", False, 3000),
    "ngram": ("one, two, three, four, five. one, two, three,", False, 200),
    "self": ("one, two, three, four, five. one, two, three,", False, 120),
}
LAB_MAX_RUNS = {"toy": 20_000, "ngram": 1_000, "self": 1_000}
LAB_TIME_BUDGET_S = {"toy": 120.0, "ngram": 240.0, "self": 240.0}
MS_PER_RUN = {"toy": "≈1–3 ms", "ngram": "≈0.2 s", "self": "≈0.4 s"}   # measured on 2 shared CPU cores

# --- simulator ------------------------------------------------------------------------------------
SIM_MAX_NEW = 200
SIM_AGREEMENTS = tuple(i / 10 for i in range(11))
SIM_C_VALUES = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
SLOW_MOTION_S = 0.35

# --- theory ---------------------------------------------------------------------------------------
THEORY_ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
THEORY_K_MAX = 16

# --- comparison / K sweep ---------------------------------------------------------------------------
COMPARE_PROMPTS = (
    "Repeat this sentence exactly, twice: The quick brown fox jumps over the lazy dog near the old stone bridge.",
    "Count from 1 to 30, separated by commas.",
    "Copy this list exactly: apples, bananas, cherries, dates, elderberries, figs, grapes, honeydew.",
)
MAX_SELECTION_PROMPTS = 5
UI_MAX_NEW = 256
KSWEEP_MAX_K = 12


# --- small validated conversions (UI values -> Python, or a gr.Error naming the setting) -------------

def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise gr.Error(f"{name} must be a whole number, got {value!r}")
    if value != int(value):
        raise gr.Error(f"{name} must be a whole number, got {value!r}")
    if not lo <= int(value) <= hi:
        raise gr.Error(f"{name} must be between {lo} and {hi}, got {int(value)}")
    return int(value)


def _float(name: str, value: Any, lo: float, hi: float) -> float:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise gr.Error(f"{name} must be a number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise gr.Error(f"{name} must be between {lo:g} and {hi:g}, got {value:g}")
    return float(value)


def _prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("The prompt is empty: type something.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"The prompt is {len(prompt)} characters long; the limit here is {MAX_PROMPT_CHARS}.")
    return prompt


def _encode(lm: LoadedModel, prompt: str, chat: bool) -> list[int]:
    try:
        return encode_prompt(lm.tokenizer, prompt, chat=bool(chat))
    except ValueError as e:
        raise gr.Error(f"Could not encode the prompt: {e}") from e


def _get_model(pool: Any, key: str) -> LoadedModel:
    try:
        return pool.get(key)
    except (RuntimeError, ValueError, OSError) as e:
        raise gr.Error(f"Could not load the model {key!r}: {e}") from e


@contextmanager
def _locked(*models: LoadedModel) -> Iterator[None]:
    """Hold each model's lock (each once, in key order) for a whole experiment, so timings are not
    shared with another viewer's run."""
    unique = sorted({m.key: m for m in models}.values(), key=lambda m: m.key)
    held: list[LoadedModel] = []
    try:
        for m in unique:
            if not m.lock.acquire(timeout=LOCK_WAIT_S):
                raise gr.Error(f"{m.label} is busy with other viewers' runs; try again in a minute.")
            held.append(m)
        yield
    finally:
        for m in reversed(held):
            m.lock.release()


def _bound(fn: Callable, pool: Any) -> Callable:
    """``fn`` with the pool bound as its first argument. A plain ``functools.partial`` keeps the rest of the
    signature (Gradio finds the ``gr.Progress`` parameter in it); the name is copied for wrappers such as
    ZeroGPU's that expect one (no ``__wrapped__``: the signature must stay the partial's)."""
    bound = functools.partial(fn, pool)
    bound.__name__ = bound.__qualname__ = fn.__name__
    bound.__module__, bound.__doc__ = fn.__module__, fn.__doc__
    return bound


def _reporter(progress: Any, what: str) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if progress is not None:
            progress((done, total), desc=what, unit="runs" if "run" in what else "steps")
    return report


# --- 1. exactness lab -----------------------------------------------------------------------------

def lab_bugs(resample_from_p: bool, greedy_ratio: bool, mismatch: bool, draft_temperature: Any,
             drop_bonus: bool) -> InjectedBugs:
    """The UI's switches as an ``InjectedBugs`` (every one off unless ticked)."""
    dt = None
    if mismatch:
        dt = _float("draft temperature", draft_temperature, 0.05, 5.0)
    return InjectedBugs(resample_from_p=bool(resample_from_p), greedy_draft_ratio_rule=bool(greedy_ratio),
                        draft_temperature=dt, drop_bonus=bool(drop_bonus))


def lab_setup_changed(setup: str) -> tuple[Any, Any, Any, Any]:
    """Setup selector: its example prompt, chat template, a default N sized for it, the agreement slider."""
    if setup not in LAB_DEFAULTS:
        raise gr.Error(f"unknown setup {setup!r}")
    prompt, chat, n = LAB_DEFAULTS[setup]
    return (gr.Textbox(value=prompt), gr.Checkbox(value=chat, interactive=setup != "toy"),
            gr.Slider(value=n, maximum=LAB_MAX_RUNS[setup],
                      info=f"one run ≈ {MS_PER_RUN[setup]} here; stops after {LAB_TIME_BUDGET_S[setup]:.0f} s"),
            gr.Slider(visible=setup == "toy"))


def run_lab(pool: Any, setup: str, prompt: Any, chat: bool, agreement: Any, n_tokens: Any, k: Any,
            temperature: Any, top_k: Any, top_p: Any, n_runs: Any, seed: Any, bug_resample: bool,
            bug_greedy: bool, bug_mismatch: bool, bug_draft_temperature: Any, bug_drop_bonus: bool,
            progress: Any = gr.Progress()) -> tuple[Any, str, str]:
    """Run the exactness experiment. Returns (figure, verdict markdown, details markdown)."""
    if setup not in LAB_DEFAULTS:
        raise gr.Error(f"unknown setup {setup!r}")
    prompt = _prompt(prompt)
    bugs = lab_bugs(bug_resample, bug_greedy, bug_mismatch, bug_draft_temperature, bug_drop_bonus)
    try:
        settings = LabSettings(n_tokens=_int("tokens examined", n_tokens, 1, 2), k=_int("K", k, 1, 16),
                               temperature=_float("temperature", temperature, 0.0, 5.0),
                               top_k=_int("top-k", top_k, 0, 100_000), top_p=_float("top-p", top_p, 0.01, 1.0),
                               n_runs=_int("runs", n_runs, 1, LAB_MAX_RUNS[setup]), seed=_int("seed", seed, 0, 2**31))
    except ValueError as e:
        raise gr.Error(f"Bad setting: {e}") from e
    budget = LAB_TIME_BUDGET_S[setup]
    report = _reporter(progress, f"sampling {settings.n_runs:,} runs")
    try:
        if setup == "toy":
            pair = make_toy_pair(_float("agreement", agreement, 0.0, 1.0))
            ids = pair.tokenizer.encode(prompt)
            if not ids:
                raise gr.Error(f"The prompt has no words; use words from: {' '.join(WORDS)}")
            result = run_exactness(pair.target, pair.draft, ids, settings, "toy", pair.tokenizer, bugs,
                                   on_progress=report, time_budget_s=budget)
        else:
            if progress is not None:
                progress(0.0, desc="loading the bundled model")
            lm = _get_model(pool, "bundled")
            ids = _encode(lm, prompt, chat)
            draft = NGramDrafter() if setup == "ngram" else lm.model
            with _locked(lm):
                result = run_exactness(lm.model, draft, ids, settings, setup, lm.tokenizer, bugs,
                                       on_progress=report, time_budget_s=budget)
    except ValueError as e:
        raise gr.Error(str(e)) from e
    return exactness_figure(result), lab_verdict_md(result), lab_details_md(result)


def lab_verdict_md(result: LabResult) -> str:
    c = result.comparison
    icon = {"biased": "❌ Biased", "exact": "✅ No bias detected", "inconclusive": "❔ Inconclusive"}[c.verdict]
    return f"## {icon}\n{html.escape(c.message)}"


def lab_details_md(result: LabResult) -> str:
    c, o, s = result.comparison, result.outcomes, result.settings
    rate = o.n_runs / o.elapsed_s if o.elapsed_s > 0 else 0.0
    pv = "–" if c.p_value is None else f"{c.p_value:.3g}"
    chi = "–" if c.chi2 is None else f"{c.chi2:.1f} on {c.dof} degrees of freedom (bins with expected count < 5 pooled)"
    rows = [
        ("runs", f"{o.n_runs:,} of {o.n_requested:,} in {o.elapsed_s:.1f} s ({rate:,.0f} runs/s, "
                 f"{1000 / rate if rate else 0:.1f} ms per run)"),
        ("injected bugs", ", ".join(result.bugs) or "none (the correct engine)"),
        ("total-variation distance", f"{c.tv:.4f} (an exact sampler at this N: about {c.tv_noise:.4f})"),
        ("chi-square", chi),
        ("p-value", pv),
        ("first iterations", f"{o.drafted_runs:,} runs drafted; {o.tested:,} drafts tested, {o.accepted:,} "
                             f"accepted; {o.resampled:,} ended with a resampled token, {o.bonus:,} with a bonus"),
        ("settings", f"{s.n_tokens} token(s) examined, K = {s.k}, temperature {s.temperature:g}, top-k {s.top_k}, "
                     f"top-p {s.top_p:g}, seeds {s.seed}…{s.seed + o.n_runs - 1}"),
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {html.escape(b)} |" for a, b in rows)
    notes = "\n".join(f"- {html.escape(n)}" for n in result.notes)
    return f"{table}\n\n**Notes**\n\n{notes}"


# --- 2. simulator ---------------------------------------------------------------------------------

def _position_slider(trace: Trace | None, index: int | None, position: int | None = None) -> Any:
    """The draft-position slider of the selected iteration: 1..K+1 (the last is the bonus position)."""
    n = 1
    if trace is not None and trace.iterations and index is not None:
        n = len(trace.iterations[index].drafts) + 1
    value = n if position is None else min(max(int(position), 1), n)
    return gr.Slider(minimum=1, maximum=max(n, 2), value=value, step=1, interactive=n > 1,
                     label=f"draft position in this iteration (1…{n}; {n} = the bonus position)")


def _default_position(trace: Trace, index: int) -> int:
    """Where the iteration was decided (1-based): the rejected draft, or the bonus position."""
    it = trace.iterations[index]
    for j, d in enumerate(it.drafts):
        if d.tested and not d.accepted:
            return j + 1
    return len(it.drafts) + 1


def _toy_step(trace: Trace, index: int | None, position: int) -> Any:
    if index is None or not trace.iterations:
        return toy_step_figure(None)
    try:
        pair = pair_from_config(trace.config)
    except ValueError as e:
        raise gr.Error(str(e)) from e
    return toy_step_figure(step_view(pair, trace, index, position - 1))


def run_simulator(agreement: Any, prompt: Any, k: Any, temperature: Any, max_new_tokens: Any, seed: Any,
                  slow: bool) -> Iterator[tuple]:
    """Run the toy pair through the real engine, streaming every iteration into the Live viewer.
    Yields: viewer outputs (tokens, 7 plots, summary, iteration slider), toy figure, trace state,
    position slider."""
    pair = make_toy_pair(_float("agreement", agreement, 0.0, 1.0))
    try:
        ids = pair.tokenizer.encode(_prompt(prompt))
        cfg = SpecConfig(k=_int("K", k, 1, 16), temperature=_float("temperature", temperature, 0.0, 5.0),
                         max_new_tokens=_int("max new tokens", max_new_tokens, 1, SIM_MAX_NEW),
                         seed=_int("seed", seed, 0, 2**31), full_trace=True)
    except ValueError as e:
        raise gr.Error(str(e)) from e
    if not ids:
        raise gr.Error(f"The prompt has no words; use words from: {' '.join(WORDS)}")
    trace = None
    stream = stream_speculative(pair.target, pair.draft, ids, cfg, pair.tokenizer, prompt=prompt,
                                meta=pair_meta(pair))
    try:
        for trace in stream:
            if slow:
                i = len(trace.iterations) - 1
                pos = _default_position(trace, i)
                yield (*render_trace(trace, i), _toy_step(trace, i, pos), trace.to_dict(),
                       _position_slider(trace, i, pos))
                time.sleep(SLOW_MOTION_S)
    finally:
        stream.close()
    assert trace is not None
    trace.baseline = baseline_generate(pair.target, ids, cfg, pair.tokenizer)
    i = len(trace.iterations) - 1
    pos = _default_position(trace, i)
    yield (*render_trace(trace, i), _toy_step(trace, i, pos), trace.to_dict(), _position_slider(trace, i, pos))


def step_simulator(trace_dict: dict | None, value: float | None, delta: int) -> tuple:
    """prev / next / iteration slider: (iteration slider, tokens, plot-pq, plot-residual, toy figure,
    position slider), the position set to where the iteration was decided."""
    trace = parse_state(trace_dict)
    if trace is None:
        raise gr.Error("Nothing to step through yet: run the simulator first.")
    i = target_index(value, delta, len(trace.iterations))
    pos = _default_position(trace, i) if i is not None else 1
    return (*render_iteration(trace, i), _toy_step(trace, i, pos), _position_slider(trace, i, pos))


def sim_position(trace_dict: dict | None, value: float | None, position: Any) -> Any:
    """Position slider: the ten-word figure at that draft position of the selected iteration."""
    trace = parse_state(trace_dict)
    if trace is None or not trace.iterations:
        return toy_step_figure(None)
    i = target_index(value, 0, len(trace.iterations))
    return _toy_step(trace, i, int(position or 1))


def run_sim_sweep(k: Any, temperature: Any, n_tokens: Any, progress: Any = gr.Progress()) -> tuple[Any, Any]:
    """Acceptance vs agreement (11 levels) and the speedup table over alpha x c, measured on the toy pair."""
    k_ = _int("K", k, 1, 16)
    try:
        points = acceptance_vs_agreement(SIM_AGREEMENTS, k=k_, temperature=_float("temperature", temperature, 0.0, 5.0),
                                         n_tokens=_int("tokens per level", n_tokens, 20, 2000),
                                         on_progress=_reporter(progress, "agreement levels"))
    except ValueError as e:
        raise gr.Error(str(e)) from e
    headers, rows = speedup_table(points, SIM_C_VALUES, k_)
    return agreement_figure(points), gr.Dataframe(value=rows, headers=headers)


# --- 3. theory ------------------------------------------------------------------------------------

def measured_point(trace_dict: dict | None) -> MeasuredPoint | None:
    """The Live tab's latest run as (K, alpha-hat, c-hat, measured speedup), or None if there is none
    (or it has no drafts to estimate from)."""
    if not trace_dict:
        return None
    try:
        trace = Trace.from_dict(trace_dict)
    except ValueError:
        return None
    alpha, c = estimate_alpha(trace), estimate_c(trace)
    if alpha is None or c is None:
        return None
    return MeasuredPoint(int(trace.config.get("k", 1)), min(max(alpha, 0.0), 1.0), max(c, 0.0),
                         measured_speedup(trace))


def theory_md(k: int, c: float, point: MeasuredPoint | None) -> str:
    """The formulas, a worked example at the chosen K and c, and the latest run's numbers."""
    a = 0.8
    lines = [
        "**Exact** (Leviathan et al. 2023; each draft accepted with probability α, independently):",
        "$$E[\\text{tokens per iteration}] = \\frac{1-\\alpha^{K+1}}{1-\\alpha}, \\qquad "
        "\\text{speedup} = \\frac{E}{cK+1}$$",
        "An iteration costs K draft forwards (c each, in target-forward units) and one target forward, and "
        "always emits the accepted drafts **plus one** token (the resampled one, or the bonus).",
        "**Approximation** found in some write-ups: $$\\frac{\\alpha K + \\alpha^K}{cK+1}$$ It counts αK accepted "
        "drafts as if a rejection did not end the iteration, and forgets the token emitted on rejection. "
        "**The exact formula is the right one**; the approximation over-counts at high α and under-counts at "
        "low α.",
        f"At K = {k}, c = {c:g}: for α = {a} the exact speedup is ×{speedup(a, k, c):.2f}, the approximation "
        f"says ×{approximate_speedup(a, k, c):.2f}; break-even α = {break_even_alpha(k, c):.3f}; "
        f"best K for α = {a}: {optimal_k(a, c, THEORY_K_MAX)}.",
    ]
    if point is None:
        lines.append("_Run a prompt on the Live tab, then press “Place my latest run” to put it on these charts._")
    else:
        m = "no baseline in that run" if point.speedup is None else f"measured ×{point.speedup:.2f}"
        lines.append(f"**Your latest run**: K = {point.k}, α̂ = {point.alpha:.3f}, ĉ = {point.c:.3f} → exact formula "
                     f"×{speedup(point.alpha, point.k, point.c):.2f}, approximation "
                     f"×{approximate_speedup(point.alpha, point.k, point.c):.2f}, {m}. (ĉ is draft forward time / "
                     "verify forward time; on a CPU the verify of K tokens costs more than one target forward, "
                     "which the formula ignores.)")
    return "\n\n".join(lines)


def update_theory(k: Any, c: Any, trace_dict: dict | None, verify: Any = VERIFY_MEASURED) -> tuple[Any, Any, Any, str]:
    """(heatmap, speedup-vs-K curves, exact-vs-approximate figure, markdown) for K, c and the latest run
    (with its calibrated prediction, priced with the measured or the flat verify curve)."""
    k_ = _int("K", k, 1, THEORY_K_MAX)
    c_ = _float("c", c, 0.0, 1.0)
    point = cost_point(trace_dict, THEORY_K_MAX, verify)
    return (speedup_heatmap(k_, point), speedup_vs_k_figure(THEORY_ALPHAS, c_, THEORY_K_MAX, point),
            formula_figure(k_, c_, point), theory_md(k_, c_, point))


# --- 4. draft comparison and selection ------------------------------------------------------------

def target_choices(pool: Any) -> list[str]:
    """Targets to compare drafts for: the bundled model and every other model already loaded."""
    keys = ["bundled"] + [k for k in pool.loaded() if k != "bundled"]
    return keys


def refresh_targets(pool: Any) -> Any:
    """On opening the tab: the target list, with any model loaded since (e.g. from the Live tab)."""
    return gr.Dropdown(choices=target_choices(pool))


def _spec_config(k: Any, temperature: Any, max_new_tokens: Any, seed: Any) -> SpecConfig:
    try:
        return SpecConfig(k=_int("K", k, 1, 16), temperature=_float("temperature", temperature, 0.0, 5.0),
                          max_new_tokens=_int("max new tokens", max_new_tokens, 1, UI_MAX_NEW),
                          seed=_int("seed", seed, 0, 2**31), full_trace=False)
    except ValueError as e:
        raise gr.Error(f"Bad setting: {e}") from e


def selection_table(sel: Selection) -> tuple[list[str], list[list[Any]]]:
    headers = ["rank", "draft", "speedup", "tokens/s", "acceptance", "target forwards", "draft forwards",
               "same tokens as baseline"]
    rows = [["–", "baseline (target only)", "×1.00", f"{sel.mean_baseline_tokens_per_s:.1f}", "–",
             f"{sum(sel.baseline_forwards) / max(1, len(sel.baseline_forwards)):.1f}", "0", "–"]]
    for i, r in enumerate(sel.ranking):
        same = [x.same_as_baseline for x in r.runs]
        rows.append([str(i + 1), r.name, f"×{r.mean_speedup:.2f}", f"{r.mean_tokens_per_s:.1f}",
                     f"{r.mean_acceptance:.1%}", f"{r.mean_target_forwards:.1f}", f"{r.mean_draft_forwards:.1f}",
                     "–" if None in same else ("yes" if all(same) else "NO")])
    return headers, rows


def rejected_md(sel: Selection) -> str:
    if not sel.rejected:
        return "Every candidate passed the compatibility checks."
    rows = "\n".join(f"| {html.escape(r.name)} | {html.escape(r.check)} | {html.escape(r.message)} |"
                     for r in sel.rejected)
    return ("**Incompatible candidates (not run)**\n\n| candidate | failed check | why |\n|---|---|---|\n" + rows)


def selection_summary_md(sel: Selection, cfg: SpecConfig) -> str:
    if not sel.ranking:
        return "No compatible draft could be run."
    best = sel.ranking[0]
    verdict = (f"**Selected: {html.escape(best.name)}**, ×{best.mean_speedup:.2f} over the baseline"
               if best.mean_speedup > 1 else
               f"**No draft beats the baseline here**: the best, {html.escape(best.name)}, reaches ×{best.mean_speedup:.2f}; "
               "use plain decoding for this kind of prompt.")
    n = len(sel.prompts)
    return (f"{verdict} (mean of the measured speedup on {n} prompt{'s' if n != 1 else ''}; K = {cfg.k}, "
            f"temperature {cfg.temperature:g}, {cfg.max_new_tokens} new tokens, seed {cfg.seed}). "
            "Speedup = speculative tokens/s ÷ baseline tokens/s on the same prompt, both measured here.")


def _evaluate(pool: Any, target_key: str, prompts: list[str], chat: bool, cfg: SpecConfig,
              progress: Any) -> tuple[Any, Any, str, str]:
    if progress is not None:
        progress(0.0, desc="loading the target model")
    target = _get_model(pool, target_key or "bundled")
    cands = pool_candidates(pool, target)
    ids = [_encode(target, p, chat) for p in prompts]
    others = [pool.get(k) for k in pool.loaded() if k != target.key]
    try:
        with _locked(target, *others):
            sel = evaluate_drafts(target.model, target.tokenizer, cands, prompts, ids, cfg,
                                  on_progress=_reporter(progress, "generation runs"))
    except ValueError as e:
        raise gr.Error(str(e)) from e
    headers, rows = selection_table(sel)
    return compare_figure(sel), gr.Dataframe(value=rows, headers=headers), rejected_md(sel), \
        selection_summary_md(sel, cfg)


def run_compare(pool: Any, target_key: str, prompt: Any, chat: bool, k: Any, temperature: Any,
                max_new_tokens: Any, seed: Any, progress: Any = gr.Progress()) -> tuple[Any, Any, str, str]:
    """One prompt, every available draft and the baseline: (figure, table, failed checks, summary)."""
    cfg = _spec_config(k, temperature, max_new_tokens, seed)
    return _evaluate(pool, target_key, [_prompt(prompt)], chat, cfg, progress)


def parse_prompts(text: Any) -> list[str]:
    """One prompt per non-empty line, at most ``MAX_SELECTION_PROMPTS``."""
    if not isinstance(text, str):
        raise gr.Error("Give the prompts as text, one per line.")
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise gr.Error("Give at least one prompt (one per line).")
    if len(prompts) > MAX_SELECTION_PROMPTS:
        raise gr.Error(f"At most {MAX_SELECTION_PROMPTS} prompts (got {len(prompts)}): each one runs every draft.")
    return [_prompt(p) for p in prompts]


def run_selection(pool: Any, target_key: str, prompts_text: Any, chat: bool, k: Any, temperature: Any,
                  max_new_tokens: Any, seed: Any, progress: Any = gr.Progress()) -> tuple[Any, Any, str, str]:
    """Automatic selection: every candidate on a few prompts, ranked by mean measured speedup."""
    cfg = _spec_config(k, temperature, max_new_tokens, seed)
    return _evaluate(pool, target_key, parse_prompts(prompts_text), chat, cfg, progress)


# --- 5. K sweep -----------------------------------------------------------------------------------

def draft_choices(pool: Any) -> list[tuple[str, str]]:
    """Drafts for the K sweep: prompt lookup, the target itself, and every other loaded model."""
    return ([("prompt lookup (n-gram)", "ngram"), ("the target drafting for itself", "self")]
            + [(k, k) for k in pool.loaded() if k != "bundled"])


def refresh_sweep_choices(pool: Any) -> tuple[Any, Any]:
    return gr.Dropdown(choices=target_choices(pool)), gr.Dropdown(choices=draft_choices(pool))


def _sweep_draft(pool: Any, target: LoadedModel, key: str) -> tuple[Any, list[LoadedModel]]:
    """The drafter for ``key`` and the extra model to lock while it runs (none for n-gram / self)."""
    extra = [] if key in ("ngram", "self", target.key) else [_get_model(pool, key)]
    try:
        return make_drafter(pool, target, key), extra
    except ValueError as e:
        raise gr.Error(f"{key} cannot draft for {target.label}: {e}") from e


def ksweep_table(sw: KSweep) -> tuple[list[str], list[list[Any]]]:
    headers = ["K", "tokens/s", "speedup", "calibrated tokens/s", "naive closed form tokens/s", "acceptance",
               "mean α", "drafts / iteration", "tokens / iteration", "same tokens as baseline"]
    rows = []
    cal = sw.predicted_tokens_per_s or [None] * len(sw.runs)
    for r, t, p in zip(sw.runs, sw.theory_tokens_per_s, cal):
        s = r.tokens_per_s / sw.baseline_tokens_per_s if sw.baseline_tokens_per_s else 0.0
        rows.append([str(r.k) + (" ★" if r.k == sw.best_k else ""), f"{r.tokens_per_s:.1f}", f"×{s:.2f}",
                     "–" if p is None else f"{p:.1f}", "–" if t is None else f"{t:.1f}", f"{r.acceptance_rate:.1%}",
                     "–" if r.alpha is None else f"{r.alpha:.3f}", f"{r.drafts_per_iteration:.2f}",
                     f"{r.tokens_per_iteration:.2f}",
                     "–" if r.same_as_baseline is None else ("yes" if r.same_as_baseline else "NO")])
    return headers, rows


def ksweep_md(sw: KSweep) -> str:
    best = next(r for r in sw.runs if r.k == sw.best_k)
    s = best.tokens_per_s / sw.baseline_tokens_per_s if sw.baseline_tokens_per_s else 0.0
    parts = [f"**Best measured K = {sw.best_k}**: {best.tokens_per_s:.1f} tokens/s, ×{s:.2f} over the baseline "
             f"({sw.baseline_tokens_per_s:.1f} tokens/s)."]
    if sw.alpha is not None and sw.c is not None:
        parts.append(f"Closed form with the measured α̂ = {sw.alpha:.3f} and ĉ = {sw.c:.3f} (mean draft forward ÷ "
                     f"mean baseline one-token forward, {sw.baseline_token_ms:.1f} ms) picks K = {sw.theory_k()}. "
                     "Where measurement and formula part ways, the formula's assumptions show: it expects K drafts "
                     "every iteration (prompt lookup often proposes fewer, or none: see drafts / iteration), a "
                     "verify forward as cheap as one target forward (a K-token verify costs more on a CPU), and "
                     "the same α at every position.")
    if sw.predicted_tokens_per_s and sw.verify_ms:
        errs = [abs(p / r.tokens_per_s - 1) for p, r in zip(sw.predicted_tokens_per_s, sw.runs)
                if p is not None and r.tokens_per_s > 0]
        curve = ", ".join(f"{n}: {v:.0f}" for n, v in enumerate(sw.verify_ms, 1))
        parts.append(f"The **calibrated** curve drops those assumptions: per-position acceptance and drafts offered, "
                     f"the measured verify cost per tokens fed (ms: {curve}), draft cost, overhead and prefill; it is "
                     f"within {100 * max(errs):.0f} % of the measured tokens/s at every K here. Click "
                     "“calibrated, flat verify (GPU-like)” in the legend to see what a flat verify would give.")
    return " ".join(parts)


def run_ksweep(pool: Any, target_key: str, draft_key: str, prompt: Any, chat: bool, k_max: Any, temperature: Any,
               max_new_tokens: Any, seed: Any, progress: Any = gr.Progress()) -> tuple[Any, Any, str]:
    """K = 1..K_max on one prompt: (figure, table, summary)."""
    k_max_ = _int("K max", k_max, 1, KSWEEP_MAX_K)
    cfg = _spec_config(1, temperature, max_new_tokens, seed)
    prompt = _prompt(prompt)
    if progress is not None:
        progress(0.0, desc="loading the model")
    target = _get_model(pool, target_key or "bundled")
    draft, extra = _sweep_draft(pool, target, draft_key)
    ids = _encode(target, prompt, chat)
    try:
        with _locked(target, *extra):
            sw = k_sweep(target.model, draft, ids, cfg, list(range(1, k_max_ + 1)), target.tokenizer,
                         on_progress=_reporter(progress, "runs (baseline, then K = 1…)"))
    except ValueError as e:
        raise gr.Error(str(e)) from e
    headers, rows = ksweep_table(sw)
    return ksweep_figure(sw), gr.Dataframe(value=rows, headers=headers), ksweep_md(sw)


# --- layout ---------------------------------------------------------------------------------------

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]


def add_teaching_tabs(ctx: AppContext) -> None:
    """The five teaching tabs (call inside the app's ``gr.Tabs()``)."""
    pool = ctx.pool
    with gr.Tab("Exactness lab", id="lab"):
        _build_lab(pool)
    with gr.Tab("Simulator", id="simulator"):
        _build_simulator()
    with gr.Tab("Theory", id="theory") as theory_tab:
        _build_theory(ctx, theory_tab)
    with gr.Tab("Draft comparison", id="compare") as compare_tab:
        _build_compare(pool, compare_tab)
    with gr.Tab("K sweep", id="ksweep") as ksweep_tab:
        _build_ksweep(pool, ksweep_tab)


def _build_lab(pool: Any) -> None:
    gr.Markdown(
        "### Is speculative sampling exact? Check it.\n"
        "Run the real sampler N times for the next token (or two), and compare how often each outcome came out "
        "with the target's exact probabilities, computed from one forward pass. An exact sampler lands inside the "
        "error bars. Then **break it on purpose** with one switch and watch the bias appear.")
    setup0 = "toy"
    prompt0, chat0, n0 = LAB_DEFAULTS[setup0]
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            setup = gr.Dropdown(SETUP_CHOICES, value=setup0, label="target and draft", elem_id="lab-setup")
            prompt = gr.Textbox(value=prompt0, label="prompt (continued as plain text unless the chat template is on)",
                                lines=2, elem_id="lab-prompt",
                                info=f"toy vocabulary: {' '.join(WORDS)}")
            chat = gr.Checkbox(value=chat0, label="chat template", interactive=False, elem_id="lab-chat")
            agreement = gr.Slider(0, 1, value=0.2, step=0.05, label="toy agreement (1 = the draft equals the target)",
                                  elem_id="lab-agreement")
            n_tokens = gr.Radio([("the next token", 1), ("the next two tokens", 2)], value=1,
                                label="what to test", elem_id="lab-ntokens")
            with gr.Row():
                k = gr.Slider(1, 8, value=3, step=1, label="K", elem_id="lab-k")
                temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="temperature", elem_id="lab-temperature")
            with gr.Row():
                top_k = gr.Number(value=0, precision=0, minimum=0, label="top-k (0 = off)", elem_id="lab-topk")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.01, label="top-p (1 = off)", elem_id="lab-topp")
            n_runs = gr.Slider(10, LAB_MAX_RUNS[setup0], value=n0, step=10, label="runs N", elem_id="lab-n",
                               info=f"one run ≈ {MS_PER_RUN[setup0]} here; stops after "
                                    f"{LAB_TIME_BUDGET_S[setup0]:.0f} s")
            seed = gr.Number(value=0, precision=0, minimum=0, label="first seed", elem_id="lab-seed")
            with gr.Accordion("Break it on purpose: injected bugs (all off by default)", open=True,
                              elem_id="lab-bugs"):
                gr.Markdown("The switches live in one place in the engine, `specdec_core/bugs.py` (`InjectedBugs`), "
                            "and run through the real engine code. They are never on unless ticked here.")
                bug_resample = gr.Checkbox(False, label="on rejection, resample from p instead of norm(max(0, p − q))",
                                           elem_id="lab-bug-resample")
                bug_greedy = gr.Checkbox(False, label="draft greedily (argmax q) but accept with min(1, p/q)",
                                         elem_id="lab-bug-greedy")
                with gr.Row():
                    bug_mismatch = gr.Checkbox(False, label="sample drafts at a different temperature",
                                               elem_id="lab-bug-drafttemp")
                    bug_draft_t = gr.Slider(0.1, 3.0, value=2.0, step=0.05, label="draft temperature",
                                            elem_id="lab-bug-drafttemp-value")
                bug_drop = gr.Checkbox(False, label="drop the bonus token (a control: costs speed, keeps exactness)",
                                       elem_id="lab-bug-dropbonus")
            run = gr.Button("Run the test", variant="primary", elem_id="lab-run")
        with gr.Column(scale=2):
            plot = gr.Plot(exactness_figure(None), show_label=False, elem_id="lab-plot")
            verdict = gr.Markdown("", elem_id="lab-verdict")
            details = gr.Markdown("", elem_id="lab-details")
    setup.change(lab_setup_changed, [setup], [prompt, chat, n_runs, agreement])
    handler = gpu_task(_bound(run_lab, pool), duration=int(max(LAB_TIME_BUDGET_S.values())) + 60)
    run.click(handler, [setup, prompt, chat, agreement, n_tokens, k, temperature, top_k, top_p, n_runs, seed,
                        bug_resample, bug_greedy, bug_mismatch, bug_draft_t, bug_drop], [plot, verdict, details])


def _build_simulator() -> None:
    gr.Markdown(
        "### A ten-word world\n"
        f"Two tiny bigram “models” over ten words ({', '.join(WORDS)}): the target follows a little grammar; the "
        "draft mixes it with noise, and **agreement** sets how much. They run through the *same engine and trace* "
        "as the real models, so every Live figure works on them, instantly, with all ten probabilities visible. "
        "(Their wall clock is all Python overhead, so the race below says little about speed: the sweep table "
        "prices the forwards instead.)")
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            agreement = gr.Slider(0, 1, value=0.5, step=0.05, label="agreement (0 = unrelated draft, 1 = q equals p)",
                                  elem_id="sim-agreement")
            prompt = gr.Textbox(value="the cat", label="prompt (words from the vocabulary)", elem_id="sim-prompt")
            with gr.Row():
                k = gr.Slider(1, 8, value=4, step=1, label="K", elem_id="sim-k")
                temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="temperature", elem_id="sim-temperature")
            with gr.Row():
                max_new = gr.Slider(1, SIM_MAX_NEW, value=40, step=1, label="max new tokens", elem_id="sim-max-new")
                seed = gr.Number(value=0, precision=0, minimum=0, label="seed", elem_id="sim-seed")
            slow = gr.Checkbox(True, label="slow motion (one iteration every 0.35 s)", elem_id="sim-slow")
            run = gr.Button("Run the simulator", variant="primary", elem_id="sim-run")
        with gr.Column(scale=2):
            step_plot = gr.Plot(toy_step_figure(None), show_label=False, elem_id="sim-plot")
            position = gr.Slider(1, 2, value=1, step=1, interactive=False, label="draft position in this iteration",
                                 elem_id="sim-position")
    viewer = build_viewer(prefix="sim-")
    state = gr.State(None)
    outputs = [*viewer.outputs(), step_plot, state, position]
    run.click(run_simulator, [agreement, prompt, k, temperature, max_new, seed, slow], outputs)
    step_outputs = [*viewer.step_outputs(), step_plot, position]
    viewer.prev.click(functools.partial(step_simulator, delta=-1), [state, viewer.slider], step_outputs)
    viewer.next.click(functools.partial(step_simulator, delta=1), [state, viewer.slider], step_outputs)
    viewer.slider.release(functools.partial(step_simulator, delta=0), [state, viewer.slider], step_outputs)
    position.release(sim_position, [state, viewer.slider, position], [step_plot])
    gr.Markdown("### Sweeps on the toy pair\nOne run per agreement level (0, 0.1, …, 1) through the engine. Measured "
                "acceptance vs the exact α = Σ min(p, q); and a speedup table pricing the forwards the engine "
                "actually ran (target forward = 1, draft forward = c) next to the closed form.")
    with gr.Row():
        sk = gr.Slider(1, 8, value=4, step=1, label="K", elem_id="sim-sweep-k")
        st = gr.Slider(0.05, 2, value=1.0, step=0.05, label="temperature", elem_id="sim-sweep-temperature")
        sn = gr.Slider(50, 2000, value=400, step=50, label="tokens per level", elem_id="sim-sweep-tokens")
        sweep = gr.Button("Sweep agreement", variant="primary", elem_id="sim-sweep-run")
    sweep_plot = gr.Plot(agreement_figure([]), show_label=False, elem_id="sim-sweep-plot")
    table = gr.Dataframe(headers=["agreement", "α measured", "α exact"] + [f"c = {c:g}" for c in SIM_C_VALUES],
                         label="speedup: measured from the forwards run (closed form)", interactive=False,
                         elem_id="sim-speedup-table")
    sweep.click(run_sim_sweep, [sk, st, sn], [sweep_plot, table])


def _build_theory(ctx: AppContext, tab: Any) -> None:
    gr.Markdown("### Theory explorer\nThe closed form for the expected speedup, drawn over α, c and K, with your "
                "latest Live run placed on it next to its calibrated prediction (this device's measured verify "
                "curve, draft cost, overhead and prefill); below, where that run's time went.")
    k0, c0 = 4, 0.1
    with gr.Row():
        k = gr.Slider(1, THEORY_K_MAX, value=k0, step=1, label="K (heatmap and formulas)", elem_id="theory-k")
        c = gr.Slider(0, 1, value=c0, step=0.01, label="c = draft forward / target forward (curves)",
                      elem_id="theory-c")
        refresh = gr.Button("Place my latest run", elem_id="theory-refresh")
    heat, curves, formulas, md = update_theory(k0, c0, None)
    with gr.Row():
        heat_p = gr.Plot(heat, show_label=False, elem_id="theory-heatmap")
        curves_p = gr.Plot(curves, show_label=False, elem_id="theory-kcurves")
    with gr.Row():
        with gr.Column(scale=1):
            md_c = gr.Markdown(md, latex_delimiters=LATEX, elem_id="theory-md")
        with gr.Column(scale=1):
            formulas_p = gr.Plot(formulas, show_label=False, elem_id="theory-formulas")
    verify = build_cost_view(ctx.latest_trace, (refresh.click, tab.select))   # where the time went
    outs = [heat_p, curves_p, formulas_p, md_c]
    for trigger in (k.release, c.release, refresh.click, tab.select, verify.change):
        trigger(update_theory, [k, c, ctx.latest_trace, verify], outs)


def _build_compare(pool: Any, tab: Any) -> None:
    gr.Markdown("### Which draft should I use?\nRun one prompt with every draft available here (prompt lookup, the "
                "target drafting for itself, every other loaded model) next to the baseline; or let the automatic "
                "selection evaluate them on a few prompts and rank them by **measured** speedup. Candidates that "
                "fail a compatibility check are listed with the check they failed (the toy ten-word model is always "
                "offered, to show one).")
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            target = gr.Dropdown(target_choices(pool), value="bundled", label="target", elem_id="compare-target")
            prompt = gr.Textbox(value=COMPARE_PROMPTS[0], label="prompt (Compare)", lines=2, elem_id="compare-prompt")
            prompts = gr.Textbox(value="\n".join(COMPARE_PROMPTS), lines=4, elem_id="compare-prompts",
                                 label=f"prompts for the automatic selection (one per line, at most "
                                       f"{MAX_SELECTION_PROMPTS})")
            chat = gr.Checkbox(True, label="chat template", elem_id="compare-chat")
            with gr.Row():
                k = gr.Slider(1, 16, value=4, step=1, label="K", elem_id="compare-k")
                temperature = gr.Slider(0, 2, value=0.0, step=0.05, label="temperature (0 = greedy)",
                                        elem_id="compare-temperature")
            with gr.Row():
                max_new = gr.Slider(8, UI_MAX_NEW, value=48, step=8, label="max new tokens", elem_id="compare-max-new")
                seed = gr.Number(value=0, precision=0, minimum=0, label="seed", elem_id="compare-seed")
            with gr.Row():
                run = gr.Button("Compare on this prompt", variant="primary", elem_id="compare-run")
                select = gr.Button("Automatic selection", variant="secondary", elem_id="select-run")
        with gr.Column(scale=2):
            summary = gr.Markdown("", elem_id="compare-summary")
            plot = gr.Plot(compare_figure(None), show_label=False, elem_id="compare-plot")
            table = gr.Dataframe(headers=["rank", "draft", "speedup", "tokens/s", "acceptance", "target forwards",
                                          "draft forwards", "same tokens as baseline"], interactive=False,
                                 elem_id="compare-table")
            rejected = gr.Markdown("", elem_id="compare-rejected")
    outs = [plot, table, rejected, summary]
    run.click(gpu_task(_bound(run_compare, pool)), [target, prompt, chat, k, temperature, max_new, seed],
              outs)
    select.click(gpu_task(_bound(run_selection, pool), duration=300),
                 [target, prompts, chat, k, temperature, max_new, seed], outs)
    tab.select(functools.partial(refresh_targets, pool), None, [target])


def _build_ksweep(pool: Any, tab: Any) -> None:
    gr.Markdown("### Find the best K\nRun K = 1 … K_max on one prompt (same seed and settings), measure tokens/s and "
                "acceptance, and compare with the calibrated cost model and the naive closed form for the α and c "
                "measured in these runs.")
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            target = gr.Dropdown(target_choices(pool), value="bundled", label="target", elem_id="ksweep-target")
            draft = gr.Dropdown(draft_choices(pool), value="ngram", label="draft", elem_id="ksweep-draft")
            prompt = gr.Textbox(value=COMPARE_PROMPTS[0], label="prompt", lines=2, elem_id="ksweep-prompt")
            chat = gr.Checkbox(True, label="chat template", elem_id="ksweep-chat")
            k_max = gr.Slider(1, KSWEEP_MAX_K, value=8, step=1, label="K max", elem_id="ksweep-kmax")
            with gr.Row():
                temperature = gr.Slider(0, 2, value=0.0, step=0.05, label="temperature (0 = greedy)",
                                        elem_id="ksweep-temperature")
                max_new = gr.Slider(8, UI_MAX_NEW, value=48, step=8, label="max new tokens", elem_id="ksweep-max-new")
            seed = gr.Number(value=0, precision=0, minimum=0, label="seed", elem_id="ksweep-seed")
            run = gr.Button("Sweep K", variant="primary", elem_id="ksweep-run")
        with gr.Column(scale=2):
            md = gr.Markdown("", elem_id="ksweep-md")
            plot = gr.Plot(ksweep_figure(None), show_label=False, elem_id="ksweep-plot")
            table = gr.Dataframe(headers=["K", "tokens/s", "speedup", "calibrated tokens/s",
                                          "naive closed form tokens/s", "acceptance", "mean α",
                                          "drafts / iteration", "tokens / iteration", "same tokens as baseline"],
                                 interactive=False,
                                 elem_id="ksweep-table")
    run.click(gpu_task(_bound(run_ksweep, pool), duration=300),
              [target, draft, prompt, chat, k_max, temperature, max_new, seed], [plot, table, md])
    tab.select(functools.partial(refresh_sweep_choices, pool), None, [target, draft])
