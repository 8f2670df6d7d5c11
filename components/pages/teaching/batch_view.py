"""The Theory tab's busy-server view: the predicted speedup over batch size B and K with the break-even line, the
best K per B, and the latest batched Live run placed on it (``render.batching.batch_theory_figure``).

Priced with the latest batched run's own prices where it recorded them (a cost-aware run does), else this machine's
batch prices measured in the background (``serving.batch_prices``: "measuring…" until they are there); the
acceptance is that run's, by draft position, or the α slider's. ``update_batch_view`` is the one handler.

Stable elem_ids: theory-batch-alpha, theory-batch-source, theory-batch, theory-batch-md.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.limits import MAX_BATCH
from specdec_core.policy.batch_cost import BatchPrices, crossover
from specdec_core.policy.costmodel import AcceptanceProfile, acceptance_profile

from components.pages.teaching.cost import load_trace
from components.render.batching import batch_run_point, batch_theory_figure, run_prediction
from components.serving.batch_prices import prices_now
from components.serving.inputs import as_float

SIZES = tuple(range(1, MAX_BATCH + 1))
FROM_RUN = "your latest batched run (measured by draft position)"
FROM_SLIDER = "the α slider"
SOURCES = (FROM_RUN, FROM_SLIDER)
ALPHA0 = 0.6
EXPLAIN = ("**The dashed line is the break-even, speedup = 1:** blue cells pay, red ones lose — there one verify of "
           "B × (K + 1) tokens costs more than the drafts give back, the forward being bound by arithmetic, not by "
           "reading the weights. Stars: the best K at each B, down to K = 0 (speculation off) where no K pays, as "
           "vLLM's dynamic speculative decoding lowers K while the server fills.")


def batch_prices_for(trace: Trace | None) -> tuple[BatchPrices | None, str, str]:
    """(prices, where they come from, what the chart says without them): the run's own recorded prices, else this
    machine's measured in the background."""
    recorded = trace.batch.prices if trace is not None and trace.batch is not None else None
    if recorded:
        try:
            return BatchPrices.from_dict(recorded), "your run's own prices", ""
        except ValueError:
            pass
    prices, waiting = prices_now()
    drafter = trace.config.get("drafter") if trace is not None else None
    other = f" (your run drafted with {drafter})" if drafter and drafter != "feature" else ""
    return prices, f"this machine's prices for the feature-reading draft{other}", waiting


def profile_for(trace: Trace | None, source: Any, alpha: float) -> tuple[AcceptanceProfile, str]:
    """The acceptance the chart prices with, and its words."""
    if source != FROM_SLIDER and trace is not None and trace.batch is not None:
        profile = acceptance_profile(trace.rows())
        if profile.accept:
            shown = ", ".join(f"{a:.2f}" for a in profile.accept[:4]) + (" …" if len(profile.accept) > 4 else "")
            return profile, f"your batched run's, by draft position ({shown})"
    return AcceptanceProfile.constant(alpha), f"α = {alpha:.2f} at every draft position"


def batch_md(prices: BatchPrices | None, profile: AcceptanceProfile, trace: Trace | None, where: str) -> str:
    lines = [EXPLAIN]
    if prices is not None:
        k_cap = prices.widths[-1] - 1
        b = crossover(prices, profile, k_cap, SIZES[-1])
        lines.append(f"Priced with {where}: drafting stops paying at B = {b}." if b is not None else
                     f"Priced with {where}: drafting still pays at B = {SIZES[-1]}.")
    point = batch_run_point(trace)
    if point is None:
        lines.append("_Run a batch on the Live tab, then press “Place my latest run” to put it on this chart._")
    else:
        m = "no baseline in that run" if point.speedup is None else f"measured ×{point.speedup:.2f}"
        if point.speedup is not None and point.interval is not None:
            m += f" (95 % CI {point.interval.low:.2f}–{point.interval.high:.2f})"
        pred = ""
        if prices is not None and point.k > 0:
            pred = f", predicted ×{run_prediction(prices, profile, point)[1]:.2f}"
        lines.append(f"**Your latest batched run**: B = {point.size}, K = {point.k:.2g}: {m}{pred}.")
    return "\n\n".join(html.escape(line, quote=False) for line in lines)


def update_batch_view(alpha: Any, source: Any, trace_dict: dict | None) -> tuple[go.Figure, str]:
    """(figure, text) for the α slider, the acceptance's source and the Live tab's latest trace."""
    a = as_float("α", alpha, 0.0, 1.0)
    trace = load_trace(trace_dict)
    if trace is not None and trace.batch is None:
        trace = None                              # a run of one sequence: nothing to place on (B, K)
    prices, where, waiting = batch_prices_for(trace)
    profile, words = profile_for(trace, source, a)
    fig = batch_theory_figure(prices, profile, SIZES, batch_run_point(trace), words, waiting)
    return fig, batch_md(prices, profile, trace, where)


def build_batch_view(latest_trace: Any, triggers: Sequence[Any]) -> None:
    """Inside the Theory tab's Blocks: the (B, K) chart, its controls and text; refreshed by ``triggers`` (the tab's
    selection and its "Place my latest run") and its own controls."""
    gr.Markdown("### A busy server: batch size B and K\nAt batch size B one verify feeds B × (K + 1) tokens. Where "
                "does speculation stop paying on this machine?")
    with gr.Row():
        alpha = gr.Slider(0, 1, value=ALPHA0, step=0.01, label="α: acceptance per draft (without a batched run)",
                          elem_id="theory-batch-alpha")
        source = gr.Radio(list(SOURCES), value=FROM_RUN, label="acceptance from", elem_id="theory-batch-source")
    fig, md = update_batch_view(ALPHA0, FROM_RUN, None)
    plot = gr.Plot(fig, show_label=False, elem_id="theory-batch")
    text = gr.Markdown(md, elem_id="theory-batch-md")
    for trigger in (*triggers, alpha.release, source.change):
        trigger(update_batch_view, [alpha, source, latest_trace], [plot, text])


__all__ = ["update_batch_view", "build_batch_view", "batch_prices_for", "profile_for", "batch_md", "SOURCES",
           "FROM_RUN", "FROM_SLIDER"]
