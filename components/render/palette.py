"""Colours shared by the token stream and the figures: the Okabe-Ito colour-blind-safe palette.

Every token fate also has a non-colour cue (strike-through, dashed or double border) so that the
page still reads on a washed-out projector or in greyscale.
"""
from __future__ import annotations

ACCEPTED = "#009E73"    # bluish green: a draft token the target accepted
REJECTED = "#D55E00"    # vermillion: a draft token the target rejected (or never tested)
RESAMPLED = "#0072B2"   # blue: the replacement drawn from norm(max(0, p - q))
BONUS = "#CC79A7"       # reddish purple: the free token after a clean sweep

TARGET = "#0072B2"      # p, target forwards
DRAFT = "#E69F00"       # q, draft forwards
RESIDUAL = "#CC79A7"    # norm(max(0, p - q))
OTHER = "#999999"       # bookkeeping time
BASELINE = "#56B4E9"    # the target-only baseline
PREFILL = "#444444"
THEORY = "#000000"

FONT = "Inter, 'Helvetica Neue', Arial, sans-serif"
