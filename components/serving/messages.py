"""Messages for the page: every gr.Error, gr.Warning and gr.Info the app raises or shows is built here.

Gradio renders a toast's message as HTML, and many messages quote untrusted input (a field of an uploaded
trace, a URL parameter, a model id, an exception's text). ``page_text`` HTML-escapes a message as a whole,
so a quoted ``<img src=x>`` shows as those characters and never as an element. Quotes are left as they are
(the message is element text, not an attribute), so ``got 'x'`` reads the same in the page and in an API
client's error.
"""
from __future__ import annotations

import html

import gradio as gr


def page_text(message: object) -> str:
    """``message`` as text that is safe to show as HTML: ``&``, ``<`` and ``>`` escaped."""
    return html.escape(str(message), quote=False)


def page_error(message: object, **kwargs: object) -> gr.Error:
    """A gr.Error (to raise) whose message is shown as text."""
    return gr.Error(page_text(message), **kwargs)


def page_warning(message: object) -> None:
    """A warning toast, shown as text."""
    gr.Warning(page_text(message))


def page_info(message: object) -> None:
    """An info toast, shown as text."""
    gr.Info(page_text(message))


__all__ = ["page_text", "page_error", "page_warning", "page_info"]
