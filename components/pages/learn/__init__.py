"""The Learn tab: a guided lesson through speculative decoding, in chapters that build on each other, each
with a small real run of the bundled model and a predict-then-reveal.

- ``book``: what a chapter is (text, guess, run, reveal);
- ``basics`` (chapters 1–5, the mechanism), ``coupling`` (6: same seed, same text?) and ``practice`` (7–13, when
  and how to use it; token trees in ``trees``, a busy server in ``busy``): the chapters;
- ``runs``: the engine runs they make, through the app's own paths (limits, locks);
- ``reveal``: the answers, pure functions of the guess and the run (the busy server's in ``busy``);
- ``nav``: chapter steps, titles and links (``?tab=learn&chapter=N``);
- ``tab``: the page and its handlers.
"""
from components.pages.learn.tab import CHAPTERS, CSS, LearnTab, build_learn_tab

__all__ = ["CHAPTERS", "CSS", "LearnTab", "build_learn_tab"]
