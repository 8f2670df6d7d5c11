"""The K sweep tab: K = 1 ... K_max measured on one prompt, with the closed-form curve for the measured
alpha and c and the best K marked; optionally a token tree of N = K nodes next to each chain of K drafts
(the same node budget, the same lockstep).

``build_ksweep_tab(pool, tab)`` lays it out; ``run_ksweep`` is the module-level handler (pool passed
explicitly). The logic lives in ``specdec_core.teaching.sweeps.k_sweep``.

Stable elem_ids: ksweep-run, ksweep-plot, ksweep-table, ksweep-md.
"""
from __future__ import annotations

import functools
from typing import Any

import gradio as gr

from specdec_core import LoadedModel
from specdec_core.config import DEFAULT_TREE_TOP_K, MAX_TREE_TOP_K
from specdec_core.drafters.registry import make_drafter
from specdec_core.stats.intervals import verdict
from specdec_core.limits import MAX_NEW_TOKENS
from specdec_core.teaching.sweeps import KRun, KSweep, k_sweep

from components.render.lab import ksweep_figure
from components.serving.gpu import gpu_task
from components.serving.inputs import as_int, make_config, prompt_ids
from components.serving.messages import page_error
from components.serving.models import bind_pool, get_model, locked, reporter, target_choices
from components.serving.pairs import COMPARE_PROMPTS

KSWEEP_MAX_K = 12


def draft_choices(pool: Any) -> list[tuple[str, str]]:
    """Drafts for the K sweep: prompt lookup, the target itself, and every other loaded model."""
    return ([("prompt lookup (n-gram)", "ngram"), ("the trained feature-reading draft (bundled target)", "feature"),
             ("the trained token-only draft (bundled target)", "trained"),
             ("the target drafting for itself", "self")]
            + [(k, k) for k in pool.loaded() if k != "bundled"])


def refresh_sweep_choices(pool: Any) -> tuple[Any, Any]:
    return gr.Dropdown(choices=target_choices(pool)), gr.Dropdown(choices=draft_choices(pool))


def _sweep_draft(pool: Any, target: LoadedModel, key: str) -> tuple[Any, list[LoadedModel]]:
    """The drafter for ``key`` and the extra model to lock while it runs (none for n-gram / self)."""
    extra = [] if key in ("ngram", "self", "trained", "feature", target.key) else [get_model(pool, key)]
    try:
        return make_drafter(pool, target, key), extra
    except (ValueError, RuntimeError) as e:
        raise page_error(f"{key} cannot draft for {target.label}: {e}") from e


HEADERS = ["K", "tokens/s", "speedup", "calibrated tokens/s", "naive closed form tokens/s", "acceptance", "mean α",
           "drafts / iteration", "tokens / iteration", "same tokens as baseline"]


def _row(sw: KSweep, label: str, r: KRun, calibrated: float | None = None, naive: float | None = None,
         tree: bool = False) -> list[Any]:
    """A table row; a tree run's mean α is left out (its recorded drafts are the accepted paths only)."""
    s = r.tokens_per_s / sw.baseline_tokens_per_s if sw.baseline_tokens_per_s else 0.0
    ci = "" if r.speedup is None else f" ({r.speedup.low:.2f}–{r.speedup.high:.2f})"
    return [label, f"{r.tokens_per_s:.1f}", f"×{s:.2f}{ci}", "–" if calibrated is None else f"{calibrated:.1f}",
            "–" if naive is None else f"{naive:.1f}", f"{r.acceptance_rate:.1%}",
            "–" if r.alpha is None or tree else f"{r.alpha:.3f}", f"{r.drafts_per_iteration:.2f}",
            f"{r.tokens_per_iteration:.2f}",
            "–" if r.same_as_baseline is None else ("yes" if r.same_as_baseline else "NO")]


def ksweep_table(sw: KSweep) -> tuple[list[str], list[list[Any]]]:
    """One row per K (the best starred), then one per tree run ("tree N = K"; drafts = nodes per iteration)."""
    cal = sw.predicted_tokens_per_s or [None] * len(sw.runs)
    rows = [_row(sw, str(r.k) + (" ★" if r.k == sw.best_k else ""), r, p, t)
            for r, t, p in zip(sw.runs, sw.theory_tokens_per_s, cal)]
    return list(HEADERS), rows + [_row(sw, f"tree N = {r.k}", r, tree=True) for r in sw.tree_runs]


def tree_md(sw: KSweep) -> str:
    """Chain vs tree at the same node budget, in one sentence ("" without tree runs)."""
    more = [t.tokens_per_iteration / c.tokens_per_iteration - 1 for c, t in zip(sw.runs, sw.tree_runs)
            if c.tokens_per_iteration > 0]
    if not more:
        return ""
    best = max(sw.tree_runs, key=lambda r: (r.tokens_per_s, -r.k))
    return (f"**Token trees at the same node budget**: a tree of N = K nodes gives "
            f"{100 * min(more):+.0f} % to {100 * max(more):+.0f} % tokens per iteration over the chain of K drafts; "
            f"the fastest tree, N = {best.k}, runs {best.tokens_per_s:.1f} tokens/s (its verify feeds N + 1 tokens "
            "and it drafts one level per draft forward, so more tokens per iteration pay only where those cost "
            "little).")


def ksweep_md(sw: KSweep) -> str:
    best = next(r for r in sw.runs if r.k == sw.best_k)
    s = best.tokens_per_s / sw.baseline_tokens_per_s if sw.baseline_tokens_per_s else 0.0
    parts = [f"**Best measured K = {sw.best_k}**: {best.tokens_per_s:.1f} tokens/s, ×{s:.2f} over the baseline "
             f"({sw.baseline_tokens_per_s:.1f} tokens/s)."]
    if best.speedup is not None:
        parts.append(f"At that K speculation {verdict(best.speedup)}; the speedup column gives each K's 95 % interval "
                     "(bootstrap over its iterations; the best of several Ks is the luckiest, so read it with care).")
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
    if tree := tree_md(sw):
        parts.append(tree)
    if sw.hindsight_tokens_per_s is not None:
        parts.append(f"Knowing the output, the best K for each iteration (prompt lookup's proposals follow from "
                     f"the text alone) would give **{sw.hindsight_tokens_per_s:.1f} tokens/s**, priced like the "
                     "calibrated curve: no K policy, fixed or adaptive, can do better under those costs (a measured "
                     "point can still land above it by the machine's timing noise).")
    return " ".join(parts)


def run_ksweep(pool: Any, target_key: str, draft_key: str, prompt: Any, chat: bool, k_max: Any, temperature: Any,
               max_new_tokens: Any, seed: Any, with_trees: bool = False, tree_top_k: Any = DEFAULT_TREE_TOP_K,
               progress: Any = gr.Progress()) -> tuple[Any, Any, str]:
    """K = 1..K_max on one prompt (and, ``with_trees``, a tree of N = K nodes for each): (figure, table, summary)."""
    k_max_ = as_int("K max", k_max, 1, KSWEEP_MAX_K)
    top_k = as_int("tree top-k", tree_top_k, 1, MAX_TREE_TOP_K) if with_trees else 0
    cfg = make_config(1, temperature, 0, 1.0, max_new_tokens, seed, full_trace=False)
    if progress is not None:
        progress(0.0, desc="loading the model")
    target = get_model(pool, target_key or "bundled")
    draft, extra = _sweep_draft(pool, target, draft_key)
    ids = prompt_ids(target, prompt, chat, cfg.max_new_tokens)
    try:
        with locked(target, *extra):
            sw = k_sweep(target.model, draft, ids, cfg, list(range(1, k_max_ + 1)), target.tokenizer,
                         on_progress=reporter(progress, "the baseline and every K, side by side", "tokens"),
                         tree_top_k=top_k)
    except (ValueError, RuntimeError) as e:
        raise page_error(str(e)) from e
    headers, rows = ksweep_table(sw)
    return ksweep_figure(sw), gr.Dataframe(value=rows, headers=headers), ksweep_md(sw)


def build_ksweep_tab(pool: Any, tab: Any) -> None:
    gr.Markdown("### Find the best K\nRun K = 1 … K_max on one prompt (same seed and settings), measure tokens/s and "
                "acceptance, and compare with the calibrated cost model and the naive closed form for the α and c "
                "measured in these runs. The runs and the target-only baseline advance side by side, one step at a "
                "time, so a moment when the machine is slow hits them all alike.")
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
                max_new = gr.Slider(8, MAX_NEW_TOKENS, value=48, step=8, label="max new tokens", elem_id="ksweep-max-new")
            seed = gr.Number(value=0, precision=0, minimum=0, label="seed", elem_id="ksweep-seed")
            with gr.Row():
                trees = gr.Checkbox(False, label="chain vs token tree: also a tree of N = K nodes at each K (the same "
                                                 "node budget)", elem_id="ksweep-trees")
                tree_top_k = gr.Slider(1, MAX_TREE_TOP_K, value=DEFAULT_TREE_TOP_K, step=1,
                                       label="tree top-k (most children per node)", elem_id="ksweep-tree-top-k")
            run = gr.Button("Sweep K", variant="primary", elem_id="ksweep-run")
        with gr.Column(scale=2):
            md = gr.Markdown("", elem_id="ksweep-md")
            plot = gr.Plot(ksweep_figure(None), show_label=False, elem_id="ksweep-plot")
            table = gr.Dataframe(headers=HEADERS, interactive=False, elem_id="ksweep-table")
    run.click(gpu_task(bind_pool(run_ksweep, pool), duration=300),
              [target, draft, prompt, chat, k_max, temperature, max_new, seed, trees, tree_top_k], [plot, table, md])
    tab.select(functools.partial(refresh_sweep_choices, pool), None, [target, draft])
