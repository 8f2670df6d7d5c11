"""The Replay tab: view a recorded trace (an upload or a shipped example) with every Live figure, the
token stream and step-through, without any model. A batched run's trace ("specdec-trace/2") shows the batch's
views too (every row, the pooled figures, the batch's forwards: ``batch_views``), the viewer on row 1.

Uploads are untrusted: the size is checked before anything is read (``MAX_TRACE_BYTES``), the text must be
UTF-8 JSON, and ``Trace.from_dict`` validates the structure and its invariants. Every refusal is a
gr.Error that says what was wrong.
"""
from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from specdec_core import Trace
from specdec_core.limits import MAX_TRACE_BYTES

from components.pages.batch_views import batch_updates, build_batch_views
from components.pages.export import html_export_button, html_export_file
from components.pages.viewer import Viewer, build_viewer, render_trace, step_view
from components.render.base import instructive_index
from components.serving.messages import page_error

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def read_trace_file(path: str | os.PathLike, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """Load and validate a trace JSON file. Raises ValueError naming the problem."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise ValueError(f"cannot read the file: {e.strerror or e}") from e
    if size > max_bytes:
        raise ValueError(f"the file is {size / 1e6:.1f} MB; traces up to {max_bytes / 1e6:.0f} MB are accepted")
    if size == 0:
        raise ValueError("the file is empty")
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise ValueError(f"cannot read the file: {e.strerror or e}") from e
    if len(raw) > max_bytes:
        raise ValueError(f"the file is larger than {max_bytes / 1e6:.0f} MB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"the file is not UTF-8 text (bad byte at offset {e.start}); is it a trace JSON?") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the file is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from e
    except RecursionError as e:
        raise ValueError("the file is not a trace: JSON nested too deeply") from e
    return Trace.from_dict(data)


@dataclass(frozen=True)
class Example:
    name: str       # file name, e.g. "ngram_extractive.json"
    title: str      # button label


def list_examples(folder: Path = EXAMPLES_DIR) -> list[Example]:
    """The example traces shipped in ``examples/`` (title from the trace's config, else the file name)."""
    out = []
    for p in sorted(folder.glob("*.json")):
        title = p.stem.replace("_", " ")
        try:
            with open(p, encoding="utf-8") as f:
                title = str(json.load(f).get("config", {}).get("title") or title)
        except (OSError, ValueError, AttributeError):
            pass
        out.append(Example(p.name, title))
    return out


def load_example(name: str, folder: Path = EXAMPLES_DIR) -> Trace:
    """An example trace by file name; only names that ``list_examples`` returns are accepted."""
    names = {e.name for e in list_examples(folder)}
    if name not in names:
        raise ValueError(f"unknown example {name!r:.80}")
    return read_trace_file(folder / name)


def _loaded_text(trace: Trace, source: str) -> str:
    cfg = trace.config
    batch = "" if trace.batch is None else (f" (row 1 of a batch of {trace.batch.size}: "
                                            f"{trace.batch.stats.new_tokens} tokens in {trace.batch.stats.iterations} "
                                            "batch iterations)")
    return (f"Loaded {source}: {trace.stats.new_tokens} tokens in {len(trace.iterations)} iterations{batch} · "
            f"target {cfg.get('target', '?')} · draft {cfg.get('draft', cfg.get('drafter'))} · "
            "step through it, or press ▶ play")


def _show(trace: Trace, source: str) -> tuple:
    view = render_trace(trace, instructive_index(trace))
    return (*view, *batch_updates(trace), trace.to_dict(), _note(_loaded_text(trace, source)))


def _note(text: str) -> str:
    return f'<div class="sd-status">{html.escape(text)}</div>'


def replay_upload(path: str | None) -> tuple:
    """Upload handler: validated trace -> viewer outputs + the batch's views + (replay state, note). gr.Error when
    refused."""
    if not path:
        raise page_error("No file received.")
    try:
        trace = read_trace_file(path)
    except ValueError as e:
        raise page_error(f"This file cannot be replayed: {e}") from e
    return _show(trace, f"“{Path(path).name}”")


def replay_example(name: str, folder: Path = EXAMPLES_DIR) -> tuple:
    try:
        trace = load_example(name, folder)
    except ValueError as e:
        raise page_error(f"The example cannot be loaded: {e}") from e
    return _show(trace, f"example “{name}”")


def first_example(folder: Path = EXAMPLES_DIR) -> tuple[Trace, str] | None:
    """The first shipped example (the one the tab opens with) and its file name, or None when there is none
    that loads."""
    for ex in list_examples(folder):
        try:
            return load_example(ex.name, folder), ex.name
        except ValueError:
            continue
    return None


def build_replay_tab(folder: Path = EXAMPLES_DIR) -> Viewer:
    """The Replay tab's components and events (call inside ``gr.Tab``). It opens with the first example
    loaded, so there is never a grid of empty figures."""
    opening = first_example(folder)
    state = gr.State(opening[0].to_dict() if opening else None)
    gr.Markdown("Replay a recorded trace — an export from the Live tab or one of the examples — "
                "with no model loaded. Files are checked before they are shown (JSON, ≤ 5 MB, valid trace).")
    with gr.Row():
        with gr.Column(scale=2):
            upload = gr.File(label="upload a trace (.json, at most 5 MB)", file_types=[".json"], type="filepath",
                             elem_id="replay-upload")
            html_btn = html_export_button("replay-")
            html_export_file(html_btn, state, "replay-")
        with gr.Column(scale=3):
            gr.Markdown("**examples** (recorded from the bundled model, each with a same-run baseline)")
            buttons = [(gr.Button(ex.title, elem_id=f"example-{i}", size="sm"), ex.name)
                       for i, ex in enumerate(list_examples(folder))]
    note = gr.HTML(_note(_loaded_text(opening[0], f"example “{opening[1]}”") if opening else
                         "No trace loaded: upload one (the examples folder is empty)."), elem_id="replay-note")
    batch_views = build_batch_views("replay-", initial=opening[0] if opening else None)
    viewer = build_viewer("replay-", initial=opening[0] if opening else None,
                          index=instructive_index(opening[0]) if opening else None)
    outputs = [*viewer.outputs(), *batch_views.outputs(), state, note]
    upload.upload(replay_upload, inputs=[upload], outputs=outputs)
    for button, name in buttons:
        button.click(lambda n=name: replay_example(n, folder), inputs=None, outputs=outputs)
    viewer.wire_steps(step_view, state)
    return viewer


__all__ = ["read_trace_file", "list_examples", "load_example", "first_example", "replay_upload", "replay_example",
           "build_replay_tab", "Example"]
