"""The hardware what-if on the page: the latest Live run priced on other devices (``policy.roofline``), as a bar
figure and a table, next to the speedup measured here. A thin layer: the pricing is the engine's; the builders
are pure (Trace -> figure / markdown) and the handler reads the Live tab's latest trace.
"""
from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from specdec_core import Trace
from specdec_core.stats.intervals import describe, speedup_interval, verdict
from specdec_core.policy.costmodel import costs_from_traces
from specdec_core.policy.roofline import WhatIf, here_id, what_if

from components.render import palette as pal
from components.render.base import apply_layout, empty_figure

TITLE = "The same run on other hardware (roofline what-if)"


def whatif_rows(trace: Trace, gpu: str = "") -> list[WhatIf]:
    """This device as measured (the run's own costs with its calibration), then every profile."""
    calibration = (trace.calibration or {}).get("verify_ms")
    try:
        measured = costs_from_traces([trace], calibration)
    except ValueError:
        measured = None
    return what_if(trace, here=here_id(str(trace.config.get("device", "")), gpu), measured_costs=measured)


def whatif_figure(trace: Trace, rows: Sequence[WhatIf]) -> go.Figure:
    """Predicted speedup per device (bars), the measured speedup here with its interval (first bar), ×1 line."""
    if not rows:
        return empty_figure(TITLE, "Run a prompt on the Live tab (with the baseline), then come back.")
    fig = go.Figure()
    iv = speedup_interval(trace)
    if iv is not None:
        fig.add_trace(go.Bar(x=["measured speedup here"], y=[iv.point], marker_color=pal.ACCEPTED, name="measured",
                             error_y={"type": "data", "symmetric": False, "color": "#000",
                                      "array": [iv.high - iv.point], "arrayminus": [iv.point - iv.low]},
                             text=[f"×{iv.point:.2f}"], textposition="inside", insidetextanchor="start",
                             hovertext=[f"measured {describe(iv)}"], hoverinfo="text"))
    priced = [r for r in rows if r.speedup is not None]
    fig.add_trace(go.Bar(x=[r.label for r in priced], y=[r.speedup for r in priced], name="predicted",
                         marker_color=[pal.REJECTED if r.measured else pal.TARGET for r in priced],
                         text=[f"×{r.speedup:.2f}" for r in priced], textposition="outside",
                         hovertext=[f"{r.label}: predicted ×{r.speedup:.2f} (target forward {r.t1_ms:.2f} ms, draft "
                                    f"{r.draft_ms:.2f} ms)" for r in priced], hoverinfo="text"))
    fig.add_hline(y=1.0, line={"color": "#999", "dash": "dash", "width": 1})
    apply_layout(fig, TITLE, height=460, barmode="overlay", showlegend=False,
            subtitle="this run's acceptance and K decisions priced with t(n) = max(bytes ÷ bandwidth, FLOPs ÷ peak) "
                     "+ overhead per device; the measured bar carries its 95 % interval")
    fig.update_yaxes(title_text="speedup over target-only", rangemode="tozero")
    return fig


def whatif_md(trace: Trace, rows: Sequence[WhatIf]) -> str:
    """The table: device, basis, target forward, draft forward, predicted speedup."""
    iv = speedup_interval(trace)
    head = (f"**Measured here**: {html.escape(verdict(iv), quote=False)}." if iv is not None
            else "_No baseline in this run: nothing measured to set beside the predictions._")
    lines = [head, "", "| device | basis | target forward (1 token) | draft forward | predicted speedup |",
             "|---|---|---|---|---|"]
    for r in rows:
        basis = "measured costs (calibration)" if r.measured else "roofline, datasheet profile"
        s = "–" if r.speedup is None else f"×{r.speedup:.2f}"
        t1 = "–" if r.t1_ms is None else f"{r.t1_ms:.2f} ms"
        d = "–" if r.draft_ms is None else f"{r.draft_ms:.2f} ms"
        lines.append(f"| {html.escape(r.label, quote=False)} | {basis}{' — ' + r.note if r.note else ''} | {t1} | "
                     f"{d} | {s} |")
    lines += ["", "Every profile figure comes with its source (vendor datasheet, or a stated assumption) in "
              "`specdec_core/policy/devices.json`; the model's assumptions, its limits and its error on this CPU "
              "are in docs/cost-model.md. On a GPU a 135M model is bound by the framework's per-layer overhead, "
              "an assumption, more than by the datasheet figures."]
    return "\n".join(lines)
