"""Decoding: the speculative loop (``engine``), the pure verification step (``verify``), the target
with its KV cache (``target``), the target-only baseline (``baseline``), the proposal guard
(``proposal_check``), and lockstep stepping of several runs (``lockstep``).

May import: the bottom layer, ``models``, ``drafters`` and ``policy``."""
