"""``python -m specdec_core.bench``: the command line (see ``runner`` for what each section measures)."""
from __future__ import annotations

import argparse
import sys

from .batch import BatchSettings
from .coupling import CouplingSettings
from .heldout import HeldoutSettings, render_heldout
from .prompts import PROMPTS, QUICK_PROMPTS
from .report import render_report, write_json
from .runner import run_benchmark, validate_settings
from .settings import BenchSettings, DRAFT_K, EARLY_EXIT_LAYERS, NGRAM_K
from .tree import TreeSettings


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench",
                                 description="Interleaved, output-checked benchmark of this engine against "
                                             "transformers' prompt lookup and assisted generation.")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 prompts, 32 new tokens, 2 rounds")
    ap.add_argument("--json", metavar="PATH", default="bench-results/bench.json",
                    help="where to write the JSON results (default: bench-results/bench.json)")
    ap.add_argument("--repeats", type=int, default=None, help="measured rounds per prompt (default 3; quick 2)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 96; quick 32")
    ap.add_argument("--prompts", default=None,
                    help=f"comma-separated subset of: {', '.join(p.name for p in PROMPTS)}")
    ap.add_argument("--pairs", default=",".join(BenchSettings.pairs),
                    help="model-draft pairs, comma-separated ('' for none): self (the bundled model drafting for "
                         "itself), trained / feature (the shipped token-only and feature-reading drafts), "
                         "tiny (random-weight 12-layer target, 2-layer early-exit draft), early-exit "
                         "(the bundled model's first --early-exit-layers layers; off by default: its acceptance "
                         "is only a few percent)")
    ap.add_argument("--ngram-k", type=int, default=NGRAM_K)
    ap.add_argument("--draft-k", type=int, default=DRAFT_K)
    ap.add_argument("--early-exit-layers", type=int, default=EARLY_EXIT_LAYERS)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda or mps")
    ap.add_argument("--dtype", default="float32",
                    help="float32 (default; greedy outputs then match token for token), bfloat16 or float16 "
                         "(batched and 1-token forwards may then differ in the last bits: ratios get refused)")
    ap.add_argument("--only", choices=("compare", "theory", "heldout", "tree", "coupling", "batch"), default=None,
                    help="run only the ours-vs-transformers groups, only the cost-model / K-policy sections, only "
                         "the shipped drafts' speed on held-out prompts, only token trees against chains or only "
                         "coupled against standard sampling, or only batched speculation at batch sizes 1 … 16")
    ap.add_argument("--theory-k-max", type=int, default=None, help="K sweep 1..K_max (default 8; quick 4)")
    ap.add_argument("--theory-max-new-tokens", type=int, default=None, help="default 64 (as recommended_config()); quick 24")
    ap.add_argument("--theory-repeats", type=int, default=None, help="measured rounds (default 2; quick 1)")
    ap.add_argument("--theory-h2h-repeats", type=int, default=None,
                    help="paired head-to-head rounds of the best fixed K, cost-aware K and the heuristic after the "
                         "sweep (default 5; quick 1; 0: ratios from the sweep)")
    ap.add_argument("--theory-drafters", default=None,
                    help="comma-separated drafters of the theory sections (default: all in bench_theory.DRAFTERS)")
    ap.add_argument("--heldout-prompts", type=int, default=None, help="held-out prompts (default 10; quick 2)")
    ap.add_argument("--heldout-seed", type=int, default=HeldoutSettings.seed, help="which held-out prompts")
    ap.add_argument("--tree-prompts", type=int, default=None, help="held-out prompts of the tree section "
                    "(default 4; quick 1)")
    ap.add_argument("--tree-drafts", default=None,
                    help="comma-separated drafts of the tree section: feature, trained, ngram (default feature,trained)")
    ap.add_argument("--tree-nodes", type=int, default=TreeSettings.nodes, help="the trees' most nodes (default 16)")
    ap.add_argument("--tree-top-k", type=int, default=TreeSettings.top_k,
                    help="the trees' most children per node (default 4)")
    ap.add_argument("--coupling-prompts", type=int, default=None, help="held-out prompts of the coupling section "
                    "(default 4; quick 2)")
    ap.add_argument("--batch-sizes", default=None, help="comma-separated batch sizes of the batch section "
                    "(default 1,2,4,8,16; quick 1,4)")
    ap.add_argument("--batch-drafts", default=None,
                    help="comma-separated drafts of the batch section: ngram, feature, trained (default ngram,feature)")
    ap.add_argument("--batch-rounds", type=int, default=None, help="rounds per batch size (default 4; quick 2)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one n-gram run of each side with torch.profiler and print the top ops")
    return ap


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    prompts = tuple(p.strip() for p in args.prompts.split(",") if p.strip()) if args.prompts else (
        QUICK_PROMPTS if args.quick else tuple(p.name for p in PROMPTS))
    s = BenchSettings(
        prompts=prompts, repeats=args.repeats if args.repeats is not None else (2 if args.quick else 3),
        max_new_tokens=args.max_new_tokens if args.max_new_tokens is not None else (32 if args.quick else 96),
        ngram_k=args.ngram_k, draft_k=args.draft_k, pairs=tuple(p.strip() for p in args.pairs.split(",") if p.strip()),
        early_exit_layers=args.early_exit_layers, threads=args.threads, device=args.device, dtype=args.dtype,
        compare=args.only in (None, "compare"), theory=args.only in (None, "theory"),
        heldout=_heldout_settings(args) if args.only in (None, "heldout") else None,
        tree=_tree_settings(args) if args.only in (None, "tree") else None,
        coupling=_coupling_settings(args) if args.only in (None, "coupling") else None,
        batch=_batch_settings(args) if args.only in (None, "batch") else None,
        theory_ks=tuple(range(1, (args.theory_k_max or (4 if args.quick else 8)) + 1)),
        theory_max_new_tokens=args.theory_max_new_tokens or (24 if args.quick else 64),
        theory_repeats=args.theory_repeats if args.theory_repeats is not None else (1 if args.quick else 2),
        theory_h2h_repeats=args.theory_h2h_repeats if args.theory_h2h_repeats is not None else (1 if args.quick else 5),
        theory_drafters=tuple(d.strip() for d in args.theory_drafters.split(",") if d.strip())
        if args.theory_drafters else _all_drafters())
    validate_settings(s)
    return s


def _heldout_settings(args: argparse.Namespace) -> HeldoutSettings:
    quick = HeldoutSettings(prompts=2, max_new_tokens=24, repeats=1) if args.quick else HeldoutSettings()
    prompts = args.heldout_prompts if args.heldout_prompts is not None else quick.prompts
    return HeldoutSettings(prompts=prompts, seed=args.heldout_seed, max_new_tokens=quick.max_new_tokens,
                           repeats=quick.repeats)


def _tree_settings(args: argparse.Namespace) -> TreeSettings:
    base = TreeSettings(prompts=1, max_new_tokens=24, repeats=1) if args.quick else TreeSettings()
    drafts = tuple(d.strip() for d in args.tree_drafts.split(",") if d.strip()) if args.tree_drafts else base.drafts
    return TreeSettings(prompts=args.tree_prompts if args.tree_prompts is not None else base.prompts,
                        seed=args.heldout_seed, max_new_tokens=base.max_new_tokens, repeats=base.repeats,
                        drafts=drafts, nodes=args.tree_nodes, top_k=args.tree_top_k)


def _coupling_settings(args: argparse.Namespace) -> CouplingSettings:
    base = CouplingSettings(prompts=2, max_new_tokens=24, repeats=1) if args.quick else CouplingSettings()
    return CouplingSettings(prompts=args.coupling_prompts if args.coupling_prompts is not None else base.prompts,
                            seed=args.heldout_seed, max_new_tokens=base.max_new_tokens, repeats=base.repeats)


def _batch_settings(args: argparse.Namespace) -> BatchSettings:
    base = BatchSettings(sizes=(1, 4), max_new_tokens=16, repeats=2) if args.quick else BatchSettings()
    try:
        sizes = tuple(int(b) for b in args.batch_sizes.split(",")) if args.batch_sizes else base.sizes
    except ValueError:
        raise ValueError(f"--batch-sizes must be whole numbers separated by commas, got {args.batch_sizes!r}") from None
    drafts = tuple(d.strip() for d in args.batch_drafts.split(",") if d.strip()) if args.batch_drafts else base.drafts
    return BatchSettings(sizes=sizes, drafts=drafts, max_new_tokens=base.max_new_tokens,
                         repeats=args.batch_rounds if args.batch_rounds is not None else base.repeats)


def _all_drafters() -> tuple[str, ...]:
    from .theory import DRAFTERS
    return tuple(name for name, _ in DRAFTERS)


def main(argv: list[str] | None = None) -> int:
    from transformers.utils import logging as hf_logging
    args = build_parser().parse_args(argv)
    try:
        s = settings_from_args(args)
        hf_logging.set_verbosity_error()
        report = run_benchmark(s, log=lambda msg: print(msg, file=sys.stderr, flush=True), profile=args.profile)
        text = render_report(report)
        if report.get("theory"):
            from .theory import render_theory
            text += "\n\n" + render_theory(report["theory"])
        if report.get("heldout"):
            text += "\n\n" + render_heldout(report["heldout"])
        if report.get("tree"):
            from .tree import render_tree
            text += "\n\n" + render_tree(report["tree"])
        if report.get("coupling"):
            from .coupling import render_coupling
            text += "\n\n" + render_coupling(report["coupling"])
        if report.get("batch"):
            from .batch import render_batch
            text += "\n\n" + render_batch(report["batch"])
        report["markdown"] = text
        write_json(report, args.json)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    print(f"\nJSON written to {args.json}", file=sys.stderr)
    return 0

