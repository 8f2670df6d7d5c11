"""The Draft comparison tab: one prompt with every available draft next to the baseline, and an
automatic selection ranking candidate drafts by measured speedup (incompatible ones listed with the
check they failed).

``build_compare_tab(pool, tab)`` lays it out; ``run_compare`` / ``run_selection`` are module-level
handlers with the pool passed explicitly. The logic lives in ``specdec_core.teaching.sweeps``.

Stable elem_ids: compare-run, select-run, compare-plot, compare-table, compare-rejected, compare-summary.
"""
from __future__ import annotations

import functools
import html
from typing import Any

import gradio as gr

from specdec_core import SpecConfig
from specdec_core.stats.intervals import verdict as speedup_verdict
from specdec_core.limits import MAX_NEW_TOKENS
from specdec_core.teaching.sweeps import Selection, evaluate_drafts, pool_candidates

from components.render.lab import compare_figure
from components.serving.gpu import gpu_task
from components.serving.inputs import check_prompt, make_config, prompt_ids
from components.serving.messages import page_error
from components.serving.models import bind_pool, get_model, locked, reporter, target_choices
from components.serving.pairs import COMPARE_PROMPTS

MAX_SELECTION_PROMPTS = 5


def refresh_targets(pool: Any) -> Any:
    """On opening the tab: the target list, with any model loaded since (e.g. from the Live tab)."""
    return gr.Dropdown(choices=target_choices(pool))


def selection_table(sel: Selection) -> tuple[list[str], list[list[Any]]]:
    headers = ["rank", "draft", "speedup", "tokens/s", "acceptance", "target forwards", "draft forwards",
               "same tokens as baseline"]
    rows = [["–", "baseline (target only)", "×1.00", f"{sel.mean_baseline_tokens_per_s:.1f}", "–",
             f"{sum(sel.baseline_forwards) / max(1, len(sel.baseline_forwards)):.1f}", "0", "–"]]
    for i, r in enumerate(sel.ranking):
        same = [x.same_as_baseline for x in r.runs]
        iv = r.interval
        ci = "" if iv is None else f" (95 % CI {iv.low:.2f}–{iv.high:.2f})"
        rows.append([str(i + 1), r.name, f"×{r.mean_speedup:.2f}{ci}", f"{r.mean_tokens_per_s:.1f}",
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
    sure = ("" if best.interval is None
            else f" With its interval, {html.escape(best.name)} {speedup_verdict(best.interval)}.")
    return (f"{verdict} (mean of the measured speedup on {n} prompt{'s' if n != 1 else ''}; K = {cfg.k}, "
            f"temperature {cfg.temperature:g}, {cfg.max_new_tokens} new tokens, seed {cfg.seed}).{sure} "
            "Speedup = speculative tokens/s ÷ baseline tokens/s on the same prompt, both measured here; the interval "
            "is a t interval over the prompts (geometric mean), or for one prompt a bootstrap over its iterations.")


def _evaluate(pool: Any, target_key: str, prompts: list[str], chat: bool, cfg: SpecConfig,
              progress: Any) -> tuple[Any, Any, str, str]:
    if progress is not None:
        progress(0.0, desc="loading the target model")
    target = get_model(pool, target_key or "bundled")
    ids = [prompt_ids(target, p, chat, cfg.max_new_tokens) for p in prompts]    # refused before any draft loads
    cands = pool_candidates(pool, target)
    others = [pool.get(k) for k in pool.loaded() if k != target.key]
    try:
        with locked(target, *others):
            sel = evaluate_drafts(target.model, target.tokenizer, cands, prompts, ids, cfg,
                                  on_progress=reporter(progress, "generation runs", "runs"))
    except ValueError as e:
        raise page_error(str(e)) from e
    headers, rows = selection_table(sel)
    return compare_figure(sel), gr.Dataframe(value=rows, headers=headers), rejected_md(sel), \
        selection_summary_md(sel, cfg)


def run_compare(pool: Any, target_key: str, prompt: Any, chat: bool, k: Any, temperature: Any,
                max_new_tokens: Any, seed: Any, progress: Any = gr.Progress()) -> tuple[Any, Any, str, str]:
    """One prompt, every available draft and the baseline: (figure, table, failed checks, summary)."""
    cfg = make_config(k, temperature, 0, 1.0, max_new_tokens, seed, full_trace=False)
    return _evaluate(pool, target_key, [check_prompt(prompt)], chat, cfg, progress)


def parse_prompts(text: Any) -> list[str]:
    """One prompt per non-empty line, at most ``MAX_SELECTION_PROMPTS``."""
    if not isinstance(text, str):
        raise page_error("Give the prompts as text, one per line.")
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise page_error("Give at least one prompt (one per line).")
    if len(prompts) > MAX_SELECTION_PROMPTS:
        raise page_error(f"At most {MAX_SELECTION_PROMPTS} prompts (got {len(prompts)}): each one runs every draft.")
    return [check_prompt(p) for p in prompts]


def run_selection(pool: Any, target_key: str, prompts_text: Any, chat: bool, k: Any, temperature: Any,
                  max_new_tokens: Any, seed: Any, progress: Any = gr.Progress()) -> tuple[Any, Any, str, str]:
    """Automatic selection: every candidate on a few prompts, ranked by mean measured speedup."""
    cfg = make_config(k, temperature, 0, 1.0, max_new_tokens, seed, full_trace=False)
    return _evaluate(pool, target_key, parse_prompts(prompts_text), chat, cfg, progress)


def build_compare_tab(pool: Any, tab: Any) -> None:
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
                max_new = gr.Slider(8, MAX_NEW_TOKENS, value=48, step=8, label="max new tokens", elem_id="compare-max-new")
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
    run.click(gpu_task(bind_pool(run_compare, pool)), [target, prompt, chat, k, temperature, max_new, seed],
              outs)
    select.click(gpu_task(bind_pool(run_selection, pool), duration=300),
                 [target, prompts, chat, k, temperature, max_new, seed], outs)
    tab.select(functools.partial(refresh_targets, pool), None, [target])
