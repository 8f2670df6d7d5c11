"""The presenter's class panel on the Learn tab, and its wiring: ``build_lead_panel`` (above the chapters: Start a
class (with nicknames or not), then the code, the count, the join link and its QR, Lock / Reveal to the class / Next
chapter / Send my Live run / End, the guess timer, the students (remove one), the results to download, and after a
Reveal the class's answer and histogram, right under the button) and ``wire_lead``, which connects them to the
handlers of ``lead`` and ``manage`` and to the Learn tab (its runs go to the room, its moves move the class, the
class's Reveal also fills the chapter's answer and figures).

The panel shows in presenter mode and whenever the page leads a class. Ids: ``class-lead`` (the panel),
``class-start``, ``class-nicknames``, ``class-code``, ``class-join``, ``class-count``, ``class-lead-status``,
``class-lock``, ``class-reveal``, ``class-next``, ``class-live``, ``class-end``, ``class-timer-seconds``,
``class-timer-start``, ``class-roster``, ``class-remove``, ``class-export``, ``class-export-file``,
``class-lead-link``; ``class-results``, ``class-answer``, ``class-histogram``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import gradio as gr

from components.pages.classroom import lead as ld
from components.pages.classroom import manage as mg
from components.pages.classroom.publish import class_chapter, reveal_for_class
from components.pages.context import AppContext
from components.pages.learn.tab import RUN_SECONDS, ChapterBlock, LearnTab, go_step
from components.serving.classroom import RoomStore
from components.serving.gpu import gpu_task

LEAD_KEY = "sd-class-lead"          # the browser's storage of the class this presenter leads
# the page's own address for the links (as its browser sees it), and the presenter link's lead read once and
# taken out of the address bar (a projector shows it)
BASE_JS = "(base, lead, nicknames, chapter) => [window.location.href, lead, nicknames, chapter]"
RESTORE_JS = """
(fromLink, stored, base) => {
  const q = new URLSearchParams(window.location.search);
  const lead = q.get("lead") || "";
  if (lead) {
    q.delete("lead");
    const rest = q.toString();
    window.history.replaceState(null, "", window.location.pathname + (rest ? "?" + rest : "") + window.location.hash);
  }
  return [lead, stored, window.location.href];
}
"""


@dataclass
class ClassResults:
    column: gr.Column
    answer: gr.HTML
    histogram: gr.Plot


@dataclass
class ClassTools:
    """The guess timer, the roster and the results' download (``manage``)."""
    seconds: gr.Dropdown
    start_timer: gr.Button
    roster: gr.Dropdown
    remove: gr.Button
    export: gr.Button
    files: gr.File


@dataclass
class LeadPanel:
    column: gr.Column
    start: gr.Button
    code: gr.HTML
    join: gr.HTML
    count: gr.HTML
    status: gr.HTML
    controls: gr.Column
    lock: gr.Button
    reveal: gr.Button
    next: gr.Button
    live: gr.Button
    end: gr.Button
    link: gr.Textbox
    timer: gr.Timer
    seen: gr.State
    stored: gr.BrowserState
    base: gr.Textbox
    from_link: gr.Textbox

    results: ClassResults
    tools: ClassTools
    nicknames: gr.Checkbox
    start_row: gr.Row

    def outputs(self, lead: Any) -> list[Any]:
        """``lead.PANEL``'s order."""
        return [lead, self.stored, self.code, self.join, self.count, self.status, self.controls, self.start_row,
                self.link, self.timer, self.seen, self.lock]


def build_lead_panel(stored: gr.BrowserState) -> LeadPanel:
    """The class panel (call inside the Learn tab, above the chapters); ``stored``: the browser's storage of the class
    the page leads (``lead_context`` makes it at the page's top, where it is mounted whatever tab opens first)."""
    with gr.Column(visible=False, elem_id="class-lead") as column:
        gr.Markdown("**Teach a class**: students follow this chapter on their phones, guess, and see the class's "
                    "guesses against your run when you reveal.", elem_classes=["sd-keys-hint"])
        with gr.Row(equal_height=True) as start_row:
            start = gr.Button("Start a class", variant="primary", elem_id="class-start", scale=0, min_width=180)
            nicknames = gr.Checkbox(False, label="Ask students for a nickname (off: anonymous)",
                                    elem_id="class-nicknames", scale=1)
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=300):
                code = gr.HTML("", elem_id="class-code")
                count = gr.HTML("", elem_id="class-count")
                status = gr.HTML("", elem_id="class-lead-status")
            with gr.Column(scale=2, min_width=300):
                join = gr.HTML("", elem_id="class-join")
        with gr.Column(visible=False, elem_id="class-controls") as controls:
            with gr.Row():
                lock = gr.Button("Lock guesses", elem_id="class-lock", min_width=140)
                reveal = gr.Button("Reveal to the class", variant="primary", elem_id="class-reveal", min_width=160)
                nxt = gr.Button("Next chapter →", elem_id="class-next", min_width=140)
                live = gr.Button("Send my Live run", elem_id="class-live", min_width=140)
                end = gr.Button("End the class", variant="stop", elem_id="class-end", min_width=120)
            tools = build_class_tools()
        results = build_class_results()
        with gr.Accordion("Presenter link", open=False):
            link = gr.Textbox("", label=ld.LINK_LABEL, visible=False, elem_id="class-lead-link", interactive=False,
                              buttons=["copy"])
    # outside the panel, which stays unmounted while hidden (and a hidden component gets no value from its browser)
    timer = gr.Timer(ld.POLL_S, active=False)
    seen = gr.State(-1)
    base = gr.Textbox(visible=False)
    from_link = gr.Textbox(visible=False)
    return LeadPanel(column, start, code, join, count, status, controls, lock, reveal, nxt, live, end, link, timer,
                     seen, stored, base, from_link, results, tools, nicknames, start_row)


def build_class_tools() -> ClassTools:
    """The guess timer, the students and the results (in the panel, under the controls)."""
    with gr.Row(equal_height=True, elem_id="class-tools"):
        seconds = gr.Dropdown([(f"{s} s", s) for s in mg.TIMER_CHOICES], value=30, label="guess timer",
                              elem_id="class-timer-seconds", min_width=120, scale=0)
        start_timer = gr.Button("Start timer", elem_id="class-timer-start", min_width=120, scale=0)
        export = gr.Button("Export results (CSV, JSON)", elem_id="class-export", min_width=200, scale=0)
    files = gr.File(label="the class's results", visible=False, interactive=False, file_count="multiple",
                    elem_id="class-export-file")
    with gr.Accordion("Students (remove one)", open=False):
        with gr.Row(equal_height=True):
            roster = gr.Dropdown([], value=None, label="students in the class (✓: guessed this run)",
                                 elem_id="class-roster", filterable=True, scale=1)
            remove = gr.Button("Remove", variant="stop", elem_id="class-remove", min_width=100, scale=0)
    return ClassTools(seconds, start_timer, roster, remove, export, files)


def build_class_results() -> ClassResults:
    """The class's answer and histogram (shown after a Reveal to the class)."""
    with gr.Column(visible=False, elem_id="class-results") as column:
        answer = gr.HTML("", elem_id="class-answer")
        histogram = gr.Plot(show_label=False, elem_id="class-histogram")
    return ClassResults(column, answer, histogram)


def wire_lead(demo: gr.Blocks, panel: LeadPanel, learn: LearnTab, presenter: gr.Checkbox, ctx: AppContext,
              store: RoomStore) -> None:
    """Every event of the class panel; the Learn tab's own events hand their runs over through ``ctx.on_learn_run``
    (set by ``lead_context``)."""
    lead, results = ctx.class_lead, panel.results
    out = panel.outputs(lead)
    show = {"fn": ld.show_panel, "inputs": [presenter, lead], "outputs": [panel.column], "queue": False,
            "show_progress": "hidden"}
    quick = {"queue": False, "show_progress": "hidden"}
    panel.start.click(functools.partial(ld.start_class, store), [panel.base, lead, panel.nicknames,
                                                                 learn.chapter_list], out,
                      js=BASE_JS, api_name="class_start", **quick)
    demo.load(functools.partial(ld.restore_lead, store), [panel.from_link, panel.stored, panel.base],
              out + learn.nav_outputs, js=RESTORE_JS, **quick).then(**show)
    presenter.change(**show)
    panel.timer.tick(functools.partial(ld.lead_poll, store), [lead, panel.seen], out, api_name="class_lead_poll",
                     **quick)
    panel.lock.click(functools.partial(ld.lock_guesses, store), [lead], out, api_name="class_lock", **quick)
    panel.end.click(functools.partial(ld.end_class, store), [lead], out, **quick).then(
        ld.hide_results, None, [results.column], **quick)
    panel.next.click(functools.partial(go_step, delta=1), [learn.chapter_list], learn.nav_outputs,
                     api_name="class_next", **quick)
    learn.chapter_list.change(functools.partial(ld.follow_chapter, store), [lead, learn.chapter_list],
                              [panel.status, panel.count, panel.seen, results.column], api_name="class_follow",
                              **quick)
    reveal = functools.partial(ld.reveal_to_class, store, ctx.pool, measure=gpu_task(reveal_for_class,
                                                                                      duration=RUN_SECONDS))
    chapters = [c for b in learn.chapters for c in (b.answer, *b.plots)]
    panel.reveal.click(reveal, [lead], [panel.status, panel.count, results.column, results.answer, results.histogram,
                                        *chapters], concurrency_limit=4, concurrency_id="learn-run",
                       show_progress="minimal", api_name="class_reveal")
    panel.live.click(functools.partial(ld.push_live, store), [lead, ctx.latest_trace], [panel.status], **quick)
    wire_tools(panel, lead, store)
    for block in learn.chapters:
        setting = learn_setting(block)
        if setting is not None:
            setting.change(functools.partial(ld.choose_setting, store, number=block.number), [lead, setting], None,
                           **quick)


def wire_tools(panel: LeadPanel, lead: gr.State, store: RoomStore) -> None:
    tools, quick = panel.tools, {"queue": False, "show_progress": "hidden"}
    tools.start_timer.click(functools.partial(mg.start_timer, store), [lead, tools.seconds],
                            [panel.status, panel.count, panel.seen], api_name="class_timer", **quick)
    tools.roster.focus(functools.partial(mg.roster, store), [lead], [tools.roster], **quick)
    tools.remove.click(functools.partial(mg.remove_student, store), [lead, tools.roster],
                       [panel.status, panel.count, tools.roster], api_name="class_remove", **quick)
    tools.export.click(functools.partial(mg.export_results, store), [lead], [panel.status, tools.files],
                       api_name="class_export", **quick)


def learn_setting(block: ChapterBlock) -> Any:
    """The chapter's setting control when the Reveal takes it (the presenter may change it after the run)."""
    ch = class_chapter(block.number)
    return block.setting if ch.setting is not None and ch.setting.at_reveal else None


def lead_context(ctx: AppContext, store: RoomStore) -> tuple[AppContext, gr.BrowserState]:
    """``ctx`` with the page's lead (a gr.State) and the hook that hands the Learn tab's runs to the room, and the
    browser's storage of the lead (a reload keeps the room). Call at the top of the page's Blocks: a component in a
    hidden column or a tab not yet shown is not mounted, and a BrowserState that is not mounted reads nothing."""
    ctx.class_lead = gr.State(None)
    ctx.on_learn_run = functools.partial(ld.publish_run, store)
    return ctx, gr.BrowserState(None, storage_key=LEAD_KEY)


__all__ = ["LeadPanel", "ClassResults", "ClassTools", "build_lead_panel", "build_class_tools", "wire_lead",
           "wire_tools", "lead_context", "LEAD_KEY", "learn_setting"]
