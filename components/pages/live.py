"""The Live tab: pick a pair, set the knobs, run, and watch every iteration arrive; then step through it.

The handlers are module-level functions that take the model pool explicitly (``build_live_tab`` binds
it), so tests call them without a browser. All per-user data lives in gr.State values: the trace
(``ctx.latest_trace``) and a small control dict ({"stop", "follow", "selected"}) that the Stop and
step buttons flip while a run is streaming. Models are shared through the pool, one lock per model.
The run itself (pair, locks, limits, baseline) is ``session.run_session``, the same as /generate's; this
module turns its events into page frames. The settings start at ``recommended_config()``, the same values
as /generate's and the CLI's defaults, unless the page was opened from a link that carries settings
(``?pair=…&k=…&run=1``, read and checked by ``links``); "copy link" writes the current settings as one, with
what the run depends on here (``repro``), and a link's run ends saying whether this server reproduces it exactly.
A batch size above 1 runs your prompt with other users' requests through the batched engine: the batch's views
(``batch_views``) show every row, the pooled figures and the batch's forwards; the viewer shows row 1.
"""
from __future__ import annotations

import contextlib
import html
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import astuple
from typing import Any

import gradio as gr

from specdec_core import Trace, limits
from specdec_core.config import DEFAULT_TREE_TOP_K, recommended_config

from components.pages.batch_views import N_BATCH_OUTPUTS, batch_baseline_updates, batch_updates, build_batch_views
from components.pages.context import AppContext
from components.pages.export import export_trace, html_export_button, html_export_file
from components.pages.links import (CONFIDENCE_STEP, LIVE_PARAMS, TEMPERATURE_STEP, TOP_P_STEP, LiveSettings,
                                    live_query, parse_live_query, refusal_message)
from components.pages.viewer import (N_TREE_OUTPUTS, N_VIEW_OUTPUTS, Viewer, build_viewer, check_pace, parse_state,
                                     render_iteration, render_trace, slider_update, target_index)
from components.render.base import instructive_index, resolve_index
from components.render.figures import FIGURE_IDS, race_figure, timeline_figure
from components.render.summary import summary_html
from components.render.tokens import tokens_html
from components.serving.calibrate import run_reference
from components.serving.gpu import gpu_task
from components.serving.inputs import check_batch, check_prompt, make_config
from components.serving.messages import page_error, page_warning
from components.serving.pairs import (DEFAULT_PAIR, DEFAULT_PROMPT, EXTRACTIVE_PROMPTS, OPEN_PROMPTS, Pool,
                                      pair_choices, pair_label, resolve_pair)
from components.serving.session import run_session

N_SETTINGS = len(LIVE_PARAMS) + 1   # settings_from_url's settings: the current pair, then every link parameter
MAX_LINK_CHARS = 8_000     # a longer query may not pass a server's request-line limit: such a link is refused
K_POLICY_CHOICES = [("fixed K", "fixed"), ("adaptive: +2 after a clean sweep, −1 otherwise", "heuristic"),
                    ("cost-aware: the K with the most predicted tokens/s", "cost")]
SAMPLER_CHOICES = [("standard", "standard"), ("coupled", "coupled")]


def new_control() -> dict:
    """Per-session run control: Stop sets "stop"; stepping clears "follow" and pins "selected"."""
    return {"stop": False, "follow": True, "selected": None}


# --- the pair selector ------------------------------------------------------------------------------

def change_pair(pool: Pool, new_key: str, current_key: str) -> tuple[Any, str, str]:
    """Pair selector handler: load the new pair, or warn and keep the current one.
    Returns (dropdown value, current-pair state, status html)."""
    try:
        pair = resolve_pair(pool, new_key)
    except (ValueError, RuntimeError) as e:
        msg = f"Could not use “{pair_label(new_key)}”: {e}. Keeping “{pair_label(current_key)}”."
        page_warning(msg)
        return gr.Dropdown(choices=pair_choices(), value=current_key), current_key, _status(msg, "warn")
    dev = pair.target.device
    return (gr.Dropdown(choices=pair_choices(), value=new_key), new_key,
            _status(f"Ready: {pair.meta['target']} ← {pair.meta['draft']} on {dev}.", "ok"))


def _status(text: str, kind: str = "info") -> str:
    color = {"ok": "#1b5e20", "warn": "#8a3b00", "info": "#333"}[kind]
    return f'<div class="sd-status" style="color:{color}">{html.escape(text)}</div>'


# --- the run ----------------------------------------------------------------------------------------

def _selected(control: dict, trace: Trace, done: bool = False) -> int | None:
    """The iteration shown: the newest while a run streams, the most instructive one when it is done
    (``render.base.instructive_index``), or the one the viewer stepped to (pinned)."""
    if control.get("follow", True) or control.get("selected") is None:
        return instructive_index(trace) if done else resolve_index(trace, None)
    return resolve_index(trace, control["selected"])


FRAME_S = 0.25     # token stream, summary and status: at most four updates a second
FIGURE_S = 1.0     # the seven figures: at most one update a second (always the first and the last frame)


class Pacer:
    """Decides, after each engine step, whether the page gets a full update (figures too), a light one
    (token stream, summary, status) or none yet. The engine never waits for the page: a browser that
    draws slower than the model generates would otherwise queue up frames and fall behind."""

    def __init__(self, frame_s: float = FRAME_S, figure_s: float = FIGURE_S) -> None:
        self.frame_s, self.figure_s = frame_s, figure_s
        self.last_frame = self.last_figures = float("-inf")

    def __call__(self) -> str:
        """"full", "light" or "" (skip)."""
        now = time.monotonic()
        if now - self.last_figures >= self.figure_s:
            self.last_frame = self.last_figures = now
            return "full"
        if now - self.last_frame >= self.frame_s:
            self.last_frame = now
            return "light"
        return ""


def _live_frame(trace: Trace, control: dict, message: str, download: Any = None, full: bool = True,
                done: bool = False) -> tuple:
    """One update: viewer outputs + the batch's views + (trace state, download button, status). A light update
    leaves the figures as they are (and a batch's trace state, which its rows make up to 16 times larger: the full
    updates, once a second, carry it); the last one (``done``) selects the most instructive iteration."""
    i = _selected(control, trace, done)
    skip = gr.skip()
    if full:
        view = render_trace(trace, i, "")
    else:
        view = (tokens_html(trace, i), *[skip] * len(FIGURE_IDS), summary_html(trace), slider_update(trace, i),
                *[skip] * (1 + N_TREE_OUTPUTS))
    return (*view, *batch_updates(trace, full), _state(trace, full), download if download is not None else skip,
            _status(message))


def _state(trace: Trace, full: bool) -> Any:
    """The trace state: every update of one run; a batch's (its rows make it up to 16 times larger) only in the
    full updates, once a second."""
    return trace.to_dict() if full or trace.batch is None else gr.skip()


def _baseline_frame(trace: Trace, message: str, full: bool) -> tuple:
    """While the baseline streams only the timing views change: timeline, race (full updates), summary."""
    skip = gr.skip()
    figs = (timeline_figure(trace), race_figure(trace)) if full else (skip, skip)
    return (skip, *figs, *[skip] * (len(FIGURE_IDS) - 2), summary_html(trace), skip, skip, *[skip] * N_TREE_OUTPUTS,
            *batch_baseline_updates(trace, full), _state(trace, full), skip, _status(message))


def _running(trace: Trace, slow: bool) -> str:
    """The status line while the speculative run streams (a batch's tokens counted over every row)."""
    how = " (slow motion)" if slow else ""
    if trace.batch is None:
        return f"Speculative decoding{how}: iteration {len(trace.iterations)}, {trace.stats.new_tokens} tokens…"
    st = trace.batch.stats
    return (f"Batched speculative decoding ({trace.batch.size} rows){how}: iteration {st.iterations}, "
            f"{st.new_tokens} tokens in all rows…")


def _baseline_running(trace: Trace) -> str:
    if trace.batch is None:
        return f"Baseline (target only): {len(trace.baseline.new_token_ids)} tokens…"
    return f"Batched baseline (target only): {trace.batch.baseline.new_tokens} tokens in all rows…"


def _done(trace: Trace, ending: str) -> str:
    if trace.batch is None:
        return (f"{ending} {trace.stats.new_tokens} tokens in {len(trace.iterations)} iterations. Step through them "
                "below, or download the trace.")
    st = trace.batch.stats
    return (f"{ending} {st.new_tokens} tokens in {trace.batch.size} rows, {st.iterations} batch iterations. Step "
            "through row 1 (your request) below, or download the trace.")


def _hold(seconds: float, control: dict) -> None:
    """Slow motion: wait ``seconds`` (the engine does not count it), waking early when Stop is pressed."""
    end = time.monotonic() + seconds
    while seconds and not control["stop"] and time.monotonic() < end:
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))


def run_live(pool: Pool, pair_key: str, prompt: str, k: Any, k_policy: Any, temperature: Any, top_k: Any,
             top_p: Any, max_new_tokens: Any, seed: Any, with_baseline: bool, chat: bool,
             control: dict | None, slow_motion: bool = False, pace: Any = None, confidence_stop: Any = 0.0,
             tree_nodes: Any = 0, tree_top_k: Any = DEFAULT_TREE_TOP_K, sampler: Any = "standard",
             batch_size: Any = 1, *, frame_s: float = FRAME_S, figure_s: float = FIGURE_S) -> Iterator[tuple]:
    """Run speculative decoding (then, if asked, the baseline) through ``session.run_session`` and stream
    page updates as iterations (and baseline tokens) arrive, paced by ``Pacer`` (0, 0 = an update after
    every single step). With ``slow_motion`` every iteration is drawn in full and held for ``pace``
    seconds before the next one is generated. ``batch_size`` above 1: your prompt and other users' requests,
    batched. Outputs: viewer outputs, the batch's views, trace state, download, status. The time spent
    rendering (and waiting in slow motion) is not counted by the engine."""
    control = control if control is not None else new_control()
    cfg = make_config(k, temperature, top_k, top_p, max_new_tokens, seed, k_policy, confidence_stop, tree_nodes,
                      tree_top_k, sampler=sampler)
    batch = check_batch(batch_size, cfg)
    hold_s = check_pace(pace) if slow_motion else 0.0
    control.update(new_control())            # a new run: not stopped, following the newest iteration
    pacer = Pacer(frame_s, figure_s)
    skip = gr.skip()
    session = run_session(pool, pair_key, prompt, cfg, chat=chat, with_baseline=with_baseline,
                          should_stop=lambda: control["stop"], batch_size=batch)
    with contextlib.closing(session):        # an error while drawing still frees the models at once
        for event in session:
            trace = event.trace
            if event.kind == "wait":
                yield (*[skip] * (N_VIEW_OUTPUTS + N_BATCH_OUTPUTS + 2), _status(event.message))
            elif event.kind == "iteration" and (kind := "full" if hold_s else pacer()):
                first = len(trace.iterations) == 1     # a new run: the previous export goes away
                yield _live_frame(trace, control, _running(trace, bool(hold_s)),
                                  gr.DownloadButton(value=None, interactive=False) if first else None,
                                  full=kind == "full")
                _hold(hold_s, control)
            elif event.kind == "baseline_start":
                yield _live_frame(trace, control, "Speculative decoding done; now the baseline (target only)…"
                                  if batch == 1 else "Batched speculative decoding done; now the batched baseline "
                                                     "(target only)…")
                pacer = Pacer(frame_s, figure_s)
            elif event.kind == "baseline" and (kind := pacer()):
                yield _baseline_frame(trace, _baseline_running(trace), full=kind == "full")
            elif event.kind == "done":
                path = export_trace(trace.to_dict())
                yield _live_frame(trace, control, _done(trace, event.message),
                                  gr.DownloadButton(value=path, interactive=True), done=True)


def stop_live(control: dict | None) -> None:
    """Stop handler: the running generator sees the flag after its current iteration and ends cleanly, saying
    so on the status line. It writes no status itself: its reply can arrive after the run's last frame, and
    a late "Stopping…" would then hide "Stopped" for good (seen in the browser test on a slow machine)."""
    if control is not None:
        control["stop"] = True


def step_live(trace_dict: dict | None, value: float | None, delta: int, control: dict | None) -> tuple:
    """prev / next / slider on the Live tab. Pins the selection while a run streams (follows the newest
    iteration again when you step onto it)."""
    trace = parse_state(trace_dict)
    if trace is None:
        raise page_error("Nothing to step through yet: run a prompt first.")
    i = target_index(value, delta, len(trace.iterations))
    if control is not None:
        control["selected"] = i
        control["follow"] = i == len(trace.iterations) - 1
    return render_iteration(trace, i)


# --- the settings as a link ---------------------------------------------------------------------------

def page_defaults() -> LiveSettings:
    """The Live tab's first values: the recommended settings (the CLI's and /generate's defaults)."""
    rec = recommended_config()
    return LiveSettings(pair=DEFAULT_PAIR, prompt=DEFAULT_PROMPT, k=rec.k, k_policy=rec.k_policy,
                        temperature=rec.temperature, top_k=rec.top_k, top_p=rec.top_p,
                        max_new_tokens=rec.max_new_tokens, seed=rec.seed, chat=True,
                        confidence_stop=rec.confidence_stop, tree_nodes=rec.tree_nodes, tree_top_k=rec.tree_top_k,
                        sampler=rec.sampler, batch_size=1)


# the query string the server wrote -> the whole link, shown and put on the clipboard (where the page may)
LINK_JS = """
(query) => {
  const url = query.startsWith("?") ? window.location.origin + window.location.pathname + query : query;
  if (navigator.clipboard) navigator.clipboard.writeText(url).catch(() => {});
  return url;
}
"""


def copy_link(pair_key: Any, prompt: Any, k: Any, k_policy: Any, temperature: Any, top_k: Any, top_p: Any,
              max_new_tokens: Any, seed: Any, chat: Any, confidence_stop: Any, tree_nodes: Any = 0,
              tree_top_k: Any = DEFAULT_TREE_TOP_K, sampler: Any = "standard", batch_size: Any = 1, *,
              pool: Pool | None = None) -> str:
    """"copy link": the current settings as a query string (with run=1) that opens the Live tab with them and
    runs; a gr.Error when a setting is out of range or the link would not read back to the same settings.
    Given the ``pool``, the link of a single run (batch size 1) also names what the run depends on here
    (``repro``: the models, their numerics, the K policy's prices), where that is known without loading or
    measuring anything."""
    cfg = make_config(k, temperature, top_k, top_p, max_new_tokens, seed, k_policy, confidence_stop, tree_nodes,
                      tree_top_k, sampler=sampler)
    batch = check_batch(batch_size, cfg)
    prompt = check_prompt(prompt)
    settings = LiveSettings(pair=str(pair_key), prompt=prompt, k=cfg.k, k_policy=cfg.k_policy,
                            temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                            max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, chat=bool(chat),
                            confidence_stop=cfg.confidence_stop, tree_nodes=cfg.tree_nodes, tree_top_k=cfg.tree_top_k,
                            sampler=cfg.sampler, batch_size=batch)
    query = live_query(settings)
    if len(query) > MAX_LINK_CHARS:
        raise page_error(f"These settings make a link of {len(query)} characters; links are kept under "
                         f"{MAX_LINK_CHARS} (shorten the prompt).")
    back = parse_live_query(urllib.parse.parse_qs(query[1:], keep_blank_values=True), page_defaults())
    if back.problems or back.settings != settings:
        raise page_error("These settings cannot be written as a link: "
                         + ("; ".join(back.problems) or "they do not read back the same") + ".")
    repro = run_reference(pool, settings.pair, cfg) if pool is not None and batch == 1 else None
    return live_query(settings, repro=repro) if repro else query


def settings_from_url(request: gr.Request | None) -> tuple:
    """On page load: the Live settings a link carries (``links``). Returns (current pair,
    pair selector, prompt, K, K policy, temperature, top-k, top-p, max new tokens, seed, chat template,
    confidence stop, tree nodes, tree top-k, sampler, batch size, run at once, status, the link's ``repro``); a
    refused link changes nothing, says why and runs nothing."""
    skip = gr.skip()
    link = parse_live_query(getattr(request, "query_params", None) or {}, page_defaults())
    if link.problems:
        message = refusal_message(link.problems)
        page_warning(message)
        return (*[skip] * N_SETTINGS, False, _status(message, "warn"), None)
    s = link.settings
    if s is None:
        return (*[skip] * N_SETTINGS, False, skip, None)
    return (s.pair, *astuple(s), link.run,
            _status("Settings from the link: running…" if link.run else "Settings from the link: press Run."),
            link.repro)


SAME_AS_LINK = "Same models, numerics and prices as where this link was made: this is the link's trace (timings aside)."
NOT_AS_LINK = ("This link was made where the models, their numerics or the K policy's prices differ (another server, "
               "device, dtype or library version, or this server's calibration since a restart): the text is the "
               "same under greedy decoding where the numerics agree; the iterations (K, drafts, verdicts) and, when "
               "sampling, the tokens may differ.")
UNTOLD = "Could not tell whether this server reproduces the link's run exactly (its prices are not measured yet)."


def link_note(pool: Pool, repro: str | None, pair_key: Any, cfg: Any) -> str:
    """After a link's run: whether this server reproduces the run where the link was made (``repro``), as a
    status line ("" for a link that does not say)."""
    if not repro:
        return ""
    here = run_reference(pool, pair_key, cfg)
    if here is None:
        return _status(UNTOLD, "warn")
    return _status(SAME_AS_LINK, "ok") if here == repro else _status(NOT_AS_LINK, "warn")


# --- layout -----------------------------------------------------------------------------------------

def _runner(pool: Pool) -> Callable[..., Iterator[tuple]]:
    def run(*args: Any) -> Iterator[tuple]:
        yield from run_live(pool, *args)
    return gpu_task(run)


def _link_runner(runner: Callable[..., Iterator[tuple]], pool: Pool) -> Callable[..., Iterator[tuple]]:
    """After a page load: the run a link asked for (run=1), the same handler as the Run button's, its last status
    saying whether this server reproduces the link's run exactly (``link_note``); else nothing."""
    def run_if_asked(asked: bool, repro: str | None, *args: Any) -> Iterator[tuple]:
        if not asked:
            yield (gr.skip(),) * (N_VIEW_OUTPUTS + N_BATCH_OUTPUTS + 3)
            return
        last = None
        for frame in runner(*args):
            if last is not None:
                yield last
            last = frame
        if last is not None:
            pair, _, k, policy, temperature, top_k, top_p, max_new, seed = args[:9]
            stop, tree_nodes, tree_top_k, sampler, batch = args[14:19]
            cfg = make_config(k, temperature, top_k, top_p, max_new, seed, policy, stop, tree_nodes, tree_top_k,
                              sampler=sampler)
            single = batch == 1          # a batch's link carries no repro (its prices are measured per process)
            yield (*last[:-1], last[-1] + link_note(pool, repro if single else None, pair, cfg))
    return run_if_asked


def build_live_tab(ctx: AppContext, page: gr.Blocks | None = None) -> Viewer:
    """The Live tab's components and events (call inside ``gr.Tab``). With ``page`` (the app's Blocks), the
    settings a link carries are read when the page loads, and run at once when it says run=1."""
    pool = ctx.pool
    first = page_defaults()        # the same settings as the CLI's and /generate's defaults
    control = gr.State(new_control)
    current_pair = gr.State(first.pair)
    link_run = gr.State(False)
    link_repro = gr.State(None)
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(value=first.prompt, label="prompt", lines=3, max_lines=12, elem_id="prompt")
            gr.Examples(label="extractive prompts (prompt lookup shines: it copies) · open-ended ones (where the "
                              "trained drafts help: they learnt chat answers, not copying)",
                        examples=[[p] for p in EXTRACTIVE_PROMPTS + OPEN_PROMPTS], inputs=[prompt],
                        example_labels=[f"extractive: {p[:50]}…" for p in EXTRACTIVE_PROMPTS]
                        + [f"open-ended: {p[:50]}" for p in OPEN_PROMPTS])
        with gr.Column(scale=2):
            pair = gr.Dropdown(choices=pair_choices(), value=first.pair, label="target ← draft pair",
                               elem_id="pair", interactive=True)
            pair_status = gr.HTML(_status("Ready: the bundled model, offline."), elem_id="pair-status")
    with gr.Accordion("settings", open=True, elem_id="live-settings") as settings:
        with gr.Row():
            k = gr.Slider(1, limits.MAX_K, value=first.k, step=1, label="K (drafts per iteration)", elem_id="k")
            policy = gr.Dropdown(choices=K_POLICY_CHOICES, value=first.k_policy,
                                 label="K policy (K is the cap unless fixed)", elem_id="k-policy", interactive=True)
            temperature = gr.Slider(0.0, limits.MAX_TEMPERATURE, value=first.temperature, step=TEMPERATURE_STEP, label="temperature (0 = greedy)",
                                    elem_id="temperature")
            max_new = gr.Slider(1, limits.MAX_NEW_TOKENS, value=first.max_new_tokens, step=1, label="max new tokens",
                                elem_id="max-new")
        with gr.Row():
            top_k = gr.Number(value=first.top_k, precision=0, minimum=0, label="top-k (0 = off)", elem_id="top-k")
            top_p = gr.Slider(TOP_P_STEP, 1.0, value=first.top_p, step=TOP_P_STEP, label="top-p (1 = off)", elem_id="top-p")
            seed = gr.Number(value=first.seed, precision=0, minimum=0, label="seed", elem_id="seed")
            baseline = gr.Checkbox(value=True, label="measure a baseline in the same run", elem_id="baseline")
            chat = gr.Checkbox(value=first.chat, label="chat template", elem_id="chat")
        with gr.Row():
            stop = gr.Slider(0.0, limits.MAX_CONFIDENCE_STOP, value=first.confidence_stop, step=CONFIDENCE_STEP,
                             label="confidence stop: a model draft stops drafting after a draft that takes its own confidence "
                                   "that all its drafts so far will be accepted below this; that draft is still offered "
                                   "(0 = always K drafts; exact either way)",
                             elem_id="confidence-stop", scale=2)
            tree_nodes = gr.Slider(0, limits.MAX_TREE_NODES, value=first.tree_nodes, step=1, elem_id="tree-nodes",
                                   label="tree nodes (0 = a chain; N = a token tree of up to N drafts, depth ≤ K, "
                                         "verified in one forward)", scale=1)
            tree_top_k = gr.Slider(1, limits.MAX_TREE_TOP_K, value=first.tree_top_k, step=1, elem_id="tree-top-k",
                                   label="tree top-k (most children per node)", scale=1)
            sampler = gr.Radio(choices=SAMPLER_CHOICES, value=first.sampler, elem_id="sampler", scale=1,
                               label="sampling rule (coupled: the same seed gives the target-only text, whatever "
                                     "the draft)")
        with gr.Row():
            batch_size = gr.Slider(1, limits.MAX_BATCH, value=first.batch_size, step=1, elem_id="batch-size",
                                   label="batch size (1 = your prompt alone; B > 1: your prompt and B − 1 other users' "
                                         "requests decoded together, as a busy server does; tree nodes must be 0)")
    with gr.Row():
        run_btn = gr.Button("Run", variant="primary", elem_id="run", scale=2)
        stop_btn = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
        slow = gr.Checkbox(value=False, label="slow motion (one iteration per playback pace)", elem_id="slow",
                           scale=1)
        download = gr.DownloadButton("Export trace (JSON)", value=None, interactive=False, elem_id="export", scale=1)
        html_btn = html_export_button()
        link_btn = gr.Button("copy link", elem_id="copy-link", scale=1, size="sm")
    html_export_file(html_btn, ctx.latest_trace)
    link_box = gr.Textbox(label="a link to these settings (it runs them when opened; same seed, same trace on this "
                                "server)",
                          visible=False, interactive=False, buttons=["copy"], elem_id="copy-link-url")
    ctx.fold_in_presenter.append(settings)
    status = gr.HTML(_status("Press Run."), elem_id="status")
    batch_views = build_batch_views("")
    viewer = build_viewer("")

    pair.input(lambda new, cur: change_pair(pool, new, cur), inputs=[pair, current_pair],
               outputs=[pair, current_pair, pair_status])
    run_inputs = [current_pair, prompt, k, policy, temperature, top_k, top_p, max_new, seed, baseline, chat, control,
                  slow, viewer.pace, stop, tree_nodes, tree_top_k, sampler, batch_size]
    run_outputs = [*viewer.outputs(), *batch_views.outputs(), ctx.latest_trace, download, status]
    runner = _runner(pool)
    run_btn.click(runner, inputs=run_inputs, outputs=run_outputs, concurrency_limit=4,
                  concurrency_id="live-run", show_progress="minimal", show_progress_on=[status])  # queue place, ETA
    settings_inputs = [current_pair, prompt, k, policy, temperature, top_k, top_p, max_new, seed, chat, stop,
                       tree_nodes, tree_top_k, sampler, batch_size]
    link_btn.click(lambda *values: gr.Textbox(value=copy_link(*values, pool=pool), visible=True), settings_inputs,
                   [link_box],
                   show_progress="hidden").success(None, [link_box], [link_box], js=LINK_JS)
    if page is not None:
        page.load(settings_from_url, None, [current_pair, pair, *settings_inputs[1:], link_run, status, link_repro],
                  show_progress="hidden").then(_link_runner(runner, pool), [link_run, link_repro, *run_inputs],
                                               run_outputs,
                                               concurrency_limit=4, concurrency_id="live-run",
                                               show_progress="minimal", show_progress_on=[status])
    stop_btn.click(stop_live, inputs=[control], outputs=None, queue=False)
    viewer.wire_steps(step_live, ctx.latest_trace, extra=[control])
    return viewer


__all__ = ["build_live_tab", "run_live", "stop_live", "step_live", "change_pair", "new_control", "Pacer",
           "page_defaults", "copy_link", "settings_from_url", "link_note"]
