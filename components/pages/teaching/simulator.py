"""The Simulator tab: a ten-word toy target and draft, with the agreement set by a slider, run through
the same engine and trace as the real models and shown with the Live tab's viewer; plus sweeps of
acceptance vs agreement and a speedup table over alpha x c.

``build_simulator_tab()`` lays it out; the handlers are module-level functions (tests call them
without a browser). The toy pair lives in ``specdec_core.teaching.toy``.

Stable elem_ids: sim-run, sim-plot, sim-position, sim-sweep-run, sim-sweep-plot, sim-speedup-table (and the
viewer's sim-tokens, sim-iteration, sim-plot-pq, ...).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from specdec_core import Trace, limits
from specdec_core.decoding.baseline import baseline_generate
from specdec_core.decoding.engine import stream_speculative
from specdec_core.teaching.sweeps import acceptance_vs_agreement, speedup_table
from specdec_core.teaching.toy import WORDS, make_toy_pair, pair_from_config, pair_meta, step_view

from components.pages.viewer import (N_VIEW_OUTPUTS, build_viewer, parse_state, render_iteration, render_trace,
                                     target_index)
from components.render.base import instructive_index
from components.render.lab import agreement_figure, toy_step_figure
from components.serving.inputs import as_float, as_int, check_prompt, checked, make_config
from components.serving.messages import page_error
from components.serving.models import reporter

# --- simulator ------------------------------------------------------------------------------------
SIM_MAX_NEW = 200
SIM_AGREEMENTS = tuple(i / 10 for i in range(11))
SIM_C_VALUES = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
SLOW_MOTION_S = 0.35


def _position_slider(trace: Trace | None, index: int | None, position: int | None = None) -> Any:
    """The draft-position slider of the selected iteration: 1..K+1 (the last is the bonus position)."""
    n = 1
    if trace is not None and trace.iterations and index is not None:
        n = len(trace.iterations[index].drafts) + 1
    value = n if position is None else min(max(int(position), 1), n)
    return gr.Slider(minimum=1, maximum=max(n, 2), value=value, step=1, interactive=n > 1,
                     label=f"draft position in this iteration (1…{n}; {n} = the bonus position)")


def _default_position(trace: Trace, index: int) -> int:
    """Where the iteration was decided (1-based): the rejected draft, or the bonus position."""
    it = trace.iterations[index]
    for j, d in enumerate(it.drafts):
        if d.tested and not d.accepted:
            return j + 1
    return len(it.drafts) + 1


def _toy_step(trace: Trace, index: int | None, position: int) -> Any:
    if index is None or not trace.iterations:
        return toy_step_figure(None)
    try:
        pair = pair_from_config(trace.config)
    except ValueError as e:
        raise page_error(str(e)) from e
    return toy_step_figure(step_view(pair, trace, index, position - 1))


def run_simulator(agreement: Any, prompt: Any, k: Any, temperature: Any, max_new_tokens: Any, seed: Any,
                  slow: bool) -> Iterator[tuple]:
    """Run the toy pair through the real engine, streaming every iteration into the Live viewer.
    Yields: viewer outputs (tokens, 7 plots, summary, iteration slider), toy figure, trace state,
    position slider."""
    pair = make_toy_pair(as_float("agreement", agreement, 0.0, 1.0))
    ids = checked(pair.tokenizer.encode, check_prompt(prompt))
    cfg = make_config(k, temperature, 0, 1.0, max_new_tokens, seed)
    if not ids:
        raise page_error(f"The prompt has no words; use words from: {' '.join(WORDS)}")
    trace = None
    stream = stream_speculative(pair.target, pair.draft, ids, cfg, pair.tokenizer, prompt=prompt,
                                meta=pair_meta(pair))
    try:
        for trace in stream:
            if slow:
                i = len(trace.iterations) - 1
                pos = _default_position(trace, i)
                yield (*render_trace(trace, i), _toy_step(trace, i, pos), trace.to_dict(),
                       _position_slider(trace, i, pos))
                time.sleep(SLOW_MOTION_S)
    finally:
        stream.close()
    assert trace is not None
    trace.baseline = baseline_generate(pair.target, ids, cfg, pair.tokenizer)
    i = instructive_index(trace)
    pos = _default_position(trace, i)
    yield (*render_trace(trace, i), _toy_step(trace, i, pos), trace.to_dict(), _position_slider(trace, i, pos))


def simulator_on_open(trace_dict: dict | None, *settings: Any) -> Iterator[tuple]:
    """The tab opens: a first run with the settings shown, so the viewer is never a column of empty frames;
    nothing when a run is already there."""
    if trace_dict is None:
        yield from run_simulator(*settings)
    else:
        yield (gr.skip(),) * (N_VIEW_OUTPUTS + 3)      # + the toy figure, the trace state, the position


def step_simulator(trace_dict: dict | None, value: float | None, delta: int) -> tuple:
    """prev / next / iteration slider: (iteration slider, tokens, plot-pq, plot-residual, toy figure,
    position slider), the position set to where the iteration was decided."""
    trace = parse_state(trace_dict)
    if trace is None:
        raise page_error("Nothing to step through yet: run the simulator first.")
    i = target_index(value, delta, len(trace.iterations))
    pos = _default_position(trace, i) if i is not None else 1
    return (*render_iteration(trace, i), _toy_step(trace, i, pos), _position_slider(trace, i, pos))


def sim_position(trace_dict: dict | None, value: float | None, position: Any) -> Any:
    """Position slider: the ten-word figure at that draft position of the selected iteration."""
    trace = parse_state(trace_dict)
    if trace is None or not trace.iterations:
        return toy_step_figure(None)
    i = target_index(value, 0, len(trace.iterations))
    return _toy_step(trace, i, int(position or 1))


def run_sim_sweep(k: Any, temperature: Any, n_tokens: Any, progress: Any = gr.Progress()) -> tuple[Any, Any]:
    """Acceptance vs agreement (11 levels) and the speedup table over alpha x c, measured on the toy pair."""
    k_ = checked(limits.check_k, k)
    try:
        points = acceptance_vs_agreement(SIM_AGREEMENTS, k=k_, temperature=checked(limits.check_temperature, temperature),
                                         n_tokens=as_int("tokens per level", n_tokens, 20, 2000),
                                         on_progress=reporter(progress, "agreement levels"))
    except ValueError as e:
        raise page_error(str(e)) from e
    headers, rows = speedup_table(points, SIM_C_VALUES, k_)
    return agreement_figure(points), gr.Dataframe(value=rows, headers=headers)


def build_simulator_tab(tab: gr.Tab | None = None) -> None:
    """The Simulator's components and events (call inside its ``gr.Tab``, passed as ``tab``: opening it
    runs the simulator once)."""
    gr.Markdown(
        "### A ten-word world\n"
        f"Two tiny bigram “models” over ten words ({', '.join(WORDS)}): the target follows a little grammar; the "
        "draft mixes it with noise, and **agreement** sets how much. They run through the *same engine and trace* "
        "as the real models, so every Live figure works on them, instantly, with all ten probabilities visible. "
        "(Their wall clock is all Python overhead, so the race below says little about speed: the sweep table "
        "prices the forwards instead.)")
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            agreement = gr.Slider(0, 1, value=0.5, step=0.05, label="agreement (0 = unrelated draft, 1 = q equals p)",
                                  elem_id="sim-agreement")
            prompt = gr.Textbox(value="the cat", label="prompt (words from the vocabulary)", elem_id="sim-prompt")
            with gr.Row():
                k = gr.Slider(1, 8, value=4, step=1, label="K", elem_id="sim-k")
                temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="temperature", elem_id="sim-temperature")
            with gr.Row():
                max_new = gr.Slider(1, SIM_MAX_NEW, value=40, step=1, label="max new tokens", elem_id="sim-max-new")
                seed = gr.Number(value=0, precision=0, minimum=0, label="seed", elem_id="sim-seed")
            slow = gr.Checkbox(True, label="slow motion (one iteration every 0.35 s)", elem_id="sim-slow")
            run = gr.Button("Run the simulator", variant="primary", elem_id="sim-run")
        with gr.Column(scale=2):
            step_plot = gr.Plot(toy_step_figure(None), show_label=False, elem_id="sim-plot")
            position = gr.Slider(1, 2, value=1, step=1, interactive=False, label="draft position in this iteration",
                                 elem_id="sim-position")
    viewer = build_viewer(prefix="sim-")
    state = gr.State(None)
    outputs = [*viewer.outputs(), step_plot, state, position]
    settings = [agreement, prompt, k, temperature, max_new, seed, slow]
    run.click(run_simulator, settings, outputs)
    if tab is not None:
        tab.select(simulator_on_open, [state, *settings], outputs, show_progress="hidden")
    viewer.wire_steps(step_simulator, state, outputs=[*viewer.step_outputs(), step_plot, position])
    position.release(sim_position, [state, viewer.slider, position], [step_plot])
    gr.Markdown("### Sweeps on the toy pair\nOne run per agreement level (0, 0.1, …, 1) through the engine. Measured "
                "acceptance vs the exact α = Σ min(p, q); and a speedup table pricing the forwards the engine "
                "actually ran (target forward = 1, draft forward = c) next to the closed form.")
    with gr.Row():
        sk = gr.Slider(1, 8, value=4, step=1, label="K", elem_id="sim-sweep-k")
        st = gr.Slider(0.05, 2, value=1.0, step=0.05, label="temperature", elem_id="sim-sweep-temperature")
        sn = gr.Slider(50, 2000, value=400, step=50, label="tokens per level", elem_id="sim-sweep-tokens")
        sweep = gr.Button("Sweep agreement", variant="primary", elem_id="sim-sweep-run")
    sweep_plot = gr.Plot(agreement_figure([]), show_label=False, elem_id="sim-sweep-plot")
    table = gr.Dataframe(headers=["agreement", "α measured", "α exact"] + [f"c = {c:g}" for c in SIM_C_VALUES],
                         label="speedup: measured from the forwards run (closed form)", interactive=False,
                         elem_id="sim-speedup-table")
    sweep.click(run_sim_sweep, [sk, st, sn], [sweep_plot, table])
