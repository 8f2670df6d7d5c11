"""How sure a figure is: 95 % intervals and verdicts on measured figures (``intervals``), and the power of the
chi-square exactness tests — the sample that detects a planted bug (``power``)."""
