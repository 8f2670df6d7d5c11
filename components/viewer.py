"""The trace viewer shared by the Live and Replay tabs: token stream, step-through controls, the seven
figures and the summary. ``build_viewer`` lays the components out (inside a Blocks context); the
``render_*`` functions are pure and return the values for ``Viewer.outputs()``."""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import gradio as gr

from specdec_core import Trace

from .figures import FIGURE_IDS, all_figures, pq_figure, residual_figure, resolve_index
from .limits import prune_exports
from .summary import summary_html
from .tokens import tokens_html


@dataclass
class Viewer:
    tokens: gr.HTML
    prev: gr.Button
    slider: gr.Slider
    next: gr.Button
    plots: dict[str, gr.Plot]     # keyed by FIGURE_IDS
    summary: gr.HTML

    def outputs(self) -> list[Any]:
        """The order ``render_trace`` returns: tokens, the seven plots, summary, slider."""
        return [self.tokens, *(self.plots[k] for k in FIGURE_IDS), self.summary, self.slider]

    def step_outputs(self) -> list[Any]:
        """The order ``render_iteration`` returns: slider, tokens, plot-pq, plot-residual."""
        return [self.slider, self.tokens, self.plots["plot-pq"], self.plots["plot-residual"]]


def build_viewer(prefix: str = "") -> Viewer:
    """Lay out the viewer. ``prefix`` keeps elem_ids unique between tabs ("" for Live: #tokens, #plot-race...)."""
    tokens = gr.HTML(tokens_html(None), elem_id=f"{prefix}tokens")
    with gr.Row(equal_height=True):
        prev = gr.Button("◀ previous", elem_id=f"{prefix}prev", scale=0, min_width=120)
        slider = gr.Slider(minimum=1, maximum=2, value=1, step=1, label="iteration (step through)",
                           interactive=False, elem_id=f"{prefix}iteration", scale=4)
        nxt = gr.Button("next ▶", elem_id=f"{prefix}next", scale=0, min_width=120)
    plots: dict[str, gr.Plot] = {}
    with gr.Row():
        plots["plot-pq"] = gr.Plot(show_label=False, elem_id=f"{prefix}plot-pq")
        plots["plot-residual"] = gr.Plot(show_label=False, elem_id=f"{prefix}plot-residual")
    with gr.Row():
        with gr.Column(scale=1):
            summary = gr.HTML(summary_html(None), elem_id=f"{prefix}summary")
        with gr.Column(scale=1):
            plots["plot-race"] = gr.Plot(show_label=False, elem_id=f"{prefix}plot-race")
    plots["plot-timeline"] = gr.Plot(show_label=False, elem_id=f"{prefix}plot-timeline")
    with gr.Row():
        plots["plot-outcomes"] = gr.Plot(show_label=False, elem_id=f"{prefix}plot-outcomes")
        plots["plot-positions"] = gr.Plot(show_label=False, elem_id=f"{prefix}plot-positions")
    plots["plot-theory"] = gr.Plot(show_label=False, elem_id=f"{prefix}plot-theory")
    return Viewer(tokens, prev, slider, nxt, plots, summary)


def slider_update(trace: Trace | None, index: int | None) -> Any:
    """The step-through slider for a trace: 1..n, at ``index`` (0-based); disabled below two iterations
    (a Gradio slider needs minimum < maximum, so its range never shrinks below 1..2)."""
    n = len(trace.iterations) if trace is not None else 0
    return gr.Slider(minimum=1, maximum=max(n, 2), value=(index + 1) if index is not None else 1, step=1,
                     interactive=n > 1, label=f"iteration (step through: {n} in this run)" if n else
                     "iteration (step through)")


def render_trace(trace: Trace | None, index: int | None = None, message: str = "") -> tuple:
    """Everything the viewer shows, in ``Viewer.outputs()`` order. ``index`` = selected iteration (0-based)."""
    if trace is None:
        trace = Trace(config={"k": 1, "temperature": 0.0, "max_new_tokens": 1}, prompt="", prompt_ids=[])
    i = resolve_index(trace, index)
    return (tokens_html(trace, i, message), *all_figures(trace, i), summary_html(trace), slider_update(trace, i))


def render_iteration(trace: Trace | None, index: int | None) -> tuple:
    """After a step: (slider, tokens, plot-pq, plot-residual), in ``Viewer.step_outputs()`` order."""
    if trace is None:
        raise gr.Error("Nothing to step through yet: run a prompt (or load a trace) first.")
    i = resolve_index(trace, index)
    return slider_update(trace, i), tokens_html(trace, i), pq_figure(trace, i), residual_figure(trace, i)


def parse_state(trace_dict: dict | None) -> Trace | None:
    """A trace kept in a gr.State (as ``Trace.to_dict()``) back as a Trace; gr.Error if it is malformed."""
    if trace_dict is None:
        return None
    try:
        return Trace.from_dict(trace_dict)
    except ValueError as e:
        raise gr.Error(f"The stored trace is not valid: {e}") from e


def target_index(value: float | None, delta: int, n: int) -> int | None:
    """The 0-based iteration after moving ``delta`` from slider position ``value`` (1-based), clamped."""
    if n == 0:
        return None
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise gr.Error(f"The iteration must be a number between 1 and {n}, got {value!r:.80}")
    current = int(round(value)) - 1 if value is not None else n - 1
    return min(max(current + delta, 0), n - 1)


def step_view(trace_dict: dict | None, value: float | None, delta: int) -> tuple:
    """prev / next / slider handler: move ``delta`` iterations (0 = go to the slider's value)."""
    trace = parse_state(trace_dict)
    if trace is None:
        raise gr.Error("Nothing to step through yet: run a prompt (or load a trace) first.")
    return render_iteration(trace, target_index(value, delta, len(trace.iterations)))


EXPORT_MAX_AGE_S = 3600


def export_trace(trace_dict: dict | None, folder: str | None = None) -> str:
    """Write the trace as JSON to a new file and return its path (for a DownloadButton). Gradio copies it
    into its own cache when it is sent, so exports older than an hour are pruned here."""
    if trace_dict is None:
        raise gr.Error("Nothing to export yet: run a prompt first.")
    folder = folder or os.path.join(tempfile.gettempdir(), "specdec-exports")
    os.makedirs(folder, exist_ok=True)
    prune_exports(folder, EXPORT_MAX_AGE_S)          # bounded by age, size and count (components/limits.py)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    fd, path = tempfile.mkstemp(prefix=f"specdec-trace-{stamp}-", suffix=".json", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(trace_dict, f, ensure_ascii=False, indent=1)
    return path
