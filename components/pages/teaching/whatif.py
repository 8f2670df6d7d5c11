"""The hardware what-if on the Theory tab: the latest Live run priced on other devices, refreshed when a run
ends. The builders are ``render.whatif``'s; this module reads the Live tab's latest trace and lays them out."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.policy.roofline import gpu_name

from components.render.base import empty_figure
from components.render.whatif import TITLE, whatif_figure, whatif_md, whatif_rows


def update_whatif(trace_dict: dict | None) -> tuple[go.Figure, str]:
    """(figure, table) for the Live tab's latest run."""
    trace = None
    if trace_dict:
        try:
            trace = Trace.from_dict(trace_dict)
        except ValueError:
            trace = None
    if trace is None or not trace.iterations:
        return (empty_figure(TITLE, "Run a prompt on the Live tab (with the baseline), then come back."),
                "_Run a prompt on the Live tab to price it on other hardware._")
    rows = whatif_rows(trace, gpu_name())
    return whatif_figure(trace, rows), whatif_md(trace, rows)


def build_whatif_view(latest_trace: Any, triggers: Sequence[Any]) -> None:
    """Inside a tab's Blocks: the what-if figure and table for the latest Live run, refreshed by ``triggers``."""
    fig, md = update_whatif(None)
    plot = gr.Plot(fig, show_label=False, elem_id="theory-whatif")
    table = gr.Markdown(md, elem_id="theory-whatif-md")
    for trigger in triggers:
        trigger(update_whatif, [latest_trace], [plot, table])
