"""Exports from the Live and Replay tabs: the trace as JSON and the standalone replay (one HTML file,
``render.replay_html``), written to a bounded export folder (``serving.run_limits.prune_exports``) for the
page's download boxes."""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import gradio as gr

from components.pages.viewer import parse_state
from components.render.replay_html import replay_html
from components.serving.messages import page_error
from components.serving.run_limits import prune_exports

EXPORT_MAX_AGE_S = 3600


def export_trace(trace_dict: dict | None, folder: str | None = None) -> str:
    """Write the trace as JSON to a new file and return its path (for a DownloadButton)."""
    if trace_dict is None:
        raise page_error("Nothing to export yet: run a prompt first.")
    return export_file(json.dumps(trace_dict, ensure_ascii=False, indent=1), ".json", folder)


def export_file(text: str, suffix: str, folder: str | None = None) -> str:
    """Write an export (a trace, a standalone replay) to a new file in the export folder and return its path.
    Gradio copies it into its own cache when it is sent, so exports older than an hour are pruned here."""
    folder = folder or os.path.join(tempfile.gettempdir(), "specdec-exports")
    os.makedirs(folder, exist_ok=True)
    prune_exports(folder, EXPORT_MAX_AGE_S)          # bounded by age, size and count 
    stamp = time.strftime("%Y%m%d-%H%M%S")
    fd, path = tempfile.mkstemp(prefix=f"specdec-trace-{stamp}-", suffix=suffix, dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def export_replay_html(trace_dict: dict | None, folder: str | None = None) -> Any:
    """"Export replay (HTML)": the standalone replay of the trace in ``trace_dict`` as a file for the page's
    download box; a gr.Error saying why when there is nothing to export."""
    trace = parse_state(trace_dict)
    if trace is None:
        raise page_error("Nothing to export yet: run a prompt (or load a trace) first.")
    try:
        page = replay_html(trace)
    except ValueError as e:
        raise page_error(f"Cannot export a replay: {e}.") from e
    return gr.File(value=export_file(page, ".html", folder), visible=True)


def html_export_button(prefix: str = "") -> gr.Button:
    """The "Export replay (HTML)" button, ``#{prefix}export-html`` (wired by ``html_export_file``)."""
    return gr.Button("Export replay (HTML)", elem_id=f"{prefix}export-html", size="sm")


def html_export_file(button: gr.Button, state: Any, prefix: str = "") -> gr.File:
    """The file box the button fills with the standalone replay of the trace in ``state`` (hidden until then)."""
    out = gr.File(label="standalone replay: open it in any browser, no network needed", visible=False,
                  interactive=False, elem_id=f"{prefix}export-html-file")
    button.click(export_replay_html, [state], [out], show_progress="minimal")
    return out
