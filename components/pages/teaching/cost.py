"""The cost model on the page: thin handlers (testable without a browser) that the Theory and K sweep
tabs wire to their controls — the "verify cost" switch (measured curve of this device, or flat as on a
GPU), the "where the time went" figure for the latest Live run, and the text that says why a CPU gains
less than a GPU would, with this run's numbers.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.stats.intervals import speedup_interval, verdict
from specdec_core.policy.closed_form import estimate_alpha, estimate_c
from specdec_core.policy.costmodel import costs_from_traces, predict_speedup, predicted_speedup_curve

from components.render.base import empty_figure
from components.render.cost import time_split_figure
from components.render.lab import MeasuredPoint
from components.render.measures import measured_speedup

VERIFY_MEASURED = "measured on this device"
VERIFY_FLAT = "flat (GPU-like)"
VERIFY_CHOICES = (VERIFY_MEASURED, VERIFY_FLAT)


def is_flat(choice: Any) -> bool:
    """The switch's value -> flat? Anything but the flat choice means the measured curve."""
    return choice == VERIFY_FLAT


def load_trace(trace_dict: dict | None) -> Trace | None:
    if not trace_dict:
        return None
    try:
        return Trace.from_dict(trace_dict)
    except ValueError:
        return None


def cost_point(trace_dict: dict | None, k_max: int, verify: Any = VERIFY_MEASURED) -> MeasuredPoint | None:
    """The latest run as a point on the Theory tab's curves, with its calibrated prediction for
    K = 1..k_max (priced with the measured or the flat verify curve)."""
    trace = load_trace(trace_dict)
    if trace is None:
        return None
    alpha, c = estimate_alpha(trace), estimate_c(trace)
    if alpha is None or c is None:
        return None
    flat = is_flat(verify)
    curve = predicted_speedup_curve(trace, k_max, flat=flat) or []
    label = "calibrated prediction, flat verify" if flat else "calibrated prediction for your run"
    return MeasuredPoint(int(trace.config.get("k", 1)), min(max(alpha, 0.0), 1.0), max(c, 0.0),
                         measured_speedup(trace), predicted=tuple(curve), predicted_label=label)


def time_figure(trace_dict: dict | None, verify: Any = VERIFY_MEASURED) -> go.Figure:
    trace = load_trace(trace_dict)
    if trace is None:
        return empty_figure("Where the time went", "Run a prompt on the Live tab (with the baseline), then come back.")
    return time_split_figure(trace, flat=is_flat(verify))


def cpu_note_md(trace_dict: dict | None) -> str:
    """Why a CPU gains less than a GPU, in words and in this run's numbers."""
    lines = ["**Why a CPU gains less.** The closed form E / (cK + 1) assumes a verify over K + 1 tokens costs "
             "the same as a one-token forward and that nothing else takes time. On a GPU the verify is nearly "
             "flat (the K + 1 tokens ride along in one pass that is limited by reading the weights). On this "
             "2-core CPU that holds only up to about 4 tokens: with SmolLM2-135M in float32 one forward of "
             "1 to 4 new tokens takes about the same (≈ 23–27 ms), but from 5 tokens on the matrix "
             "multiplies run out of arithmetic rather than memory bandwidth and the cost rises (≈ 45 ms for 8, "
             "≈ 90 ms for 17). So a long draft is paid for twice — by the drafter and by a dearer verify — "
             "and the cost-aware K policy reads that from the measured curve. Prefill and per-iteration host "
             "overhead are counted too."]
    trace = load_trace(trace_dict)
    if trace is None or not trace.iterations:
        return "\n\n".join(lines + ["_Run a prompt on the Live tab to see your run's numbers here._"])
    cal = (trace.calibration or {}).get("verify_ms")
    try:
        costs = costs_from_traces([trace], cal)
    except ValueError:
        return "\n\n".join(lines)
    n = min(len(costs.verify_ms), 9)
    curve = ", ".join(f"{i}: {costs.verify_ms[i - 1]:.0f}" for i in range(1, n + 1))
    source = "this run's verify times merged with the calibration pass" if cal else "this run's verify times"
    lines.append(f"**Your latest run** — t_verify(n) in ms for n tokens fed ({source}): {curve}; "
                 f"draft {costs.draft_ms:.1f} ms per {'forward' if costs.draft_per_token else 'lookup'}, "
                 f"overhead {costs.overhead_ms:.1f} ms per iteration, prefill {costs.prefill_ms:.0f} ms.")
    m = speedup_interval(trace)
    p, pf = predict_speedup(trace), predict_speedup(trace, flat=True)
    if m is not None and p is not None and pf is not None:
        lines.append(f"Measured speedup: {verdict(m)}; the calibrated model predicts ×{p:.2f}; with a flat "
                     f"(GPU-like) verify the same acceptance would give ×{pf:.2f}.")
    return "\n\n".join(lines)


def update_cost_view(trace_dict: dict | None, verify: Any) -> tuple[go.Figure, str]:
    """(where-the-time-went figure, explanation) for the Theory tab."""
    return time_figure(trace_dict, verify), cpu_note_md(trace_dict)


def build_cost_view(latest_trace: Any, triggers: Sequence[Any]) -> Any:
    """Inside a tab's Blocks: the verify-cost switch, the "where the time went" figure and the
    why-a-CPU-gains-less text for the latest Live run, refreshed by ``triggers`` (event listeners such as
    ``button.click``) and by the switch. Returns the switch so the tab can feed it to its own curves."""
    import gradio as gr
    verify = gr.Radio(list(VERIFY_CHOICES), value=VERIFY_MEASURED, elem_id="theory-verify",
                      label="verify cost in the calibrated model: measured on this device, or flat as on a GPU")
    with gr.Row():
        with gr.Column(scale=3):
            plot = gr.Plot(time_figure(None), show_label=False, elem_id="theory-time")
        with gr.Column(scale=2):
            md = gr.Markdown(cpu_note_md(None), elem_id="theory-cpu-md")
    for trigger in list(triggers) + [verify.change]:
        trigger(update_cost_view, [latest_trace, verify], [plot, md])
    return verify
