"""The page's theme: gradio's Default theme with the colours that fail WCAG AA contrast (4.5:1 for text) replaced,
found by axe-core in the browser suite (tests/test_browser_a11y.py; docs/accessibility.md has the before and
after):

- the primary button (Run, …): white on orange-500/600 (#f97316 2.8:1, #ea580c hovered 3.55:1) → orange-700
  (#c2410c, 5.2:1), hovered orange-800 (#9a3412, 7.3:1);
- the stop button: white on red-500 (#ef4444, 3.76:1) → red-700 (#b91c1c, 6.5:1), hovered red-800;
- "subdued" text — a checkbox's info line, a slider's minimum and maximum, the file drop's "- or -", the footer's
  links — was zinc-400 (#bbbbc2, 1.9:1 on white) → zinc-600 (#52525b, 7.7:1); placeholders zinc-500 (4.8:1).

``A11Y_CSS``: a figure's toolbar (hover-only in Plotly) also shows while the keyboard focus is in it; the selected
tab's name, drawn in the accent colour (orange-500, 2.8:1; axe flags it on a phone), is orange-700 (5.2:1).
"""
from __future__ import annotations

import gradio as gr
from gradio.themes.utils import colors


def theme() -> gr.themes.Base:
    return gr.themes.Default().set(
        button_primary_background_fill="*primary_700",
        button_primary_background_fill_hover="*primary_800",
        button_cancel_background_fill=colors.red.c700,
        button_cancel_background_fill_hover=colors.red.c800,
        body_text_color_subdued="*neutral_600",
        input_placeholder_color="*neutral_500",
    )


# Plotly shows a figure's toolbar on hover only: shown too while a keyboard has the focus in it
A11Y_CSS = """
.js-plotly-plot .plotly .modebar--hover:focus-within > :not(.watermark) { opacity: 1 !important; }
button[role="tab"].selected { color: #c2410c; }
"""

__all__ = ["theme", "A11Y_CSS"]
