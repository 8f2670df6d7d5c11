"""The students' page (the app's second page, ``/class``): its layout, phone first, and its three events — join
on load (the code from the address, or typed), the gr.Timer's poll, Send. The handlers live in ``student``.

The join link the presenter hands out is the app's own address with ``?class=CODE``; ``CLASS_REDIRECT`` (in the
page's head) sends such an address to this page before anything else loads.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import gradio as gr

from components.pages.classroom import student as st
from components.render.classroom import status_html
from components.serving.classroom import RoomStore

PATH = "class"
IDS_KEY = "sd-class-ids"            # the browser's storage of its student ids, per class code
CODE_JS = "(code, ids) => [new URLSearchParams(window.location.search).get('class') || '', ids]"
# the page's timer: the room's stage key from the app's /class/stage (no gradio event); only a new key reaches the
# server's handlers (the box's change event), so "nothing new" costs the server one dictionary lookup
POLL_JS = """
async (code, seen) => {
  if (!code) return seen;
  const base = window.location.pathname.replace(/class\\/?$/, "");
  try {
    const r = await fetch(base + "class/stage?code=" + encodeURIComponent(code), {cache: "no-store"});
    return r.ok ? (await r.text()) : seen;
  } catch (e) {
    return seen;
  }
}
"""
# in the page's <head>: an address of the app with ?class=CODE opens the students' page (before gradio loads)
CLASS_REDIRECT = """<script>
(function () {
  var q = new URLSearchParams(window.location.search);
  if (q.has("class") && !/\\/class\\/?$/.test(window.location.pathname)) {
    window.location.replace(window.location.pathname.replace(/\\/?$/, "/") + "class" + window.location.search);
  }
})();
</script>"""


@dataclass
class StudentPage:
    parts: dict[str, Any]        # every component and State, by the names of ``student``'s output tuples
    send: gr.Button
    join: gr.Button
    code_in: gr.Textbox
    timer: gr.Timer

    def __call__(self, names: tuple[str, ...]) -> list[Any]:
        return [self.parts[n] for n in names]


def build_student_page(page: gr.Blocks, store: RoomStore) -> StudentPage:
    """The page's components and events (call inside ``with demo.route(...) as page``)."""
    with gr.Column(elem_id="class-page"):
        title = gr.HTML('<h2 class="sd-learn-title">A class</h2>', elem_id="learn-title")
        status = gr.HTML(status_html("Joining the class…", "wait"), elem_id="class-status")
        with gr.Column(visible=False, elem_id="class-join-form") as form:
            code_in = gr.Textbox(label="class code", max_length=64, elem_id="class-code-in", placeholder="7KX4-MP9A")
            join = gr.Button("Join", variant="primary", elem_id="class-join-button")
        with gr.Column(visible=False, elem_id="class-chapter", elem_classes=["learn-chapter"]) as chapter:
            text = gr.Markdown("", elem_classes=["learn-text", "sd-learn-text"])
            note = gr.HTML("", elem_classes=["learn-note"])
            plot1 = gr.Plot(show_label=False, elem_classes=["learn-plot"])
            with gr.Row(equal_height=True, elem_classes=["learn-guess-row"]):
                slider = gr.Slider(0, 1, value=0, step=1, visible=False, elem_classes=["learn-guess"], min_width=240)
                radio = gr.Radio([], value=None, visible=False, elem_classes=["learn-guess"], min_width=240)
                send = gr.Button("Send", variant="primary", elem_id="class-send", scale=0, min_width=140)
            answer = gr.HTML("", elem_classes=["learn-answer"])
            histogram = gr.Plot(show_label=False, elem_id="class-histogram")
            plot2 = gr.Plot(show_label=False, elem_classes=["learn-plot"])
        with gr.Column(visible=False, elem_id="class-live-run") as live:
            gr.Markdown("**Your presenter's Live run**")
            live_html = gr.HTML("")
            live_plot = gr.Plot(show_label=False)
        timer = gr.Timer(st.POLL_S, active=False)
        # hidden boxes rather than States where a change event listens: gradio looks for a State's listeners
        # through every event of the app on every answer that sets it (≈ 0.6 ms each here)
        states = {"me": gr.State(None), "code": gr.Textbox("", visible=False), "stage": gr.Textbox("", visible=False),
                  "live_key": gr.Textbox("", visible=False), "gone": gr.Checkbox(False, visible=False),
                  "touched": gr.Checkbox(False, visible=False)}      # the guess control moved on this run
        parts = {"title": title, "status": status, "form": form, "chapter": chapter, "text": text, "note": note,
                 "plot1": plot1, "slider": slider, "radio": radio, "answer": answer, "histogram": histogram,
                 "plot2": plot2, "live": live, "live_html": live_html, "live_plot": live_plot, "timer": timer,
                 "ids": gr.BrowserState(None, storage_key=IDS_KEY), **states}
        code_url = gr.Textbox(visible=False)
    out = StudentPage(parts, send, join, code_in, timer)
    me = parts["me"]
    quick = {"queue": False, "show_progress": "hidden"}
    joining = functools.partial(st.join_class, store)
    # on load: join with the code the page's address names (read in the browser); or the code typed in
    page.load(joining, [code_url, parts["ids"]], out(st.JOIN), js=CODE_JS, api_name="class_join", **quick)
    gr.on([join.click, code_in.submit], joining, [code_in, parts["ids"]], out(st.JOIN), **quick)
    # following the room: the timer reads its stage key (in the browser); a new key redraws the page
    timer.tick(None, [parts["code"], parts["stage"]], [parts["stage"]], js=POLL_JS, **quick)
    parts["stage"].change(functools.partial(st.refresh_class, store), [me], out(st.REFRESH),
                          api_name="class_refresh", **quick)
    parts["live_key"].change(functools.partial(st.live_of, store), [me], out(st.LIVE), **quick)
    parts["gone"].change(st.stop_following, [parts["gone"]], out(st.STOP), **quick)
    for control in (slider, radio):          # moved by the student (not set by a refresh): in the browser only
        control.input(None, None, parts["touched"], js="() => true", **quick)
    send.click(functools.partial(st.send_guess, store), [me, slider, radio, parts["touched"]], [status],
               api_name="class_send", **quick)
    return out


__all__ = ["PATH", "IDS_KEY", "CLASS_REDIRECT", "StudentPage", "build_student_page"]
