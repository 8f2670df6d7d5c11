"""The batch's views on the Live and Replay tabs, shown for a batched run's trace ("specdec-trace/2") and hidden
for a single run's: every row's tokens side by side, the per-row and pooled summary (the per-draft acceptance rate
and the mean acceptance length, the pooled speedup, every row against its baseline row), the batch's forwards
and its acceptance per row (``render.batch``). The step-through viewer below them shows row 1, your request.

``build_batch_views`` lays them out (inside a Blocks context); ``batch_updates`` and ``batch_baseline_updates``
are pure and return their values for a trace in ``BatchViews.outputs()`` order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from specdec_core import Trace

from components.render.batch import batch_acceptance_figure, batch_summary_html, batch_timeline_figure, rows_html

N_BATCH_OUTPUTS = 4       # rows, summary, timeline, acceptance
MIN_COLUMN_PX = 320       # the summary and the acceptance figure share a row down to this width each


@dataclass
class BatchViews:
    rows: gr.HTML
    summary: gr.HTML
    timeline: gr.Plot
    acceptance: gr.Plot

    def outputs(self) -> list[Any]:
        return [self.rows, self.summary, self.timeline, self.acceptance]


def _batched(trace: Trace | None) -> bool:
    return trace is not None and trace.batch is not None


def build_batch_views(prefix: str = "", initial: Trace | None = None) -> BatchViews:
    """Lay the views out, ``#{prefix}batch-rows``, ``#{prefix}batch-summary``, ``#{prefix}plot-batch-timeline``,
    ``#{prefix}plot-batch-acceptance``: visible with ``initial``'s batch, hidden until a batched trace comes."""
    shown = _batched(initial)
    rows = gr.HTML(rows_html(initial) if shown else "", visible=shown, elem_id=f"{prefix}batch-rows")
    with gr.Row():                 # side by side on a wide page, one under the other on a phone
        with gr.Column(scale=1, min_width=MIN_COLUMN_PX):
            summary = gr.HTML(batch_summary_html(initial) if shown else "", visible=shown,
                              elem_id=f"{prefix}batch-summary")
        with gr.Column(scale=1, min_width=MIN_COLUMN_PX):
            acceptance = gr.Plot(batch_acceptance_figure(initial) if shown else None, visible=shown,
                                 show_label=False, elem_id=f"{prefix}plot-batch-acceptance")
    timeline = gr.Plot(batch_timeline_figure(initial) if shown else None, visible=shown, show_label=False,
                       elem_id=f"{prefix}plot-batch-timeline")
    return BatchViews(rows, summary, timeline, acceptance)


def batch_updates(trace: Trace | None, full: bool = True) -> tuple:
    """The views for ``trace``: shown with its batch (the two figures only on a ``full`` update), hidden for a
    trace without one (on a full update; a light one leaves them)."""
    skip = gr.skip()
    if not _batched(trace):
        if not full:
            return (skip,) * N_BATCH_OUTPUTS
        return gr.HTML(visible=False), gr.HTML(visible=False), gr.Plot(visible=False), gr.Plot(visible=False)
    return (gr.HTML(rows_html(trace), visible=True), gr.HTML(batch_summary_html(trace), visible=True),
            gr.Plot(batch_timeline_figure(trace), visible=True) if full else skip,
            gr.Plot(batch_acceptance_figure(trace), visible=True) if full else skip)


def batch_baseline_updates(trace: Trace, full: bool) -> tuple:
    """While the baseline streams only the summary and (on a full update) the timeline's baseline lane change."""
    skip = gr.skip()
    if not _batched(trace):
        return (skip,) * N_BATCH_OUTPUTS
    return skip, batch_summary_html(trace), batch_timeline_figure(trace) if full else skip, skip


__all__ = ["BatchViews", "N_BATCH_OUTPUTS", "build_batch_views", "batch_updates", "batch_baseline_updates"]
