"""Decoding: the speculative loop (``engine``), the pure verification step (``verify``; for a
token tree ``tree_verify``, and a tree iteration's steps ``tree_step``), the target
with its KV cache (``target``), the target-only baseline (``baseline``), the proposal guard
(``proposal_check``), and lockstep stepping of several runs (``lockstep``).

May import: the bottom layer, ``models``, ``drafters`` and ``policy``."""
