"""Models: loading the bundled offline SmolLM2 and hub presets (``loading``), the bundled model's
converted cache (``bundled_cache``), the CPU matmul shortcut (``cpu_matmul``), the engine's in-place KV
cache (``kv_cache``), tree attention for a token tree fed in one forward (``tree_attention``), and the
app's model pool with its fair locks and memory budget (``pool``).

May import: the bottom layer (``config``, ``timing``) and torch/transformers. Nothing above it."""
