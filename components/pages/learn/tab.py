"""The Learn tab's page, phone first: the title ("Chapter n / N · …"), the chapter list folded under it (open on a
wide screen), one block per chapter in the order a learner works — text, setting, Run (and Run longer where one
run may not settle the answer), note, the run's figure, the guess, Reveal, the answer, the second figure, a link
— and Back / Next both above (wide screens) and below the answer. The page-load hook opens the tab and chapter a
link names (``?tab=learn&chapter=4``) and tells the chapters whether the screen is narrow (figures for a phone).

Reveal judges only a committed guess: one the learner moved or picked (a gr.State per chapter follows the
control's input events); before that, and before the chapter's run, it answers with one friendly line.

Stable ids: ``learn-prev``, ``learn-next``, ``learn-title``, ``learn-list``, ``learn-chapter-<n>``; classes
(one per chapter, the visible one is the current chapter's): ``learn-text``, ``learn-setting``, ``learn-run``,
``learn-longer``, ``learn-note``, ``learn-plot``, ``learn-guess``, ``learn-reveal``, ``learn-answer``,
``learn-link``; ``learn-prev`` / ``learn-next`` also name the Back / Next buttons below the chapters. The
keyboard's ← / → reach Back / Next (``presenter.KEYBOARD_JS``).

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
from components.pages.learn import reveal as rv
from components.pages.learn.book import N_PLOTS, Ask, Chapter, Step
from components.pages.learn.coupling import COUPLING
from components.pages.learn.nav import chapter_link, read_query, step, title_html
from components.pages.learn.runs import LONGER, NeedsRun
from components.render.base import empty_figure
from components.serving.gpu import gpu_task
from components.serving.messages import page_error, page_warning
from components.serving.models import bind_pool
from components.serving.pairs import Pool

CHAPTERS: tuple[Chapter, ...] = (*basics.CHAPTERS, COUPLING, *practice.CHAPTERS)
N = len(CHAPTERS)
RUN_SECONDS = 120          # a chapter's run or reveal holds a ZeroGPU slice at most this long
NARROW_PX = 640            # a page narrower than this is a phone: figures laid out for it, the list folded
NOT_RUN = "Run this chapter first: the answer comes from the run you make."
NO_GUESS = ("Make your guess first: move the slider or pick an answer. There is no wrong guess yet; Reveal "
            "answers once you have committed to one.")
# the page's look of the lesson, phone first, and its presenter-mode sizes (``presenter.PRESENTER_CSS``)
CSS = """
.sd-learn-title { margin: 4px 0; font-size: 22px; line-height: 1.25; }
.sd-learn-text, .sd-learn-text p { font-size: 16px; line-height: 1.5; }
.sd-learn-note p { font-size: 14px; color: #333; margin: 2px 0; }
.sd-learn-text-out { font-size: 14px; margin: 4px 0; padding: 4px 10px; border-left: 3px solid #bbb; white-space: pre-wrap; }
.sd-learn-reveal { font-size: 16px; padding: 8px 12px; border-radius: 6px; background: #f4f4f4; }
.sd-learn-reveal p { margin: 3px 0; }
.sd-learn-judged { font-size: 14px; color: #333; }
.sd-learn-hit { border-left: 5px solid #009E73; }
.sd-learn-miss { border-left: 5px solid #D55E00; }
.sd-learn-unsure { border-left: 5px solid #0072B2; }
.sd-learn-wait { border-left: 5px solid #777; }
#learn-page, #learn-page .learn-chapter { min-width: 0; }
@media (max-width: 640px) {
  .sd-learn-title { font-size: 18px; }
  #learn-top-nav { display: none; }
  .learn-guess-row { flex-direction: column; }
  .learn-guess-row > * { width: 100% !important; min-width: 0 !important; }
}
body.sd-presenter .sd-learn-title { font-size: 32px !important; }
body.sd-presenter .sd-learn-text, body.sd-presenter .sd-learn-text p { font-size: 23px !important; }
body.sd-presenter .sd-learn-note p, body.sd-presenter .sd-learn-text-out { font-size: 19px !important; }
body.sd-presenter .sd-learn-reveal { font-size: 22px !important; }
"""
VIEWPORT_JS = "(width) => window.innerWidth"     # the page's width, read in the browser when it loads


def chapter(number: Any) -> Chapter:
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= N:
        raise page_error(f"There is no chapter {repr(number)[:40]}: the chapters are 1 to {N}.")
    return CHAPTERS[number - 1]


def is_narrow(width: Any) -> bool:
    return isinstance(width, (int, float)) and not isinstance(width, bool) and 0 < width < NARROW_PX


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


def run_chapter(pool: Pool, number: int, setting: Any = None, width: Any = None, longer: bool = False) -> tuple:
    """Run (or, ``longer``, the longer run): (note, figure 1, figure 2, memo, answer cleared)."""
    ch = chapter(number)
    ask = Ask(_setting(ch, setting), LONGER if longer and ch.longer else 1, is_narrow(width))
    s = ch.run(pool, ask)
    return (s.note, *_figures(s), s.memo, "")


def run_longer(pool: Pool, number: int, setting: Any = None, width: Any = None) -> tuple:
    """Run longer: the chapter's run at ``LONGER`` times the scale, for when one run could not tell."""
    return run_chapter(pool, number, setting, width, longer=True)


def reveal_chapter(pool: Pool, number: int, guess: Any, memo: Any, setting: Any = None, width: Any = None,
                   touched: bool = True) -> tuple:
    """Reveal: (answer, figure 1, figure 2). Before the chapter's run, or before the learner has moved or picked
    the guess (``touched``), one friendly line instead of an answer."""
    ch = chapter(number)
    skip = (gr.skip(),) * N_PLOTS
    if not isinstance(memo, dict):
        return (rv.message_html(NOT_RUN), *skip)
    if not touched or guess is None or guess == "":
        return (rv.message_html(NO_GUESS), *skip)
    try:
        guess = ch.guess.check(guess)
    except ValueError as e:
        raise page_error(f"Chapter “{ch.title}”: {e}") from None
    ask = Ask(_setting(ch, setting) if ch.setting and ch.setting.at_reveal else None, 1, is_narrow(width))
    try:
        s = ch.reveal(pool, guess, memo, ask)
    except NeedsRun:
        return (rv.message_html(NOT_RUN), *skip)
    except gr.Error:
        raise
    except ValueError as e:       # the run lacks what the answer needs (e.g. a baseline dropped at the time limit)
        raise page_error(f"Chapter “{ch.title}”: {e}; press Run again.") from None
    return (s.answer, *_figures(s))


def committed() -> bool:
    """The guess control's input event: the learner moved or picked it."""
    return True


def open_from_url(request: gr.Request, tab_ids: Sequence[str], width: Any = None) -> tuple:
    """On page load: the tab and chapter the URL names (``?tab=learn&chapter=4``; a bad value is refused with a
    warning naming it and changes nothing), the page's width for the chapters, and the chapter list folded on a
    narrow page."""
    params = dict(getattr(request, "query_params", None) or {})
    req = read_query(params, tab_ids, N)
    for problem in req.problems:
        page_warning(f"Ignored in the link: {problem}.")
    tabs = gr.Tabs(selected=req.tab) if req.tab else gr.skip()
    rest = go_to(req.chapter) if req.chapter else (gr.skip(),) * (2 + N)
    return (tabs, *rest, width, gr.Accordion(open=not is_narrow(width)))


# --- layout ---------------------------------------------------------------------------------------------

@dataclass
class LearnTab:
    chapter_list: gr.Radio
    title: gr.HTML
    blocks: list[gr.Column]
    width: gr.Number
    contents: gr.Accordion

    def wire_url(self, demo: gr.Blocks, tabs: gr.Tabs, tab_ids: Sequence[str]) -> None:
        """Open the tab and chapter a link names when the page loads, and read the page's width."""
        ids = tuple(tab_ids)

        def load(width: Any, request: gr.Request) -> tuple:
            return open_from_url(request, ids, width)
        demo.load(load, [self.width], [tabs, self.chapter_list, self.title, *self.blocks, self.width, self.contents],
                  js=VIEWPORT_JS, show_progress="hidden")


def _guess_control(ch: Chapter) -> Any:
    g = ch.guess
    label = f"your guess: {g.label}"
    if g.choices:
        return gr.Radio(list(g.choices), value=None, label=label, elem_classes=["learn-guess"], min_width=240)
    return gr.Slider(g.minimum, g.maximum, value=g.minimum, step=g.step, label=label, elem_classes=["learn-guess"],
                     min_width=240)


def _setting_control(ch: Chapter) -> gr.Radio:
    return gr.Radio(list(ch.setting.choices), value=ch.setting.value, label=ch.setting.label,
                    elem_classes=["learn-setting"])


def _plot(ch: Chapter) -> gr.Plot:
    return gr.Plot(empty_figure(ch.title, "Press Run: a real run of the bundled model is drawn here."),
                   show_label=False, elem_classes=["learn-plot"])


def _block(pool: Pool, number: int, ch: Chapter, width: gr.Number) -> gr.Column:
    with gr.Column(visible=number == 1, elem_id=f"learn-chapter-{number}", elem_classes=["learn-chapter"]) as col:
        gr.Markdown(ch.text, elem_classes=["learn-text", "sd-learn-text"])
        setting = None
        if ch.setting is not None and not ch.setting.at_reveal:
            setting = _setting_control(ch)
        with gr.Row():
            run = gr.Button(ch.run_label, variant="primary", elem_classes=["learn-run"], min_width=120)
            longer = gr.Button("Run longer", variant="secondary", elem_classes=["learn-longer"], min_width=120,
                               visible=bool(ch.longer))
        if ch.longer:
            gr.Markdown(f"*Run longer*: {ch.longer}, for when one run cannot tell.", elem_classes=["sd-keys-hint"])
        note = gr.HTML("", elem_classes=["learn-note"])
        plots = [_plot(ch)]
        if ch.setting is not None and ch.setting.at_reveal:
            setting = _setting_control(ch)
        with gr.Row(equal_height=True, elem_classes=["learn-guess-row"]):
            guess = _guess_control(ch)
            reveal = gr.Button("Reveal", variant="secondary", elem_classes=["learn-reveal"], scale=0, min_width=140)
        answer = gr.HTML("", elem_classes=["learn-answer"])
        plots += [_plot(ch) for _ in range(N_PLOTS - 1)]     # below the answer: mostly what the reveal draws
        link = chapter_link(number)
        gr.Markdown(f"Link to this chapter: [{link}]({link})", elem_classes=["learn-link"])
        memo = gr.State(None)
        touched = gr.State(False)
        number_in = gr.State(number)
        setting_in = setting if setting is not None else gr.State(None)
    outs = [note, *plots, memo, answer]
    for button, fn in ((run, run_chapter), (longer, run_longer)):
        button.click(gpu_task(bind_pool(fn, pool), duration=RUN_SECONDS), [number_in, setting_in, width], outs,
                     concurrency_limit=4, concurrency_id="learn-run", show_progress="minimal")
    guess.input(committed, None, touched, queue=False, show_progress="hidden")
    reveal.click(gpu_task(bind_pool(reveal_chapter, pool), duration=RUN_SECONDS),
                 [number_in, guess, memo, setting_in, width, touched], [answer, *plots],
                 concurrency_limit=4, concurrency_id="learn-run", show_progress="minimal")
    return col


def _nav(where: str) -> tuple[gr.Button, gr.Button]:
    """Back / Next: the top pair carries the ids (hidden on a phone), the pair below the chapters the classes."""
    top = where == "top"
    prev = gr.Button("← Back", elem_id="learn-prev" if top else None, elem_classes=["learn-prev"], scale=0,
                     min_width=110)
    nxt = gr.Button("Next →", elem_id="learn-next" if top else None, elem_classes=["learn-next"], scale=0,
                    min_width=110)
    return prev, nxt


def build_learn_tab(ctx: AppContext) -> LearnTab:
    """The Learn tab's components and events (call inside ``gr.Tab``)."""
    width = gr.Number(None, visible=False, elem_id="learn-width")  # the page's width (a State would not reach the
    with gr.Column(elem_id="learn-page"):                           # server from the load's script)
        with gr.Row(equal_height=True):
            title = gr.HTML(title_html(1, N, CHAPTERS[0].title), elem_id="learn-title")
            with gr.Row(elem_id="learn-top-nav", scale=0):
                top = _nav("top")
        with gr.Accordion("Chapters", open=True, elem_id="learn-contents") as contents:
            chapter_list = gr.Radio([(f"{i}. {c.title}", i) for i, c in enumerate(CHAPTERS, 1)], value=1,
                                    label="chapters", show_label=False, elem_id="learn-list")
            gr.Markdown("← / → step through the chapters (when the focus is not in a field). Every chapter runs "
                        "the real models on this machine, in seconds.", elem_classes=["sd-keys-hint"])
        blocks = [_block(ctx.pool, i, c, width) for i, c in enumerate(CHAPTERS, 1)]
        with gr.Row():
            bottom = _nav("bottom")
    nav_out = [chapter_list, title, *blocks]
    for prev, nxt in (top, bottom):
        prev.click(functools.partial(go_step, delta=-1), [chapter_list], nav_out, queue=False, show_progress="hidden")
        nxt.click(functools.partial(go_step, delta=1), [chapter_list], nav_out, queue=False, show_progress="hidden")
    chapter_list.input(go_to, [chapter_list], nav_out, queue=False, show_progress="hidden")
    return LearnTab(chapter_list, title, blocks, width, contents)


__all__ = ["CHAPTERS", "N", "CSS", "LearnTab", "build_learn_tab", "go_to", "go_step", "run_chapter", "reveal_chapter",
           "open_from_url", "chapter", "is_narrow", "committed", "run_longer", "NOT_RUN", "NO_GUESS"]
