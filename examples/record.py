"""Record the example traces shipped for the Replay tab, from the bundled model (offline).

    python examples/record.py [--threads N] [--out DIR]

Each example is a real run through the same pair set-up as the Live tab (``components.serving.pairs``), with a
same-run target-only baseline, saved as "specdec-trace/1" JSON. Token ids are deterministic for a given
seed; the timings are whatever this machine measures.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.serving.pairs import (EXTRACTIVE_PROMPTS, OPEN_PROMPTS, PAIR_FEATURE, PAIR_NGRAM, PAIR_SELF,  # noqa: E402
                              PAIR_TRAINED, resolve_pair)
from specdec_core import (ModelPool, SpecConfig, Trace, baseline_generate, encode_prompt,  # noqa: E402
                          speculative_generate, warm_up)


@dataclass(frozen=True)
class Recipe:
    file: str
    title: str
    pair: str
    prompt: str
    cfg: SpecConfig


RECIPES = (
    Recipe("ngram_extractive.json", "n-gram drafter on an extractive prompt (greedy, K=4)", PAIR_NGRAM,
           EXTRACTIVE_PROMPTS[1], SpecConfig(k=4, temperature=0.0, max_new_tokens=64, seed=0)),
    Recipe("self_draft.json", "the same model as its own draft: every draft accepted, no speedup (greedy, K=4)",
           PAIR_SELF, OPEN_PROMPTS[0], SpecConfig(k=4, temperature=0.0, max_new_tokens=40, seed=0)),
    Recipe("sampling_t08.json", "n-gram drafter while sampling at temperature 0.8: many rejections (top-p 0.95, K=6)",
           PAIR_NGRAM, EXTRACTIVE_PROMPTS[1], SpecConfig(k=6, temperature=0.8, top_p=0.95, max_new_tokens=64, seed=1)),
    Recipe("trained_draft_t07.json", "the trained token-only draft while sampling at temperature 0.7: real p ≠ q, "
           "rejections and residual samples (K=4)", PAIR_TRAINED, OPEN_PROMPTS[0],
           SpecConfig(k=4, temperature=0.7, max_new_tokens=64, seed=0)),
    Recipe("feature_draft_t07.json", "the trained feature-reading draft while sampling at temperature 0.7: real p ≠ q, "
           "rejections and residual samples (K=4)", PAIR_FEATURE, OPEN_PROMPTS[0],
           SpecConfig(k=4, temperature=0.7, max_new_tokens=64, seed=0)),
    Recipe("token_tree_t07.json", "token trees: the trained feature-reading draft drafts a tree of 8 nodes (depth ≤ 4, "
           "≤ 3 children per node) per iteration, all verified in one target forward (temperature 0.7)",
           PAIR_FEATURE, OPEN_PROMPTS[0],
           SpecConfig(k=4, temperature=0.7, max_new_tokens=48, seed=0, tree_nodes=8, tree_top_k=3)),
)


def record(recipe: Recipe, pool: ModelPool, threads: int | None) -> Trace:
    pair = resolve_pair(pool, recipe.pair)
    tok = pair.target.tokenizer
    ids = encode_prompt(tok, recipe.prompt, chat=True)
    meta = {**pair.meta, "title": recipe.title}
    if threads:
        meta["torch_threads"] = threads
    trace = speculative_generate(pair.target.model, pair.drafter(), ids, recipe.cfg, tok, prompt=recipe.prompt,
                                 meta=meta)
    trace.baseline = baseline_generate(pair.target.model, ids, recipe.cfg, tok)
    return Trace.from_dict(json.loads(json.dumps(trace.to_dict())))   # what Replay will read, validated


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--only", nargs="*", default=None, help="record only these example files")
    args = ap.parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    pool = ModelPool(allow_local=False)
    warm_up(pool.get("bundled").model)
    for recipe in RECIPES:
        if args.only is not None and recipe.file not in args.only:
            continue
        trace = record(recipe, pool, args.threads)
        path = args.out / recipe.file
        path.write_text(json.dumps(trace.to_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        st = trace.stats
        print(f"{path.name}: {st.new_tokens} tokens, {st.iterations} iterations, acceptance {st.acceptance_rate:.2f}, "
              f"{st.tokens_per_s:.1f} tok/s vs baseline {trace.baseline.tokens_per_s:.1f} tok/s")


if __name__ == "__main__":
    main()
