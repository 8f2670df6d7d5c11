"""The teaching tabs, in order: Exactness lab, Simulator, Theory, Draft comparison, K sweep.

``add_teaching_tabs(ctx)`` is called by the app inside its ``gr.Tabs()``; each tab is its own module
(``lab``, ``simulator``, ``theory``, ``compare``, ``ksweep``) with its handlers as module-level functions;
``cost`` and ``whatif`` are the cost-model and hardware views the Theory and K sweep tabs share.
"""
from __future__ import annotations

import gradio as gr

from components.pages.context import AppContext
from components.pages.teaching.compare import build_compare_tab
from components.pages.teaching.ksweep import build_ksweep_tab
from components.pages.teaching.lab import build_lab_tab
from components.pages.teaching.simulator import build_simulator_tab
from components.pages.teaching.theory import build_theory_tab


def add_teaching_tabs(ctx: AppContext) -> None:
    """The five teaching tabs (call inside the app's ``gr.Tabs()``)."""
    pool = ctx.pool
    with gr.Tab("Exactness lab", id="lab"):
        build_lab_tab(pool)
    with gr.Tab("Simulator", id="simulator") as simulator_tab:
        build_simulator_tab(simulator_tab)
    with gr.Tab("Theory", id="theory") as theory_tab:
        build_theory_tab(ctx, theory_tab)
    with gr.Tab("Draft comparison", id="compare") as compare_tab:
        build_compare_tab(pool, compare_tab)
    with gr.Tab("K sweep", id="ksweep") as ksweep_tab:
        build_ksweep_tab(pool, ksweep_tab)
