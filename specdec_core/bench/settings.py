"""The benchmark's settings and their defaults."""
from __future__ import annotations

from dataclasses import dataclass
from .batch import BatchSettings
from .coupling import CouplingSettings
from .heldout import HeldoutSettings
from .tree import TreeSettings


NGRAM_K = 10          # transformers' documented prompt-lookup setting; the same K on both sides


DRAFT_K = 4           # draft tokens per iteration for the model-draft job, both sides


EARLY_EXIT_LAYERS = 8  # the in-process draft: the bundled model's first layers + its norm and head


@dataclass(frozen=True)
class BenchSettings:
    prompts: tuple[str, ...]
    repeats: int
    max_new_tokens: int
    ngram_k: int = NGRAM_K
    draft_k: int = DRAFT_K
    pairs: tuple[str, ...] = ("self", "trained", "feature", "tiny")
    early_exit_layers: int = EARLY_EXIT_LAYERS
    threads: int | None = None
    device: str = "cpu"
    dtype: str = "float32"     # float32 keeps greedy outputs comparable token for token
    compare: bool = True       # the ours-vs-transformers groups
    theory: bool = True        # the cost-model and K-policy sections (bench_theory)
    theory_ks: tuple[int, ...] = tuple(range(1, 9))
    theory_max_new_tokens: int = 64
    theory_repeats: int = 2
    theory_h2h_repeats: int = 5
    theory_drafters: tuple[str, ...] = ("ngram", "self", "trained", "feature")
    heldout: HeldoutSettings | None = HeldoutSettings()   # the shipped drafts on held-out prompts; None = skip
    tree: TreeSettings | None = TreeSettings()            # token trees against chains (bench.tree); None = skip
    coupling: CouplingSettings | None = CouplingSettings()  # coupled vs standard sampling (bench.coupling); None = skip
    batch: BatchSettings | None = BatchSettings()         # batched speculative decoding (bench.batch); None = skip
