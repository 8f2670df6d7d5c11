"""What a class's room is given, made once per room from the Learn chapters: the presenter's run as every page
draws it (``shown_run``: the figures as Plotly JSON, the note, the setting in words), and a Reveal's results
(``reveal_for_class``: the chapter's ``measure`` made once, every guess judged from it by the chapter's pure
``judge``, the class's histogram, the summary every page shows and each student's own answer block).

Guesses are checked against the chapter's guess control here (``check_guess``), before the store keeps them.
Nothing here touches the store: the presenter's handlers (``lead``) take what these return to it.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import gradio as gr
import plotly.graph_objects as go
import plotly.io as pio

from components.pages.learn import reveal as rv
from components.pages.learn.book import N_PLOTS, Ask, Chapter, Guess
from components.pages.learn.runs import NeedsRun
from components.pages.learn.tab import CHAPTERS, N
from components.render.base import empty_figure
from components.render.classroom import class_histogram, summary_html
from components.serving.classroom import Revealed, RevealJob, RoomError, Shown
from components.serving.pairs import Pool

WAIT_FIGURE = "Your presenter runs this chapter: the run is drawn here."
REVEAL_FIGURE = "Drawn when your presenter reveals the answer."


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


def shown_run(number: int, note: str, figures: Sequence[Any], setting: Any) -> Shown:
    """The presenter's run of chapter ``number`` as the class sees it: the run's note (escaped by the chapter), its
    figures (a slot the run left as it was gets the waiting figure) and the setting in words."""
    ch = class_chapter(number)
    made = [figure_json(f) for f in list(figures)[:N_PLOTS]]
    made += [None] * (N_PLOTS - len(made))
    made = [m if m is not None else placeholder_json(ch.title, REVEAL_FIGURE) for m in made]
    return Shown(note if isinstance(note, str) else "", tuple(made), setting_words(ch, setting))


def check_guess(guess: Guess, value: Any) -> Any:
    """A student's guess as the store keeps it: one of the choices, or a number (not text) on the slider (a whole
    number when the slider counts in whole steps); ValueError in words otherwise."""
    if guess.choices:
        if not isinstance(value, str):
            raise ValueError(f"pick one of the answers: {', '.join(guess.choices)}")
        return guess.check(value)
    value = guess.check(value)          # a slider sends a number: text, even "4", is not one
    if float(guess.step).is_integer() and float(guess.minimum).is_integer() and float(value).is_integer():
        return int(value)
    return float(value)


def any_guess(guess: Guess) -> Any:
    """A valid guess, for the parts of an answer that do not depend on it (the summary when nobody guessed)."""
    return guess.choices[0] if guess.choices else guess.minimum


def _slider(guess: Guess) -> tuple[float, float, float]:
    return float(guess.minimum), float(guess.maximum), float(guess.step)


def reveal_for_class(pool: Pool, job: RevealJob) -> Revealed:
    """The Reveal of the room's run, for the whole class: the chapter's measurement once, each distinct guess judged
    once, the histogram, the summary and every student's answer block. RoomError in words when the run lacks what
    the answer needs."""
    ch = class_chapter(job.chapter)
    ask = Ask(job.setting if ch.setting is not None and ch.setting.at_reveal else None, 1, False)
    try:
        measured = ch.measure(pool, job.memo, ask)
        judged = judge_all(ch, measured.data, job.guesses)
    except NeedsRun:
        raise RoomError("Run this chapter first: the class's answer comes from your run.") from None
    except gr.Error as e:
        raise RoomError(str(e.message) if hasattr(e, "message") else str(e)) from None
    except ValueError as e:
        raise RoomError(f"Chapter “{ch.title}”: {e}; press Run again.") from None
    answers, verdicts, head = judged
    right = sum(v == rv.RIGHT for v in verdicts.values())
    truth = head.truth
    lo, hi, step = _slider(ch.guess)
    fig = class_histogram(truth, [(job.guesses[s], verdicts[s]) for s in job.guesses], ch.guess.choices, lo, hi, step)
    summary = summary_html(head.measured, head.judged, head.why, head.extra, len(job.guesses), right)
    figures = tuple(figure_json(f) for f in measured.figures)
    return Revealed(figures, pio.to_json(fig, validate=False), summary, answers, right, len(job.guesses))


def judge_all(ch: Chapter, data: Any, guesses: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str | None],
                                                                             rv.Answer]:
    """Every guess judged by the chapter (each distinct value once): (student → answer HTML, student → verdict, the
    answer the summary reads: any guess's, since its measurement and why do not depend on the guess)."""
    by_value: dict[Any, rv.Answer] = {}
    answers: dict[str, str] = {}
    verdicts: dict[str, str | None] = {}
    for student, value in guesses.items():
        key = (type(value).__name__, value)
        if key not in by_value:
            by_value[key] = ch.judge(value, data)
        answers[student], verdicts[student] = by_value[key].html, by_value[key].verdict
    head = next(iter(by_value.values()), None) or ch.judge(any_guess(ch.guess), data)
    return answers, verdicts, head


__all__ = ["class_chapter", "figure_json", "placeholder_json", "setting_words", "shown_run", "check_guess",
           "any_guess", "reveal_for_class", "judge_all", "WAIT_FIGURE", "REVEAL_FIGURE"]
