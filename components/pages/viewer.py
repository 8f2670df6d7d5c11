"""The trace viewer shared by the Live, Replay and Simulator tabs: token stream, step-through controls
(first / previous / slider / next / last), playback at a chosen pace, the seven figures, the anatomy of
the selected iteration, its token tree and attention mask (shown for traces with trees, a one-line hint
otherwise) and the summary. ``build_viewer`` lays the components out (inside a Blocks
context) and ``Viewer.wire_steps`` connects the controls to a tab's step handler; the ``render_*``
functions are pure and return the values for ``Viewer.outputs()`` / ``Viewer.step_outputs()``.

Playback is a ``gr.Timer`` per viewer: ▶ play starts it (from the first iteration when the last one is
shown), every tick steps one iteration forward (or, with "build the anatomy up", one step of the
anatomy figure first, then the next iteration), the end or ⏸ pause stops it; the slider scrubs at any time. The keyboard (``presenter.KEYBOARD_JS``) clicks these same buttons.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from specdec_core import Trace

from components.render.anatomy import N_STAGES, anatomy_figure
from components.render.base import resolve_index
from components.render.figures import FIGURE_IDS, all_figures, pq_figure, residual_figure
from components.render.summary import summary_html
from components.render.tokens import tokens_html
from components.render.tree import has_trees, tree_figure, tree_mask_figure
from components.serving.messages import page_error

PACE_MIN_S, PACE_MAX_S, PACE_DEFAULT_S = 0.25, 3.0, 1.0
FAR = 1_000_000_000          # a step far enough to land on the first / last iteration (clamped)
PLAY_LABEL, PAUSE_LABEL = "▶ play", "‖ pause"
KEYS_HINT = ("Keyboard (when not typing in a field): **← / →** step · **Home / End** first / last · "
             "**Space** play / pause")


EMPTY_TRACE = Trace(config={"k": 1, "temperature": 0.0, "max_new_tokens": 1}, prompt="", prompt_ids=[])
NO_TREE_HINT = ("*Token tree:* this trace verified a chain every iteration. A run with **tree nodes** > 0 (Live "
                "settings, or the tree example in Replay) shows each iteration's tree and attention mask here.")
N_TREE_OUTPUTS = 3            # tree hint, tree figure, mask figure: the last outputs of both lists below
N_VIEW_OUTPUTS = len(FIGURE_IDS) + 4 + N_TREE_OUTPUTS   # Viewer.outputs(): tokens, figures, summary, slider,
                                                        # anatomy, the tree outputs

StepFn = Callable[..., tuple]     # (trace_dict, slider value, delta, *extra) -> the step outputs


@dataclass
class Viewer:
    tokens: gr.HTML
    prev: gr.Button
    slider: gr.Slider
    next: gr.Button
    plots: dict[str, gr.Plot]     # keyed by FIGURE_IDS
    summary: gr.HTML
    first: gr.Button
    last: gr.Button
    anatomy: gr.Plot
    play: gr.Button
    pace: gr.Slider               # seconds per iteration during playback (and a slow-motion Live run)
    timer: gr.Timer
    playing: gr.State             # {"on": bool}, changed in place: a tick already on its way sees a pause
    build_up: gr.Checkbox         # playback shows the anatomy's steps one tick at a time
    stage: gr.State               # the anatomy step shown during a build-up playback (1..N_STAGES)
    tree_hint: gr.Markdown        # one line, shown instead of the tree figures for a trace without trees
    tree: gr.Plot
    tree_mask: gr.Plot

    def tree_outputs(self) -> list[Any]:
        return [self.tree_hint, self.tree, self.tree_mask]

    def outputs(self) -> list[Any]:
        """The order ``render_trace`` returns: tokens, the seven plots, summary, slider, anatomy, tree outputs."""
        return [self.tokens, *(self.plots[k] for k in FIGURE_IDS), self.summary, self.slider, self.anatomy,
                *self.tree_outputs()]

    def step_outputs(self) -> list[Any]:
        """The order ``render_iteration`` returns: slider, tokens, plot-pq, plot-residual, anatomy, tree outputs."""
        return [self.slider, self.tokens, self.plots["plot-pq"], self.plots["plot-residual"], self.anatomy,
                *self.tree_outputs()]

    def playback_outputs(self) -> list[Any]:
        """The order the playback handlers return besides the step outputs: timer, play button, stage."""
        return [self.timer, self.play, self.stage]

    def wire_steps(self, step: StepFn, state: Any, extra: Sequence[Any] = (),
                   outputs: Sequence[Any] | None = None) -> None:
        """Connect first / previous / next / last, the slider, play / pause, the timer and the pace to
        ``step(trace_dict, slider value, delta, *extra)``, whose result goes to ``outputs`` (default:
        ``step_outputs()``)."""
        ins = [state, self.slider, *extra]
        outs = list(outputs) if outputs is not None else self.step_outputs()
        for button, delta in ((self.first, -FAR), (self.prev, -1), (self.next, 1), (self.last, FAR)):
            button.click(functools.partial(_step, step, delta), ins, outs, show_progress="hidden")
        self.slider.release(functools.partial(_step, step, 0), ins, outs, show_progress="hidden",
                            trigger_mode="always_last")
        play_outs = self.playback_outputs()
        at = outs.index(self.anatomy)
        self.play.click(functools.partial(toggle_play, step, len(outs), at),
                        [self.playing, self.pace, self.build_up, *ins], [*play_outs, *outs], show_progress="hidden",
                        queue=False)
        self.timer.tick(functools.partial(play_tick, step, len(outs), at),
                        [self.playing, self.build_up, self.stage, *ins],
                        [*outs, *play_outs], show_progress="hidden", trigger_mode="always_last",
                        concurrency_limit=None)
        self.pace.change(set_pace, [self.pace, self.playing], [self.timer], show_progress="hidden", queue=False)


def _step(step: StepFn, delta: int, trace_dict: dict | None, value: float | None, *extra: Any) -> tuple:
    return step(trace_dict, value, delta, *extra)


def build_viewer(prefix: str = "", initial: Trace | None = None, index: int | None = None) -> Viewer:
    """Lay out the viewer. ``prefix`` keeps elem_ids unique between tabs ("" for Live: #tokens, #plot-race...).
    ``initial``: a trace to show from the start (iteration ``index`` selected, the last when None); without
    one, every figure is a placeholder that says what will appear in it."""
    # the initial values are computed here rather than by render_trace, whose slider update would be
    # rendered as a second slider inside this Blocks context
    i0 = resolve_index(initial, index) if initial is not None else None
    shown = initial if initial is not None else EMPTY_TRACE      # no trace yet: each figure says what will appear
    figs = dict(zip(FIGURE_IDS, all_figures(shown, i0)))
    tokens = gr.HTML(tokens_html(initial, i0), elem_id=f"{prefix}tokens")
    with gr.Row(equal_height=True):
        first = gr.Button("|◀ first", elem_id=f"{prefix}first", scale=0, min_width=90)
        prev = gr.Button("◀ previous", elem_id=f"{prefix}prev", scale=0, min_width=120)
        slider = gr.Slider(**slider_props(initial, i0), step=1, elem_id=f"{prefix}iteration", scale=4)
        nxt = gr.Button("next ▶", elem_id=f"{prefix}next", scale=0, min_width=120)
        last = gr.Button("last ▶|", elem_id=f"{prefix}last", scale=0, min_width=90)
    with gr.Row(equal_height=True):
        play = gr.Button(PLAY_LABEL, elem_id=f"{prefix}play", scale=0, min_width=120)
        pace = gr.Slider(PACE_MIN_S, PACE_MAX_S, value=PACE_DEFAULT_S, step=0.25, label="pace (seconds per iteration)",
                         elem_id=f"{prefix}pace", scale=2)
        build_up = gr.Checkbox(False, label="build the anatomy up step by step", elem_id=f"{prefix}build-up",
                               scale=1)
        gr.Markdown(KEYS_HINT, elem_id=f"{prefix}keys-hint", elem_classes=["sd-keys-hint"])
    timer = gr.Timer(PACE_DEFAULT_S, active=False)
    playing = gr.State(new_playback)
    stage = gr.State(N_STAGES)
    plots: dict[str, gr.Plot] = {}

    def plot(key: str) -> gr.Plot:
        plots[key] = gr.Plot(figs.get(key), show_label=False, elem_id=f"{prefix}{key}")
        return plots[key]
    anatomy = gr.Plot(anatomy_figure(shown, i0), show_label=False,
                      elem_id=f"{prefix}plot-anatomy")
    trees = has_trees(initial)
    tree_hint = gr.Markdown(NO_TREE_HINT, visible=not trees, elem_id=f"{prefix}tree-hint")
    with gr.Row():
        tree = gr.Plot(tree_figure(initial, i0) if trees else None, show_label=False, visible=trees, scale=3,
                       elem_id=f"{prefix}plot-tree")
        tree_mask = gr.Plot(tree_mask_figure(initial, i0) if trees else None, show_label=False, visible=trees,
                            scale=2, elem_id=f"{prefix}plot-tree-mask")
    with gr.Row():
        plot("plot-pq")
        plot("plot-residual")
    with gr.Row():
        with gr.Column(scale=1):
            summary = gr.HTML(summary_html(initial), elem_id=f"{prefix}summary")
        with gr.Column(scale=1):
            plot("plot-race")
    plot("plot-timeline")
    with gr.Row():
        plot("plot-outcomes")
        plot("plot-positions")
    plot("plot-theory")
    return Viewer(tokens, prev, slider, nxt, plots, summary, first, last, anatomy, play, pace, timer, playing,
                  build_up, stage, tree_hint, tree, tree_mask)


def slider_props(trace: Trace | None, index: int | None) -> dict[str, Any]:
    """The step-through slider's settings for a trace: 1..n at ``index`` (0-based); disabled below two
    iterations (a Gradio slider needs minimum < maximum, so its range never shrinks below 1..2)."""
    n = len(trace.iterations) if trace is not None else 0
    return {"minimum": 1, "maximum": max(n, 2), "value": (index + 1) if index is not None else 1,
            "interactive": n > 1,
            "label": f"iteration (step through: {n} in this run)" if n else "iteration (step through)"}


def slider_update(trace: Trace | None, index: int | None) -> Any:
    """``slider_props`` as an update of the slider."""
    return gr.Slider(**slider_props(trace, index), step=1)


def tree_views(trace: Trace, index: int | None) -> tuple:
    """The tree outputs (hint, tree figure, mask figure): the figures of iteration ``index`` for a trace with
    trees, else the hint alone."""
    if not has_trees(trace):
        return gr.Markdown(visible=True), gr.Plot(visible=False), gr.Plot(visible=False)
    return (gr.Markdown(visible=False), gr.Plot(tree_figure(trace, index), visible=True),
            gr.Plot(tree_mask_figure(trace, index), visible=True))


def render_trace(trace: Trace | None, index: int | None = None, message: str = "") -> tuple:
    """Everything the viewer shows, in ``Viewer.outputs()`` order. ``index`` = selected iteration (0-based)."""
    trace = trace if trace is not None else EMPTY_TRACE
    i = resolve_index(trace, index)
    return (tokens_html(trace, i, message), *all_figures(trace, i), summary_html(trace), slider_update(trace, i),
            anatomy_figure(trace, i), *tree_views(trace, i))


def render_iteration(trace: Trace | None, index: int | None) -> tuple:
    """After a step: (slider, tokens, plot-pq, plot-residual, anatomy, tree outputs), in ``Viewer.step_outputs()``
    order."""
    if trace is None:
        raise page_error("Nothing to step through yet: run a prompt (or load a trace) first.")
    i = resolve_index(trace, index)
    return (slider_update(trace, i), tokens_html(trace, i), pq_figure(trace, i), residual_figure(trace, i),
            anatomy_figure(trace, i), *tree_views(trace, i))


# --- playback ------------------------------------------------------------------------------------------

def check_pace(pace: Any) -> float:
    """Seconds per iteration, or a gr.Error naming the setting."""
    if pace is None or isinstance(pace, bool) or not isinstance(pace, (int, float)) or not math.isfinite(pace):
        raise page_error(f"pace must be a number of seconds, got {pace!r}")
    if not PACE_MIN_S <= pace <= PACE_MAX_S:
        raise page_error(f"pace must be between {PACE_MIN_S:g} and {PACE_MAX_S:g} seconds per iteration, got {pace:g}")
    return float(pace)


def new_playback() -> dict:
    """A viewer's playback switch, kept in a gr.State and changed in place by ▶ / ⏸: a timer tick that was on
    its way when pause was pressed reads it and draws nothing (a bool passed by value would still say "on")."""
    return {"on": False}


def _stopped(playing: dict) -> tuple:
    playing["on"] = False
    return gr.Timer(active=False), gr.Button(PLAY_LABEL)


def _n_iterations(trace_dict: dict | None) -> int:
    return len(trace_dict.get("iterations", [])) if isinstance(trace_dict, dict) else 0


def toggle_play(step: StepFn, n_outputs: int, anatomy_at: int, playing: dict, pace: Any, build_up: bool,
                trace_dict: dict | None, value: float | None, *extra: Any) -> tuple:
    """▶ / ⏸ (and Space): start or pause playback (``playing``, from ``new_playback``, switched in place).
    Returns the playback outputs (timer, button, stage), then the step outputs: the first iteration when
    playback starts from the last one (with the anatomy at its first step when building up), else left as
    they are."""
    if playing["on"]:
        return (*_stopped(playing), gr.skip(), *[gr.skip()] * n_outputs)
    n = _n_iterations(trace_dict)
    if n < 2:
        raise page_error("Nothing to play back yet: run a prompt (or load a trace) with at least two iterations.")
    seconds = check_pace(pace)
    stage = N_STAGES
    view: list[Any] = [gr.skip()] * n_outputs
    if value is None or int(round(value)) >= n:            # at the end: from the top
        view = list(step(trace_dict, 1, -FAR, *extra))
        if build_up:
            stage = 1
            view[anatomy_at] = anatomy_figure(parse_state(trace_dict), 0, stage)
    playing["on"] = True
    return (gr.Timer(value=seconds, active=True), gr.Button(PAUSE_LABEL), stage, *view)


def play_tick(step: StepFn, n_outputs: int, anatomy_at: int, playing: dict, build_up: bool, stage: Any,
              trace_dict: dict | None, value: float | None, *extra: Any) -> tuple:
    """One playback tick: the next iteration (or, when building up, the anatomy's next step first). Returns
    the step outputs, then the playback outputs; playback stops after the last iteration (its last step),
    or at once when there is no trace. A tick that finds playback paused (before or after drawing) changes
    nothing."""
    n = _n_iterations(trace_dict)
    paused = (gr.skip(),) * (n_outputs + 3)
    if not playing["on"]:
        return paused
    if n == 0:
        return (*[gr.skip()] * n_outputs, *_stopped(playing), N_STAGES)
    current = target_index(value, 0, n)
    stage = stage if isinstance(stage, int) and 1 <= stage <= N_STAGES else N_STAGES
    if build_up and stage < N_STAGES:                       # the same iteration, one more step
        stage += 1
        view: list[Any] = [gr.skip()] * n_outputs
        view[anatomy_at] = anatomy_figure(parse_state(trace_dict), current, stage)
        done = current == n - 1 and stage == N_STAGES
    else:
        view = list(step(trace_dict, value, 1, *extra))
        nxt = min(current + 1, n - 1)
        if build_up and nxt != current:
            stage = 1
            view[anatomy_at] = anatomy_figure(parse_state(trace_dict), nxt, stage)
        done = nxt == n - 1 and (not build_up or stage == N_STAGES)
    if not playing["on"]:                                   # paused while this tick was drawing
        return paused
    return (*view, *(_stopped(playing) if done else (gr.skip(),) * 2), stage)


def set_pace(pace: Any, playing: dict) -> Any:
    """Pace slider: the timer's interval (kept running if it was)."""
    return gr.Timer(value=check_pace(pace), active=bool(playing["on"]))


def parse_state(trace_dict: dict | None) -> Trace | None:
    """A trace kept in a gr.State (as ``Trace.to_dict()``) back as a Trace; gr.Error if it is malformed."""
    if trace_dict is None:
        return None
    try:
        return Trace.from_dict(trace_dict)
    except ValueError as e:
        raise page_error(f"The stored trace is not valid: {e}") from e


def target_index(value: float | None, delta: int, n: int) -> int | None:
    """The 0-based iteration after moving ``delta`` from slider position ``value`` (1-based), clamped."""
    if n == 0:
        return None
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise page_error(f"The iteration must be a number between 1 and {n}, got {value!r:.80}")
    current = int(round(value)) - 1 if value is not None else n - 1
    return min(max(current + delta, 0), n - 1)


def step_view(trace_dict: dict | None, value: float | None, delta: int) -> tuple:
    """prev / next / slider handler: move ``delta`` iterations (0 = go to the slider's value)."""
    trace = parse_state(trace_dict)
    if trace is None:
        raise page_error("Nothing to step through yet: run a prompt (or load a trace) first.")
    return render_iteration(trace, target_index(value, delta, len(trace.iterations)))
