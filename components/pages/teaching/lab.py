"""The Exactness lab tab: run the real sampler N times for the next token (or two) and compare the
empirical frequencies with the target's exact distribution; switches inject classic bugs.

``build_lab_tab(pool)`` lays it out (call inside ``gr.Tab``); ``run_lab`` and the small handlers are
module-level functions the tests call without a browser. The logic lives in ``specdec_core.teaching.lab``, the
figure in ``render.lab``.

Stable elem_ids: lab-setup, lab-prompt, lab-chat, lab-run, lab-plot, lab-verdict, lab-details, lab-bug-*.
"""
from __future__ import annotations

import html
from typing import Any

import gradio as gr

from specdec_core import InjectedBugs, NGramDrafter, limits
from specdec_core.drafters.registry import SHIPPED, shipped_draft_for
from specdec_core.teaching.lab import LabResult, LabSettings, run_exactness
from specdec_core.teaching.toy import WORDS, make_toy_pair

from components.render.lab import exactness_figure
from components.serving.gpu import gpu_task
from components.serving.inputs import as_float, as_int, check_prompt, checked, prompt_ids
from components.serving.messages import page_error
from components.serving.models import bind_pool, get_model, locked, reporter

# --- exactness lab settings ----------------------------------------------------------------------
SETUP_CHOICES = [
    ("Toy 10-word pair: the draft disagrees with the target (instant)", "toy"),
    ("SmolLM2 (bundled) + prompt-lookup (n-gram) drafter", "ngram"),
    ("SmolLM2 (bundled) drafting for itself (q = p)", "self"),
    ("SmolLM2 (bundled) + its trained feature-reading draft (real p ≠ q)", "feature"),
    ("SmolLM2 (bundled) + its trained token-only draft (real p ≠ q)", "trained"),
]
LAB_DEFAULTS = {   # setup -> (prompt, chat template, default N)
    "toy": ("the cat", False, 3000),
    "ngram": ("one, two, three, four, five. one, two, three,", False, 200),
    "self": ("one, two, three, four, five. one, two, three,", False, 120),
    "trained": ("Tell me about the ocean.", True, 200),
    "feature": ("Tell me about the ocean.", True, 200),
}
LAB_MAX_RUNS = {"toy": 20_000, "ngram": 1_000, "self": 1_000, "trained": 1_000, "feature": 1_000}
LAB_TIME_BUDGET_S = {"toy": 120.0, "ngram": 240.0, "self": 240.0, "trained": 240.0, "feature": 240.0}
MS_PER_RUN = {"toy": "≈1–3 ms", "ngram": "≈0.2 s", "self": "≈0.4 s", "trained": "≈0.3 s",
              "feature": "≈0.3 s"}   # measured on 2 shared CPU cores


def lab_bugs(resample_from_p: bool, greedy_ratio: bool, mismatch: bool, draft_temperature: Any,
             drop_bonus: bool, noise_by_iteration: bool = False) -> InjectedBugs:
    """The UI's switches as an ``InjectedBugs`` (every one off unless ticked)."""
    dt = None
    if mismatch:
        dt = as_float("draft temperature", draft_temperature, 0.05, 5.0)
    return InjectedBugs(resample_from_p=bool(resample_from_p), greedy_draft_ratio_rule=bool(greedy_ratio),
                        draft_temperature=dt, drop_bonus=bool(drop_bonus),
                        coupled_noise_by_iteration=bool(noise_by_iteration))


def lab_setup_changed(setup: str) -> tuple[Any, Any, Any, Any]:
    """Setup selector: its example prompt, chat template, a default N sized for it, the agreement slider."""
    if setup not in LAB_DEFAULTS:
        raise page_error(f"unknown setup {setup!r}")
    prompt, chat, n = LAB_DEFAULTS[setup]
    return (gr.Textbox(value=prompt), gr.Checkbox(value=chat, interactive=setup != "toy"),
            gr.Slider(value=n, maximum=LAB_MAX_RUNS[setup],
                      info=f"one run ≈ {MS_PER_RUN[setup]} here; stops after {LAB_TIME_BUDGET_S[setup]:.0f} s"),
            gr.Slider(visible=setup == "toy"))


def run_lab(pool: Any, setup: str, prompt: Any, chat: bool, agreement: Any, n_tokens: Any, k: Any,
            temperature: Any, top_k: Any, top_p: Any, n_runs: Any, seed: Any, bug_resample: bool,
            bug_greedy: bool, bug_mismatch: bool, bug_draft_temperature: Any, bug_drop_bonus: bool,
            sampler: Any = "standard", bug_noise_by_iteration: bool = False,
            progress: Any = gr.Progress()) -> tuple[Any, str, str]:
    """Run the exactness experiment with the standard or the coupled rule (``sampler``). Returns (figure, verdict
    markdown, details markdown)."""
    if setup not in LAB_DEFAULTS:
        raise page_error(f"unknown setup {setup!r}")
    prompt = check_prompt(prompt)
    bugs = lab_bugs(bug_resample, bug_greedy, bug_mismatch, bug_draft_temperature, bug_drop_bonus,
                    bug_noise_by_iteration)
    settings = checked(LabSettings, n_tokens=as_int("tokens examined", n_tokens, 1, 2), k=checked(limits.check_k, k),
                       temperature=checked(limits.check_temperature, temperature),
                       top_k=checked(limits.check_top_k, top_k), top_p=checked(limits.check_top_p, top_p),
                       n_runs=as_int("runs", n_runs, 1, LAB_MAX_RUNS[setup]), seed=checked(limits.check_seed, seed),
                       sampler=checked(limits.check_sampler, sampler))
    budget = LAB_TIME_BUDGET_S[setup]
    report = reporter(progress, f"sampling {settings.n_runs:,} runs", "runs")
    try:
        if setup == "toy":
            pair = make_toy_pair(as_float("agreement", agreement, 0.0, 1.0))
            ids = pair.tokenizer.encode(prompt)
            if not ids:
                raise page_error(f"The prompt has no words; use words from: {' '.join(WORDS)}")
            result = run_exactness(pair.target, pair.draft, ids, settings, "toy", pair.tokenizer, bugs,
                                   on_progress=report, time_budget_s=budget)
        else:
            if progress is not None:
                progress(0.0, desc="loading the bundled model")
            lm = get_model(pool, "bundled")
            ids = prompt_ids(lm, prompt, chat, settings.n_tokens)
            draft = (NGramDrafter() if setup == "ngram" else
                     shipped_draft_for(setup, lm.model) if setup in SHIPPED else lm.model)
            with locked(lm):
                result = run_exactness(lm.model, draft, ids, settings, setup, lm.tokenizer, bugs,
                                       on_progress=report, time_budget_s=budget)
    except gr.Error:
        raise                        # already a message for the page (gr.Error is a ValueError)
    except (ValueError, RuntimeError) as e:
        raise page_error(str(e)) from e
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
        ("settings", f"{s.sampler} rule, {s.n_tokens} token(s) examined, K = {s.k}, temperature {s.temperature:g}, top-k {s.top_k}, "
                     f"top-p {s.top_p:g}, seeds {s.seed}…{s.seed + o.n_runs - 1}"),
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {html.escape(b)} |" for a, b in rows)
    notes = "\n".join(f"- {html.escape(n)}" for n in result.notes)
    return f"{table}\n\n**Notes**\n\n{notes}"


def build_lab_tab(pool: Any) -> None:
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
            sampler = gr.Radio([("standard: accept iff u < min(1, p/q)", "standard"),
                                ("coupled: shared noise by position (drafter-invariant)", "coupled")], value="standard",
                               label="verification rule", elem_id="lab-sampler")
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
                bug_noise = gr.Checkbox(False, label="coupled rule: key the noise by iteration, not by position (stays "
                                                     "exact, loses drafter invariance)", elem_id="lab-bug-noise")
            run = gr.Button("Run the test", variant="primary", elem_id="lab-run")
        with gr.Column(scale=2):
            plot = gr.Plot(exactness_figure(None), show_label=False, elem_id="lab-plot")
            verdict = gr.Markdown("", elem_id="lab-verdict")
            details = gr.Markdown("", elem_id="lab-details")
    setup.change(lab_setup_changed, [setup], [prompt, chat, n_runs, agreement])
    handler = gpu_task(bind_pool(run_lab, pool), duration=int(max(LAB_TIME_BUDGET_S.values())) + 60)
    run.click(handler, [setup, prompt, chat, agreement, n_tokens, k, temperature, top_k, top_p, n_runs, seed,
                        bug_resample, bug_greedy, bug_mismatch, bug_draft_t, bug_drop, sampler, bug_noise],
              [plot, verdict, details])
