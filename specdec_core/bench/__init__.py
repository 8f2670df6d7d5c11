"""Benchmark: ``python -m specdec_core.bench``. The suite and its command line (``runner``, ``settings``),
timed side-by-side runs and their statistics (``measure``), the prompts (``prompts``), in-process
drafts and transformers' peers (``models``, ``mtp_peer``), the cost-model and K-policy sections
(``theory``, ``replay``), the held-out prompts (``heldout``), token trees against chains (``tree``), and the report (``report``).

May import: everything below it. Nothing in the engine, the app or the tests' fast path imports it."""
