"""The Live tab: pick a pair, set the knobs, run, and watch every iteration arrive; then step through it.

The handlers are module-level functions that take the model pool explicitly (``build_live_tab`` binds
it), so tests call them without a browser. All per-user data lives in gr.State values: the trace
(``ctx.latest_trace``) and a small control dict ({"stop", "follow", "selected"}) that the Stop and
step buttons flip while a run is streaming. Models are shared through the pool, one lock per model.
"""
from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import gradio as gr

from specdec_core import (MAX_K, PRESETS, LoadedModel, NGramDrafter, SpecConfig, Trace,
                          check_tokenizer_compat, encode_prompt, stream_baseline, stream_speculative)
from specdec_core.config import K_POLICIES, LIVE_CONFIDENCE_STOP
from specdec_core.drafters.model import model_drafter
from specdec_core.models.pool import FairLock
from specdec_core.drafters.registry import SHIPPED, shipped_draft_for

from .context import AppContext
from .figures import FIGURE_IDS, race_figure, resolve_index, timeline_figure
from .gpu import gpu_task
from .limits import RunClock, RunLimits, acquire_in_turn, run_on
from .summary import summary_html
from .tokens import tokens_html
from .viewer import (Viewer, build_viewer, check_pace, export_trace, parse_state, render_iteration, render_trace,
                     slider_update, target_index)

PAIR_NGRAM = "bundled|ngram"
PAIR_SELF = "bundled|self"
PAIR_TRAINED = "bundled|trained"
PAIR_FEATURE = "bundled|feature"
SHIPPED_PAIRS = {PAIR_FEATURE: "feature", PAIR_TRAINED: "trained"}   # pair key -> shipped draft key
DEFAULT_PAIR = PAIR_FEATURE   # shows the most: real p ≠ q, rejections, residuals
UI_MAX_K = 16
UI_MAX_NEW_TOKENS = 512
UI_MAX_TEMPERATURE = 5.0
MAX_PROMPT_CHARS = 20_000
LOCK_WAIT_S = 300.0

EXTRACTIVE_PROMPTS = (
    "Repeat this sentence exactly, three times: The quick brown fox jumps over the lazy dog near the old "
    "stone bridge.",
    "Rewrite this code with the variable x renamed to total, and show the whole function:\n\n"
    "def order_value(items):\n    x = 0\n    for item in items:\n        x += item.price * item.quantity\n"
    "    return x",
    "Count from 1 to 40, separated by commas.",
)
OPEN_PROMPTS = (
    "Write a short poem about the sea at night.",
    "Give me three surprising facts about octopuses.",
)
DEFAULT_PROMPT = OPEN_PROMPTS[0]   # the default pair's kind of prompt: its draft learnt chat answers, not copying


class Pool(Protocol):
    def get(self, key: str) -> LoadedModel: ...


def new_control() -> dict:
    """Per-session run control: Stop sets "stop"; stepping clears "follow" and pins "selected"."""
    return {"stop": False, "follow": True, "selected": None}


# --- pairs ------------------------------------------------------------------------------------------

def pair_choices() -> list[tuple[str, str]]:
    """(label, key) for the pair selector: bundled + n-gram, bundled drafting for itself, hub presets."""
    return ([("SmolLM2-135M + its trained draft (reads the target's features, EAGLE-style)", PAIR_FEATURE),
             ("SmolLM2-135M + its trained token-only draft", PAIR_TRAINED),
             ("SmolLM2-135M (bundled) + n-gram prompt lookup", PAIR_NGRAM),
             ("SmolLM2-135M drafting for itself (pitfall: the draft costs as much as the target)", PAIR_SELF)]
            + [(f"{p.label} (Hugging Face Hub)", f"preset:{i}") for i, p in enumerate(PRESETS)])


@dataclass
class Pair:
    key: str
    target: LoadedModel
    draft_model: LoadedModel | None      # None for the n-gram drafter
    meta: dict = field(default_factory=dict)

    def drafter(self) -> Any:
        """A fresh drafter for one run (drafters keep per-run state such as a KV cache)."""
        if self.draft_model is None:
            return NGramDrafter()
        return model_drafter(self.draft_model.model, name="self" if self.draft_model is self.target else (
            SHIPPED_PAIRS.get(self.key, "model")))

    def locks(self) -> list[LoadedModel]:
        """The models to lock for a run, each once, in a fixed order (no deadlock between two pairs)."""
        models = {m.key: m for m in (self.target, self.draft_model) if m is not None}
        return [models[k] for k in sorted(models)]


def resolve_pair(pool: Pool, key: str) -> Pair:
    """Load (or fetch from the pool) the models of a pair. Raises ValueError / RuntimeError with a
    message fit for the page (unknown pair, download failed, incompatible tokenizers)."""
    if key == PAIR_NGRAM:
        t = pool.get("bundled")
        return Pair(key, t, None, {"target": t.label, "draft": "n-gram prompt lookup", "pair": key})
    if isinstance(key, str) and key in SHIPPED_PAIRS:
        t = pool.get("bundled")
        name = SHIPPED_PAIRS[key]
        draft = shipped_draft_for(name, t.model)   # DraftFilesError (a RuntimeError) names the file and the fix
        dm = LoadedModel(f"bundled|{name}-draft", SHIPPED[name], draft, t.tokenizer, FairLock())
        return Pair(key, t, dm, {"target": t.label, "draft": SHIPPED[name], "pair": key})
    if key == PAIR_SELF:
        t = pool.get("bundled")
        return Pair(key, t, t, {"target": t.label, "draft": f"{t.label} (the same model)", "pair": key})
    if isinstance(key, str) and key.startswith("preset:") and key[7:].isdigit() and int(key[7:]) < len(PRESETS):
        preset = PRESETS[int(key[7:])]
        t = pool.get(preset.target)
        d = pool.get(preset.draft)
        try:
            check_tokenizer_compat(t.tokenizer, d.tokenizer)
        except ValueError as e:
            raise ValueError(f"{preset.label}: the draft and target tokenizers differ ({e})") from e
        return Pair(key, t, d, {"target": t.label, "draft": d.label, "pair": key})
    raise ValueError(f"unknown model pair {key!r:.80}")


def pair_label(key: str) -> str:
    if not isinstance(key, str):
        return f"{key!r:.80}"
    return dict((v, k) for k, v in pair_choices()).get(key, key)


def change_pair(pool: Pool, new_key: str, current_key: str) -> tuple[Any, str, str]:
    """Pair selector handler: load the new pair, or warn and keep the current one.
    Returns (dropdown value, current-pair state, status html)."""
    try:
        pair = resolve_pair(pool, new_key)
    except (ValueError, RuntimeError) as e:
        msg = f"Could not use “{pair_label(new_key)}”: {e}. Keeping “{pair_label(current_key)}”."
        gr.Warning(msg)
        return gr.Dropdown(choices=pair_choices(), value=current_key), current_key, _status(msg, "warn")
    dev = pair.target.device
    return (gr.Dropdown(choices=pair_choices(), value=new_key), new_key,
            _status(f"Ready: {pair.meta['target']} ← {pair.meta['draft']} on {dev}.", "ok"))


def _status(text: str, kind: str = "info") -> str:
    color = {"ok": "#1b5e20", "warn": "#8a3b00", "info": "#333"}[kind]
    return f'<div class="sd-status" style="color:{color}">{html.escape(text)}</div>'


# --- settings ---------------------------------------------------------------------------------------

def _as_int(name: str, value: Any) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise gr.Error(f"{name} must be a whole number, got {value!r:.80}")
    if isinstance(value, float) and not math.isfinite(value) or value != int(value):
        raise gr.Error(f"{name} must be a whole number, got {value!r:.80}")
    return int(value)


UI_MAX_CONFIDENCE_STOP = 0.95
K_POLICY_CHOICES = [("fixed K", "fixed"), ("adaptive: +2 after a clean sweep, −1 otherwise", "heuristic"),
                    ("cost-aware: the K with the most predicted tokens/s", "cost")]


def k_policy_of(value: Any) -> str:
    """The K policy from the UI or the API: a policy name, None (a cleared field: fixed), or a bool (the
    older "adaptive K" switch: true = the +2/−1 heuristic, false = fixed K)."""
    if value is None:
        return "fixed"
    if isinstance(value, bool):
        return "heuristic" if value else "fixed"
    if isinstance(value, str) and value in K_POLICIES:
        return value
    raise gr.Error(f"K policy must be one of {', '.join(K_POLICIES)}, got {value!r:.80}")


def make_config(k: Any, temperature: Any, top_k: Any, top_p: Any, max_new_tokens: Any, seed: Any,
                k_policy: Any, confidence_stop: Any = 0.0) -> SpecConfig:
    """The UI's numbers as a validated SpecConfig; any problem becomes a gr.Error naming the setting.
    ``k_policy``: "fixed", "heuristic" or "cost" (K is the cap for the last two), or a bool as in ``k_policy_of``.
    ``confidence_stop``: a model draft stops once its chained confidence falls below it (0 = off)."""
    policy = k_policy_of(k_policy)
    if (isinstance(confidence_stop, bool) or not isinstance(confidence_stop, (int, float))
            or not 0 <= confidence_stop <= UI_MAX_CONFIDENCE_STOP):
        raise gr.Error(f"the confidence stop must be a number from 0 (off) to {UI_MAX_CONFIDENCE_STOP:g}, "
                       f"got {confidence_stop!r:.80}")
    k_, top_k_, max_new_, seed_ = (_as_int("K", k), _as_int("top-k", top_k),
                                   _as_int("max new tokens", max_new_tokens), _as_int("seed", seed))
    if not 1 <= k_ <= min(UI_MAX_K, MAX_K):
        raise gr.Error(f"K must be between 1 and {UI_MAX_K}, got {k_!r:.80}")
    if not 1 <= max_new_ <= UI_MAX_NEW_TOKENS:
        raise gr.Error(f"max new tokens must be between 1 and {UI_MAX_NEW_TOKENS} here, got {max_new_!r:.80}")
    if (temperature is None or isinstance(temperature, bool) or not isinstance(temperature, (int, float))
            or temperature != temperature):
        raise gr.Error(f"temperature must be a number, got {temperature!r:.80}")
    if not 0 <= temperature <= UI_MAX_TEMPERATURE:
        raise gr.Error(f"temperature must be between 0 (greedy) and {UI_MAX_TEMPERATURE:g}, got {temperature!r:.80}")
    if top_p is None or isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or top_p != top_p:
        raise gr.Error(f"top-p must be a number, got {top_p!r:.80}")
    if not 0 < top_p <= 1:
        raise gr.Error(f"top-p must be in (0, 1] (1 = off), got {top_p!r:.80}")
    if top_k_ < 0:
        raise gr.Error(f"top-k must be 0 (off) or more, got {top_k_!r:.80}")
    if seed_ < 0 or seed_ >= 2**63:
        raise gr.Error(f"seed must be a non-negative integer below 2**63, got {seed_!r:.80}")
    try:
        return SpecConfig(k=k_, temperature=float(temperature), top_k=top_k_, top_p=float(top_p),
                          max_new_tokens=max_new_, seed=seed_, k_policy=policy, full_trace=True,
                          confidence_stop=float(confidence_stop))
    except ValueError as e:
        raise gr.Error(f"Bad setting: {e}") from e


def encode_for(pair: Pair, prompt: Any, chat: bool, max_new_tokens: int) -> list[int]:
    if prompt is not None and not isinstance(prompt, str):
        raise gr.Error(f"The prompt must be text, got {type(prompt).__name__}.")
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("The prompt is empty: type something (or pick an example).")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raise gr.Error(f"The prompt is not valid text: character {e.start} is a lone surrogate.") from e
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"The prompt is {len(prompt)} characters long; the limit here is {MAX_PROMPT_CHARS}.")
    try:
        ids = encode_prompt(pair.target.tokenizer, prompt, chat=bool(chat))
    except ValueError as e:
        raise gr.Error(f"Could not encode the prompt: {e}") from e
    limit = getattr(pair.target.model.config, "max_position_embeddings", None)
    if limit and len(ids) + max_new_tokens > limit:
        raise gr.Error(f"The prompt is {len(ids)} tokens; with {max_new_tokens} new tokens that exceeds the "
                       f"model's context of {limit} tokens.")
    return ids


# --- the run ----------------------------------------------------------------------------------------

def _selected(control: dict, trace: Trace) -> int | None:
    if control.get("follow", True) or control.get("selected") is None:
        return resolve_index(trace, None)
    return resolve_index(trace, control["selected"])


N_VIEW_OUTPUTS = len(FIGURE_IDS) + 4    # Viewer.outputs(): tokens, the figures, summary, slider, anatomy
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


def _live_frame(trace: Trace, control: dict, message: str, download: Any = None, full: bool = True) -> tuple:
    """One update: viewer outputs + (trace state, download button, status). A light update leaves the
    seven figures as they are."""
    i = _selected(control, trace)
    skip = gr.skip()
    if full:
        view = render_trace(trace, i, "")
    else:
        view = (tokens_html(trace, i), *[skip] * len(FIGURE_IDS), summary_html(trace), slider_update(trace, i), skip)
    return (*view, trace.to_dict(), download if download is not None else skip, _status(message))


def _baseline_frame(trace: Trace, message: str, full: bool) -> tuple:
    """While the baseline streams only the timing views change: timeline, race (full updates), summary."""
    skip = gr.skip()
    figs = (timeline_figure(trace), race_figure(trace)) if full else (skip, skip)
    return (skip, *figs, *[skip] * (len(FIGURE_IDS) - 2), summary_html(trace), skip, skip, trace.to_dict(), skip,
            _status(message))


def acquire_locks(models: list[LoadedModel], timeout: float) -> list[LoadedModel]:
    """Take each model's lock (in the given order) or raise a gr.Error saying it is busy; returns them held."""
    held: list[LoadedModel] = []
    for m in models:
        if not m.lock.acquire(timeout=timeout):
            for h in reversed(held):
                h.lock.release()
            raise gr.Error(f"{m.label} is busy with other viewers' runs; try again in a minute.")
        held.append(m)
    return held


def _hold(seconds: float, control: dict) -> None:
    """Slow motion: wait ``seconds`` (the engine does not count it), waking early when Stop is pressed."""
    end = time.monotonic() + seconds
    while seconds and not control["stop"] and time.monotonic() < end:
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))


def run_live(pool: Pool, pair_key: str, prompt: str, k: Any, k_policy: Any, temperature: Any, top_k: Any,
             top_p: Any, max_new_tokens: Any, seed: Any, with_baseline: bool, chat: bool,
             control: dict | None, slow_motion: bool = False, pace: Any = None, confidence_stop: Any = 0.0, *,
             frame_s: float = FRAME_S, figure_s: float = FIGURE_S) -> Iterator[tuple]:
    """Run speculative decoding (then, if asked, the baseline) and stream page updates as iterations (and
    baseline tokens) arrive, paced by ``Pacer`` (0, 0 = an update after every single step). With
    ``slow_motion`` every iteration is drawn in full and held for ``pace`` seconds before the next one is
    generated. Outputs: viewer outputs, trace state, download, status. The time spent rendering (and
    waiting in slow motion) is not counted by the engine."""
    control = control if control is not None else new_control()
    cfg = make_config(k, temperature, top_k, top_p, max_new_tokens, seed, k_policy, confidence_stop)
    hold_s = check_pace(pace) if slow_motion else 0.0
    try:
        pair = resolve_pair(pool, pair_key)
    except (ValueError, RuntimeError) as e:
        raise gr.Error(f"Could not load the model pair: {e}") from e
    ids = encode_for(pair, prompt, chat, cfg.max_new_tokens)
    control.update(new_control())
    tok = pair.target.tokenizer
    limits = RunLimits.from_env()
    held = yield from acquire_in_turn(pair.locks(), LOCK_WAIT_S,
                                      lambda msg: (*[gr.skip()] * (N_VIEW_OUTPUTS + 2), _status(msg)))
    clock = RunClock(limits)                 # the run's time limit counts from here, not from the wait
    trace: Trace | None = None
    baseline_dropped = False
    cut = ""                                 # the limit this run reached, if any
    pacer = Pacer(frame_s, figure_s)
    with run_on(held):
        stream = stream_speculative(pair.target.model, pair.drafter(), ids, cfg, tok, prompt=prompt,
                                    meta=pair.meta)
        try:
            for trace in stream:
                if control["stop"] and not trace.finish_reason:
                    trace.finish_reason = "stopped"
                    break
                if not trace.finish_reason and (cut := clock.exceeded(trace.stats.new_tokens)):
                    trace.finish_reason = "limit"     # cut here; the trace so far is kept
                    break
                kind = "full" if hold_s else pacer()
                if trace.finish_reason or not kind:
                    continue                        # the last iteration is drawn by the final frame
                first = len(trace.iterations) == 1     # a new run: the previous export goes away
                yield _live_frame(trace, control, f"Speculative decoding{' (slow motion)' if hold_s else ''}: "
                                                  f"iteration {len(trace.iterations)}, {trace.stats.new_tokens} tokens…",
                                  gr.DownloadButton(value=None, interactive=False) if first else None,
                                  full=kind == "full")
                _hold(hold_s, control)
        finally:
            stream.close()
        if trace is None:
            raise gr.Error("The engine produced no iteration.")
        if with_baseline and not control["stop"] and not cut:
            yield _live_frame(trace, control, "Speculative decoding done; now the baseline (target only)…")
            pacer = Pacer(frame_s, figure_s)
            base_stream = stream_baseline(pair.target.model, ids, cfg, tok)
            try:
                for base in base_stream:
                    if control["stop"] or (clock.elapsed() >= limits.max_seconds):
                        trace.baseline = None    # an incomplete baseline would skew the comparison
                        baseline_dropped = True
                        cut = "" if control["stop"] else clock.exceeded(0)
                        break
                    trace.baseline = base
                    kind = pacer()
                    if kind:
                        yield _baseline_frame(trace, f"Baseline (target only): {len(base.new_token_ids)} tokens…",
                                              full=kind == "full")
            finally:
                base_stream.close()
    if trace.finish_reason == "limit":
        done = f"Stopped at the limit ({cut}): kept what was produced."
    elif cut:
        done = f"Stopped at the limit during the baseline ({cut}): kept the speculative run, dropped the baseline."
    elif trace.finish_reason == "stopped":
        done = "Stopped: kept what was produced."
    elif baseline_dropped:
        done = "Stopped during the baseline: kept the speculative run, dropped the incomplete baseline."
    elif with_baseline and trace.baseline is None:
        done = "Done (stopped before the baseline, so there is none)."
    else:
        done = "Done."
    path = export_trace(trace.to_dict())
    yield _live_frame(trace, control, f"{done} {trace.stats.new_tokens} tokens in {len(trace.iterations)} "
                                      "iterations. Step through them below, or download the trace.",
                      gr.DownloadButton(value=path, interactive=True))


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
        raise gr.Error("Nothing to step through yet: run a prompt first.")
    i = target_index(value, delta, len(trace.iterations))
    if control is not None:
        control["selected"] = i
        control["follow"] = i == len(trace.iterations) - 1
    return render_iteration(trace, i)


# --- layout -----------------------------------------------------------------------------------------

def _runner(pool: Pool) -> Callable[..., Iterator[tuple]]:
    def run(*args: Any) -> Iterator[tuple]:
        yield from run_live(pool, *args)
    return gpu_task(run)


def build_live_tab(ctx: AppContext) -> Viewer:
    """The Live tab's components and events (call inside ``gr.Tab``)."""
    pool = ctx.pool
    control = gr.State(new_control)
    current_pair = gr.State(DEFAULT_PAIR)
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(value=DEFAULT_PROMPT, label="prompt", lines=3, max_lines=12, elem_id="prompt")
            gr.Examples(label="extractive prompts (prompt lookup shines: it copies) · open-ended ones (where the "
                              "trained drafts help: they learnt chat answers, not copying)",
                        examples=[[p] for p in EXTRACTIVE_PROMPTS + OPEN_PROMPTS], inputs=[prompt],
                        example_labels=[f"extractive: {p[:50]}…" for p in EXTRACTIVE_PROMPTS]
                        + [f"open-ended: {p[:50]}" for p in OPEN_PROMPTS])
        with gr.Column(scale=2):
            pair = gr.Dropdown(choices=pair_choices(), value=DEFAULT_PAIR, label="target ← draft pair",
                               elem_id="pair", interactive=True)
            pair_status = gr.HTML(_status("Ready: the bundled model, offline."), elem_id="pair-status")
    with gr.Accordion("settings", open=True, elem_id="live-settings") as settings:
        with gr.Row():
            k = gr.Slider(1, UI_MAX_K, value=4, step=1, label="K (drafts per iteration)", elem_id="k")
            policy = gr.Dropdown(choices=K_POLICY_CHOICES, value="fixed", label="K policy (K is the cap unless fixed)",
                                 elem_id="k-policy", interactive=True)
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="temperature (0 = greedy)",
                                    elem_id="temperature")
            max_new = gr.Slider(1, UI_MAX_NEW_TOKENS, value=64, step=1, label="max new tokens", elem_id="max-new")
        with gr.Row():
            top_k = gr.Number(value=0, precision=0, minimum=0, label="top-k (0 = off)", elem_id="top-k")
            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.01, label="top-p (1 = off)", elem_id="top-p")
            seed = gr.Number(value=0, precision=0, minimum=0, label="seed", elem_id="seed")
            baseline = gr.Checkbox(value=True, label="measure a baseline in the same run", elem_id="baseline")
            chat = gr.Checkbox(value=True, label="chat template", elem_id="chat")
        with gr.Row():
            stop = gr.Slider(0.0, UI_MAX_CONFIDENCE_STOP, value=LIVE_CONFIDENCE_STOP, step=0.05,
                             label="confidence stop: a model draft stops drafting after a draft that takes its own confidence "
                                   "that all its drafts so far will be accepted below this; that draft is still offered "
                                   "(0 = always K drafts; exact either way)",
                             elem_id="confidence-stop")
    with gr.Row():
        run_btn = gr.Button("Run", variant="primary", elem_id="run", scale=2)
        stop_btn = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
        slow = gr.Checkbox(value=False, label="slow motion (one iteration per playback pace)", elem_id="slow",
                           scale=1)
        download = gr.DownloadButton("Export trace (JSON)", value=None, interactive=False, elem_id="export", scale=1)
    ctx.fold_in_presenter.append(settings)
    status = gr.HTML(_status("Press Run."), elem_id="status")
    viewer = build_viewer("")

    pair.input(lambda new, cur: change_pair(pool, new, cur), inputs=[pair, current_pair],
               outputs=[pair, current_pair, pair_status])
    run_inputs = [current_pair, prompt, k, policy, temperature, top_k, top_p, max_new, seed, baseline, chat, control,
                  slow, viewer.pace, stop]
    run_outputs = [*viewer.outputs(), ctx.latest_trace, download, status]
    run_btn.click(_runner(pool), inputs=run_inputs, outputs=run_outputs, concurrency_limit=4,
                  concurrency_id="live-run", show_progress="minimal", show_progress_on=[status])  # queue place, ETA
    stop_btn.click(stop_live, inputs=[control], outputs=None, queue=False)
    viewer.wire_steps(step_live, ctx.latest_trace, extra=[control])
    return viewer


__all__ = ["build_live_tab", "run_live", "stop_live", "step_live", "change_pair", "resolve_pair", "make_config",
           "pair_choices", "new_control", "Pair", "acquire_locks", "encode_for"]
