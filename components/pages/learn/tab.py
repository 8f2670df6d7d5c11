"""The Learn tab's page: the chapter list, Back / Next with "Chapter n / N", one block per chapter (text,
optional setting, Run, note, two figures, the guess, Reveal, the answer, a link to the chapter), and the
page-load hook that opens the tab and chapter a link names (``?tab=learn&chapter=4``).

Stable ids: ``learn-prev``, ``learn-next``, ``learn-title``, ``learn-list``, ``learn-chapter-<n>``; inside each
chapter (elem_classes, one per chapter, the visible one is the current chapter's): ``learn-text``,
``learn-setting``, ``learn-run``, ``learn-note``, ``learn-plot``, ``learn-guess``, ``learn-reveal``,
``learn-answer``, ``learn-link``. The keyboard's ← / → reach Back / Next (``presenter.KEYBOARD_JS``).

The handlers are module-level functions (the pool passed in) that the tests call without a browser.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from components.pages.context import AppContext
from components.pages.learn import basics, practice
from components.pages.learn.book import N_PLOTS, Chapter, Step
from components.pages.learn.nav import chapter_link, read_query, step, title_html
from components.render.base import empty_figure
from components.serving.gpu import gpu_task
from components.serving.messages import page_error, page_warning
from components.serving.models import bind_pool
from components.serving.pairs import Pool

CHAPTERS: tuple[Chapter, ...] = (*basics.CHAPTERS, *practice.CHAPTERS)
N = len(CHAPTERS)
RUN_SECONDS = 120          # a chapter's run or reveal holds a ZeroGPU slice at most this long
# the page's look of the lesson, and its presenter-mode sizes (see ``presenter.PRESENTER_CSS`` for !important)
CSS = """
.sd-learn-title { margin: 4px 0; font-size: 22px; }
.sd-learn-text, .sd-learn-text p { font-size: 16px; line-height: 1.5; }
.sd-learn-note p { font-size: 14px; color: #333; margin: 2px 0; }
.sd-learn-text-out { font-size: 14px; margin: 4px 0; padding: 4px 10px; border-left: 3px solid #bbb; white-space: pre-wrap; }
.sd-learn-reveal { font-size: 16px; padding: 8px 12px; border-radius: 6px; background: #f4f4f4; }
.sd-learn-reveal p { margin: 3px 0; }
.sd-learn-hit { border-left: 5px solid #009E73; }
.sd-learn-miss { border-left: 5px solid #D55E00; }
body.sd-presenter .sd-learn-title { font-size: 32px !important; }
body.sd-presenter .sd-learn-text, body.sd-presenter .sd-learn-text p { font-size: 23px !important; }
body.sd-presenter .sd-learn-note p, body.sd-presenter .sd-learn-text-out { font-size: 19px !important; }
body.sd-presenter .sd-learn-reveal { font-size: 22px !important; }
"""


def chapter(number: Any) -> Chapter:
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= N:
        raise page_error(f"There is no chapter {repr(number)[:40]}: the chapters are 1 to {N}.")
    return CHAPTERS[number - 1]


# --- handlers -------------------------------------------------------------------------------------------

def go_to(number: int) -> tuple:
    """Show chapter ``number``: the list's value, the title, and each chapter block's visibility."""
    ch = chapter(number)
    return (gr.Radio(value=number), title_html(number, N, ch.title),
            *[gr.Column(visible=i == number) for i in range(1, N + 1)])


def go_step(current: Any, delta: int) -> tuple:
    return go_to(step(current if isinstance(current, int) else 1, delta, N))


def _figures(s: Step) -> list[Any]:
    return [gr.skip() if f is None else f for f in s.figures]


def _setting(ch: Chapter, setting: Any) -> Any:
    if ch.setting is None:
        return None
    try:
        return ch.setting.check(setting)
    except ValueError as e:
        raise page_error(f"Chapter “{ch.title}”: {e}") from None


def run_chapter(pool: Pool, number: int, setting: Any = None) -> tuple:
    """Run: (note, figure 1, figure 2, memo, answer cleared)."""
    ch = chapter(number)
    s = ch.run(pool, _setting(ch, setting))
    return (s.note, *_figures(s), s.memo, "")


def reveal_chapter(pool: Pool, number: int, guess: Any, memo: Any, setting: Any = None) -> tuple:
    """Reveal: (answer, figure 1, figure 2). Needs a guess and the chapter's run."""
    ch = chapter(number)
    if guess is None or guess == "":
        raise page_error("Make your guess first, then Reveal.")
    try:
        guess = ch.guess.check(guess)
    except ValueError as e:
        raise page_error(f"Chapter “{ch.title}”: {e}") from None
    try:
        s = ch.reveal(pool, guess, memo, _setting(ch, setting) if ch.setting and ch.setting.at_reveal else None)
    except ValueError as e:       # the run lacks what the answer needs (e.g. a baseline dropped at the time limit)
        raise page_error(f"Chapter “{ch.title}”: {e}; press Run again.") from None
    return (s.answer, *_figures(s))


def open_from_url(request: gr.Request, tab_ids: Sequence[str]) -> tuple:
    """On page load: the tab and chapter the URL names (``?tab=learn&chapter=4``); a bad value is refused
    with a warning naming it and changes nothing."""
    params = dict(getattr(request, "query_params", None) or {})
    req = read_query(params, tab_ids, N)
    for problem in req.problems:
        page_warning(f"Ignored in the link: {problem}.")
    tabs = gr.Tabs(selected=req.tab) if req.tab else gr.skip()
    rest = go_to(req.chapter) if req.chapter else (gr.skip(),) * (2 + N)
    return (tabs, *rest)


# --- layout ---------------------------------------------------------------------------------------------

@dataclass
class LearnTab:
    chapter_list: gr.Radio
    title: gr.HTML
    blocks: list[gr.Column]

    def wire_url(self, demo: gr.Blocks, tabs: gr.Tabs, tab_ids: Sequence[str]) -> None:
        """Open the tab and chapter a link names when the page loads."""
        ids = tuple(tab_ids)

        def load(request: gr.Request) -> tuple:
            return open_from_url(request, ids)
        demo.load(load, None, [tabs, self.chapter_list, self.title, *self.blocks], show_progress="hidden")


def _guess_control(ch: Chapter) -> Any:
    g = ch.guess
    if g.choices:
        return gr.Radio(list(g.choices), value=g.value, label=f"your guess: {g.label}", elem_classes=["learn-guess"])
    return gr.Slider(g.minimum, g.maximum, value=g.value, step=g.step, label=f"your guess: {g.label}",
                     elem_classes=["learn-guess"])


def _setting_control(ch: Chapter) -> gr.Radio:
    return gr.Radio(list(ch.setting.choices), value=ch.setting.value, label=ch.setting.label,
                    elem_classes=["learn-setting"])


def _plot(ch: Chapter) -> gr.Plot:
    return gr.Plot(empty_figure(ch.title, "Press Run: a real run of the bundled model is drawn here."),
                   show_label=False, elem_classes=["learn-plot"])


def _block(pool: Pool, number: int, ch: Chapter) -> gr.Column:
    with gr.Column(visible=number == 1, elem_id=f"learn-chapter-{number}", elem_classes=["learn-chapter"]) as col:
        gr.Markdown(ch.text, elem_classes=["learn-text", "sd-learn-text"])
        setting = None
        if ch.setting is not None and not ch.setting.at_reveal:
            setting = _setting_control(ch)
        run = gr.Button(ch.run_label, variant="primary", elem_classes=["learn-run"])
        note = gr.HTML("", elem_classes=["learn-note"])
        plots = [_plot(ch)]
        if ch.setting is not None and ch.setting.at_reveal:
            setting = _setting_control(ch)
        with gr.Row(equal_height=True):
            guess = _guess_control(ch)
            reveal = gr.Button("Reveal", variant="secondary", elem_classes=["learn-reveal"], scale=0, min_width=140)
        answer = gr.HTML("", elem_classes=["learn-answer"])
        plots += [_plot(ch) for _ in range(N_PLOTS - 1)]     # below the answer: mostly what the reveal draws
        link = chapter_link(number)
        gr.Markdown(f"Link to this chapter: [{link}]({link})", elem_classes=["learn-link"])
        memo = gr.State(None)
    number_in = gr.State(number)
    extra = [setting] if setting is not None else []
    run.click(gpu_task(bind_pool(run_chapter, pool), duration=RUN_SECONDS), [number_in, *extra],
              [note, *plots, memo, answer], concurrency_limit=4, concurrency_id="learn-run", show_progress="minimal")
    reveal.click(gpu_task(bind_pool(reveal_chapter, pool), duration=RUN_SECONDS), [number_in, guess, memo, *extra],
                 [answer, *plots], concurrency_limit=4, concurrency_id="learn-run", show_progress="minimal")
    return col


def build_learn_tab(ctx: AppContext) -> LearnTab:
    """The Learn tab's components and events (call inside ``gr.Tab``)."""
    with gr.Row(equal_height=True):
        prev = gr.Button("← Back", elem_id="learn-prev", scale=0, min_width=110)
        title = gr.HTML(title_html(1, N, CHAPTERS[0].title), elem_id="learn-title")
        nxt = gr.Button("Next →", elem_id="learn-next", scale=0, min_width=110)
    with gr.Row():
        with gr.Column(scale=1, min_width=230):
            chapter_list = gr.Radio([(f"{i}. {c.title}", i) for i, c in enumerate(CHAPTERS, 1)], value=1,
                                    label="chapters", elem_id="learn-list")
            gr.Markdown("← / → step through the chapters (when the focus is not in a field). Every chapter runs "
                        "the real models on this machine, in seconds.", elem_classes=["sd-keys-hint"])
        with gr.Column(scale=5):
            blocks = [_block(ctx.pool, i, c) for i, c in enumerate(CHAPTERS, 1)]
    nav_out = [chapter_list, title, *blocks]
    prev.click(functools.partial(go_step, delta=-1), [chapter_list], nav_out, queue=False, show_progress="hidden")
    nxt.click(functools.partial(go_step, delta=1), [chapter_list], nav_out, queue=False, show_progress="hidden")
    chapter_list.input(go_to, [chapter_list], nav_out, queue=False, show_progress="hidden")
    return LearnTab(chapter_list, title, blocks)


__all__ = ["CHAPTERS", "N", "CSS", "LearnTab", "build_learn_tab", "go_to", "go_step", "run_chapter", "reveal_chapter",
           "open_from_url", "chapter"]
