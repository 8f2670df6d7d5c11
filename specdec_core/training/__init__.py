"""Training: rebuilding the shipped drafts (``python -m specdec_core.distill``). Prompts, the target's
answers and features (``prompts``, ``data``, ``features``), the two distillation recipes (``train``,
``train_feature``), the end-to-end build (``pipeline``) and the recipe search (``recipe_search``).

May import: everything below it. Nothing runs at import time."""
