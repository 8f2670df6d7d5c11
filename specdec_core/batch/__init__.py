"""Batched speculative decoding: B sequences at once, as a serving engine runs them.

Each iteration makes ONE draft pass (a batched forward per draft step; prompt lookup: every row's lookup) and
ONE target forward that verifies every row's drafts; each row is then accepted or rejected with its own random
stream, keeps its own number of tokens (ragged), and has its caches cut to its own prefix
(``models.ragged_cache``). Rows that finish leave the batch. The batched target-only baseline runs through the
same forwards, warping and clocks, so every speedup is measured side by side.

- ``target``: the target over the batch (one ragged cache; the features a feature-reading draft reads);
- ``drafters``: prompt lookup, any causal LM (the token-only draft) and the feature-reading draft, batched;
- ``engine``: the loop (a numbered outline) and ``batch_generate``; ``baseline``: the batched target-only run;
- ``prices``: what one iteration costs at batch size B (the verify over B × (K + 1) tokens, a draft step over B
  rows, the host time per row), measured once per process, for the K policy and the (B, K) what-if.
Token trees stay single-row (``decoding``).
"""
