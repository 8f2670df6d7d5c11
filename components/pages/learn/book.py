"""What a chapter of the Learn tab is: its text, its guess, and two steps, each a plain function.

- ``run(pool, ask) -> Step``: a small real run; nothing it shows (note, figures, titles) may give the answer
  away, and ``memo`` keeps what the reveal needs (per browser session, in a gr.State). ``ask`` carries the
  chapter's setting, the scale (> 1: the longer run a learner asks for when one run could not tell, in chapters
  with ``longer``) and whether the page is narrow (a phone: figures laid out for it).
- ``measure(pool, memo, ask) -> Measured``: what Reveal adds to the run (a second run, such as the same
  experiment with a bug switched on, or nothing) and the figures that show the answer; made once per Reveal,
  whoever guessed (one learner, or a class).
- ``judge(guess, data) -> Answer``: a pure function of one guess and what was measured: the answer block, the
  verdict (right, wrong, or can't tell from this run) and the truth a class's chart draws (``reveal``).

A guess starts nowhere: a slider sits at its minimum and a choice has none picked, and Reveal waits until the
learner has moved or picked it (the page tracks that).

A figure slot left ``None`` in a Step keeps what it showed.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go

from components.serving.classroom.room import GuessSpec as Guess     # one guess control, a learner's and a class's

N_PLOTS = 2          # every chapter has two figure slots


@dataclass(frozen=True)
class Setting:
    """A choice the run (or, ``at_reveal``, only the reveal) takes: (label, value) pairs. One the reveal takes
    is placed next to the guess."""
    label: str
    choices: tuple[tuple[str, Any], ...]
    value: Any
    at_reveal: bool = False

    def check(self, value: Any) -> Any:
        """The setting as given, if it is one of the choices; else ValueError."""
        if value not in [v for _, v in self.choices]:
            raise ValueError(f"{self.label} must be one of the choices offered, got {str(value)[:40]!r}")
        return value


@dataclass(frozen=True)
class Ask:
    """What a chapter's run or reveal is asked for: the setting's value (None without one), the scale of the
    run (1, or ``runs.LONGER`` for a longer one) and whether the page is narrow (a phone)."""
    setting: Any = None
    scale: int = 1
    narrow: bool = False


@dataclass
class Step:
    figures: list[go.Figure | None] = field(default_factory=lambda: [None] * N_PLOTS)
    note: str = ""                # HTML, escaped by whoever built it
    answer: str = ""              # HTML (``reveal.answer_html``)
    memo: dict | None = None


@dataclass
class Measured:
    """What a Reveal measured: the figures that show the answer (``None`` keeps a slot) and the data ``judge``
    reads."""
    figures: list[go.Figure | None]
    data: Any


@dataclass(frozen=True)
class Chapter:
    slug: str
    title: str
    text: str                     # markdown, at most ~150 words
    guess: Guess
    run: Callable[..., Step]
    measure: Callable[..., Measured]
    judge: Callable[[Any, Any], Any]      # (guess, Measured.data) -> reveal.Answer
    setting: Setting | None = None
    run_label: str = "Run"
    longer: str = ""              # what "Run longer" does, for a chapter whose answer one run may not settle


def words(text: str) -> int:
    return len(text.split())


__all__ = ["N_PLOTS", "Ask", "Guess", "Setting", "Step", "Measured", "Chapter", "words"]
