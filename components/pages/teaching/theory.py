"""The Theory tab: the closed-form expected speedup drawn over alpha, c and K, the exact formula next to
the common approximation, and the latest Live run placed on the charts; below, where its time went, the same run on
other hardware, and the speedup over batch size and K (a busy server).

``build_theory_tab(ctx, tab)`` lays it out; ``update_theory`` is the one handler.

Stable elem_ids: theory-k, theory-c, theory-refresh, theory-heatmap, theory-kcurves, theory-formulas, theory-md,
theory-verify, theory-time, theory-cpu-md (from ``cost.build_cost_view``), theory-whatif, theory-whatif-md (from
``whatif.build_whatif_view``), theory-batch-alpha, theory-batch-source, theory-batch, theory-batch-md (from
``batch_view.build_batch_view``: speedup over batch size and K).
"""
from __future__ import annotations

from typing import Any

import gradio as gr

from specdec_core.policy.closed_form import (approximate_speedup, break_even_alpha, optimal_k, speedup)

from components.pages.context import AppContext
from components.pages.teaching.batch_view import build_batch_view
from components.pages.teaching.cost import VERIFY_MEASURED, build_cost_view, cost_point
from components.pages.teaching.whatif import build_whatif_view
from components.render.lab import MeasuredPoint, formula_figure, speedup_heatmap, speedup_vs_k_figure
from components.serving.inputs import as_float, as_int

# --- theory ---------------------------------------------------------------------------------------
THEORY_ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
THEORY_K_MAX = 16
LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]


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
    k_ = as_int("K", k, 1, THEORY_K_MAX)
    c_ = as_float("c", c, 0.0, 1.0)
    point = cost_point(trace_dict, THEORY_K_MAX, verify)
    return (speedup_heatmap(k_, point), speedup_vs_k_figure(THEORY_ALPHAS, c_, THEORY_K_MAX, point),
            formula_figure(k_, c_, point), theory_md(k_, c_, point))


def build_theory_tab(ctx: AppContext, tab: Any) -> None:
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
    build_whatif_view(ctx.latest_trace, (refresh.click, tab.select))          # the same run on other hardware
    build_batch_view(ctx.latest_trace, (refresh.click, tab.select))           # batch size and K, break-even
    outs = [heat_p, curves_p, formulas_p, md_c]
    for trigger in (k.release, c.release, refresh.click, tab.select, verify.change):
        trigger(update_theory, [k, c, ctx.latest_trace, verify], outs)
