"""What a class's room is given, made once per room from the Learn chapters: the chapter's question as a student's
page asks it (``question_of``: title, text, the guess control, which the store checks guesses against), the
presenter's run as every page draws it (``shown_run``: the figures as Plotly JSON, the note, the setting in words,
the run's tokens coloured by fate), and a Reveal's results (``reveal_for_class``: the chapter's ``measure`` made once,
each distinct guess judged from it by the chapter's pure ``judge``, the class's histogram, the summary every page
shows, the verdict on each guess value, and the record the presenter keeps).

Nothing here touches the store: the presenter's handlers (``lead``) take what these return to it.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import gradio as gr
import plotly.graph_objects as go
import plotly.io as pio

from specdec_core import Trace

from components.pages.learn import reveal as rv
from components.pages.learn.book import N_PLOTS, Ask, Chapter, Guess
from components.pages.learn.runs import NeedsRun
from components.pages.learn.tab import CHAPTERS, N
from components.render.base import empty_figure
from components.render.classroom import class_histogram, summary_html, text_html
from components.render.tokens import tokens_html
from components.serving.classroom import (ChapterResult, Question, Revealed, RevealJob, RoomError, Shown,
                                          Truth)
from components.serving.classroom.room import NO_RUN, median_of
from components.serving.pairs import Pool

REVEAL_FIGURE = "Drawn when your presenter reveals the answer."
# chapters whose question the run's tokens coloured by fate would answer (how many drafts were kept; α of a draft):
# their students see the tokens from the Reveal on
TOKENS_AT_REVEAL = frozenset({"anatomy", "sampling"})


def class_chapter(number: Any) -> Chapter:
    """Chapter ``number`` of the lesson, or RoomError (a room's chapter is always one; a forged call may not be)."""
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= N:
        raise RoomError(f"There is no chapter {str(number)[:20]!r}: the chapters are 1 to {N}.")
    return CHAPTERS[number - 1]


def figure_json(fig: Any) -> str | None:
    """A figure as Plotly JSON text (made once; every page is sent the same text), or None for a kept slot."""
    return pio.to_json(fig, validate=False) if isinstance(fig, go.Figure) else None


@functools.lru_cache(maxsize=64)
def placeholder_json(title: str, message: str) -> str:
    """The "nothing yet" figure of a slot, as JSON (cached: the same text for every page)."""
    return pio.to_json(empty_figure(title, message), validate=False)


def setting_words(ch: Chapter, value: Any) -> str:
    """The chapter's setting in words ("the bug to switch on: drop the bonus token"), "" without one."""
    if ch.setting is None:
        return ""
    label = next((name for name, v in ch.setting.choices if v == value), None)
    return f"{ch.setting.label}: {label}" if label is not None else ""


@functools.lru_cache(maxsize=None)
def question_of(number: int) -> Question:
    """Chapter ``number`` as a student's page asks it (made once per chapter)."""
    ch = class_chapter(number)
    return Question(number, N, ch.title, text_html(ch.text), ch.guess)


def run_trace(memo: Any) -> Trace | None:
    """The speculative run a chapter's memo holds (a chain's, a tree's, the first of a pair), or None."""
    if not isinstance(memo, dict):
        return None
    for key in ("trace", "tree", "standard"):
        found = memo.get(key)
        found = found[0] if isinstance(found, tuple) and found else found
        if isinstance(found, Trace):
            return found
    return None


def shown_run(number: int, note: str, figures: Sequence[Any], setting: Any, memo: Any = None) -> Shown:
    """The presenter's run of chapter ``number`` as the class sees it: the run's note (escaped by the chapter), its
    figures (a slot the run left as it was gets the waiting figure), the setting in words and the run's tokens."""
    ch = class_chapter(number)
    made = [figure_json(f) for f in list(figures)[:N_PLOTS]]
    made += [None] * (N_PLOTS - len(made))
    made = [m if m is not None else placeholder_json(ch.title, REVEAL_FIGURE) for m in made]
    trace = run_trace(memo)
    return Shown(note if isinstance(note, str) else "", tuple(made), setting_words(ch, setting),
                 tokens_html(trace) if trace is not None else "", ch.slug in TOKENS_AT_REVEAL)


def any_guess(guess: Guess) -> Any:
    """A valid guess, for the parts of an answer that do not depend on it (the summary when nobody guessed)."""
    return guess.choices[0] if guess.choices else guess.minimum


def _slider(guess: Guess) -> tuple[float, float, float]:
    return float(guess.minimum), float(guess.maximum), float(guess.step)


def reveal_for_class(pool: Pool, job: RevealJob) -> tuple[Revealed, ChapterResult]:
    """The Reveal of the room's run, for the whole class: the chapter's measurement once, each distinct guess judged
    once, the histogram, the summary, the class's median, and the record the presenter keeps. RoomError in words
    when the run lacks what the answer needs."""
    ch = class_chapter(job.chapter)
    ask = Ask(job.setting if ch.setting is not None and ch.setting.at_reveal else None, 1, False)
    try:
        measured = ch.measure(pool, job.memo, ask)
        verdicts, head = judge_all(ch, measured.data, job.guesses.values())
    except NeedsRun:
        raise RoomError(NO_RUN) from None
    except gr.Error as e:
        raise RoomError(str(e.message) if hasattr(e, "message") else str(e)) from None
    except ValueError as e:
        raise RoomError(f"Chapter “{ch.title}”: {e}; press Run again.") from None
    judged = sorted(((g, verdicts[_key(g)]) for g in job.guesses.values()), key=lambda gv: _key(gv[0]))
    right = sum(v == rv.RIGHT for _, v in judged)
    t = head.truth
    truth = Truth(t.value, t.low, t.high, tuple(t.right), t.label)
    lo, hi, step = _slider(ch.guess)
    fig = class_histogram(t, judged, ch.guess.choices, lo, hi, step)
    summary = summary_html(head.measured, head.judged, head.why, head.extra, len(judged), right)
    figures = tuple(figure_json(f) for f in measured.figures)
    by_value = tuple(sorted({(g, v) for g, v in judged}, key=lambda gv: _key(gv[0])))
    revealed = Revealed(figures, pio.to_json(fig, validate=False), summary, truth, by_value,
                        median_of([g for g, _ in judged], ch.guess.choices), right, len(judged))
    result = ChapterResult(job.chapter, ch.title, job.run_no, time.time(), head.measured, t.value, t.low, t.high,
                           tuple(t.right), tuple(judged), right, len(judged))
    return revealed, result


def _key(value: Any) -> tuple[str, Any]:
    return type(value).__name__, value


def judge_all(ch: Chapter, data: Any, guesses: Any) -> tuple[dict[tuple[str, Any], str | None], rv.Answer]:
    """Every distinct guess judged once by the chapter: ((type, value) → verdict, the answer the summary reads: any
    guess's, since its measurement and why do not depend on the guess)."""
    by_value: dict[tuple[str, Any], rv.Answer] = {}
    for value in guesses:
        if _key(value) not in by_value:
            by_value[_key(value)] = ch.judge(value, data)
    head = next(iter(by_value.values()), None) or ch.judge(any_guess(ch.guess), data)
    return {k: a.verdict for k, a in by_value.items()}, head


__all__ = ["class_chapter", "figure_json", "placeholder_json", "setting_words", "shown_run", "question_of",
           "run_trace", "any_guess", "reveal_for_class", "judge_all", "REVEAL_FIGURE",
           "TOKENS_AT_REVEAL"]
