"""What a chapter of the Learn tab is: its text, its guess, and two steps, each a plain function.

- ``run(pool, setting) -> Step``: a small real run; the figures it draws must not give the answer away,
  and ``memo`` keeps what the reveal needs (per browser session, in a gr.State).
- ``reveal(pool, guess, memo, setting) -> Step``: the answer computed from that run (or from a second run
  the reveal makes, such as the same experiment with a bug switched on), and the figures that show it.

A figure slot left ``None`` in a Step keeps what it showed.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go

N_PLOTS = 2          # every chapter has two figure slots


@dataclass(frozen=True)
class Guess:
    """The learner's commitment: a slider (``minimum``..``maximum`` by ``step``) or a choice (``choices``)."""
    label: str
    value: Any
    minimum: float = 0.0
    maximum: float = 1.0
    step: float = 1.0
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> Any:
        """The guess as given, if it is one of the choices or a number on the slider; else ValueError."""
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"the guess must be one of {', '.join(self.choices)}, got {str(value)[:40]!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not self.minimum <= value <= self.maximum:
            raise ValueError(f"the guess must be a number from {self.minimum:g} to {self.maximum:g}, "
                             f"got {str(value)[:40]!r}")
        return value


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


@dataclass
class Step:
    figures: list[go.Figure | None] = field(default_factory=lambda: [None] * N_PLOTS)
    note: str = ""                # HTML, escaped by whoever built it
    answer: str = ""              # HTML (``reveal.answer_html``)
    memo: dict | None = None


@dataclass(frozen=True)
class Chapter:
    slug: str
    title: str
    text: str                     # markdown, at most ~150 words
    guess: Guess
    run: Callable[..., Step]
    reveal: Callable[..., Step]
    setting: Setting | None = None
    run_label: str = "Run"


def words(text: str) -> int:
    return len(text.split())


__all__ = ["N_PLOTS", "Guess", "Setting", "Step", "Chapter", "words"]
