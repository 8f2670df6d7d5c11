"""``python -m specdec_core.distill``: train the bundled draft from scratch, offline, seeded.

Three stages, each with a progress bar and an ETA on stderr:
 1. data     - the target answers the training prompts; its top-32 log-probs are kept per position,
               and its last hidden states (the feature design's inputs), recorded while it generates
               (cached under --work-dir, keyed by the data settings, so a retrain can skip it);
 2. train    - the draft's layers (initialised from the target's) are distilled towards those labels;
 3. measure  - greedy and temperature-0.7 acceptance on held-out prompts, through the real engine, drafting
               K tokens and with the recommended confidence stop (``--stage measure`` runs it alone).
Writes the weights (safetensors, one file per layer, fp16) and a card (draft_card.json) to --out.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

from .prompts import N_TRAINING_PROMPTS

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
DEFAULT_OUT = {"token": os.path.join(ASSETS, "smollm2_draft"), "feature": os.path.join(ASSETS, "smollm2_feature_draft")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.distill", description=__doc__.split("\n")[0])
    ap.add_argument("--design", choices=["feature", "token"], default="feature",
                    help="feature: one EAGLE-style layer reading the target's last hidden state; "
                         "token: a few decoder layers over tokens only")
    ap.add_argument("--out", default=None, help="folder for the weights and the card (default: the shipped one)")
    ap.add_argument("--work-dir", default=".distill_cache", help="cache for the generated data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=None,
                    help=f"training prompts (default: {2 * N_TRAINING_PROMPTS} feature, {N_TRAINING_PROMPTS} token)")
    ap.add_argument("--prompt-pool", choices=["broad", "narrow"], default=None,
                    help="broad: many templates, topics and whole chat prompts (default, feature design); narrow: "
                         f"the {N_TRAINING_PROMPTS} pairs of the first templates × topics (default, token design)")
    ap.add_argument("--max-new-tokens", type=int, default=80, help="longest training response")
    ap.add_argument("--batch-size", type=int, default=128, help="generation batch")
    ap.add_argument("--layers", default="0,29", help="target layers the draft's layers start from "
                    "(the feature design uses the last one)")
    ap.add_argument("--vocab", type=int, default=16384, help="draft head size (most frequent training tokens)")
    ap.add_argument("--epochs", type=float, default=None, help="passes over the data (default: 5 for both designs)")
    ap.add_argument("--data-dtype", choices=["auto", "bf16", "fp32"], default=None,
                    help="the data stage's precision: bf16 = the target's decoder layers under autocast, its LM head "
                         "(the labels) float32; auto = bf16 where the CPU or GPU has native bf16 arithmetic "
                         "(default: auto feature, fp32 token)")
    ap.add_argument("--train-dtype", choices=["auto", "bf16", "fp32"], default=None,
                    help="the training's compute precision: bf16 = mixed precision (autocast; weights and optimizer "
                         "stay fp32); auto = bf16 where the CPU or GPU has native bf16 arithmetic, else fp32 "
                         "(default: auto feature, fp32 token)")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (default: 2e-3 feature, 5e-4 token)")
    ap.add_argument("--batch-tokens", type=int, default=None,
                    help="padded tokens per training batch (default: 1024 feature, 4096 token)")
    ap.add_argument("--heldout", type=int, default=32, help="held-out prompts for the acceptance measurement")
    ap.add_argument("--eval-tokens", type=int, default=64, help="new tokens per held-out prompt")
    ap.add_argument("--stage", choices=["all", "data", "measure"], default="all",
                    help="'data' stops after stage 1; 'measure' runs stage 3 alone on the draft in --out "
                         "(rewrites only the card's measured figures)")
    args = ap.parse_args(argv)
    feature = args.design == "feature"
    args.out = args.out or DEFAULT_OUT[args.design]
    args.lr = args.lr if args.lr is not None else (2e-3 if feature else 5e-4)
    args.prompts = args.prompts or (2 * N_TRAINING_PROMPTS if feature else N_TRAINING_PROMPTS)
    args.epochs = args.epochs if args.epochs is not None else 5.0
    args.train_dtype = args.train_dtype or ("auto" if feature else "fp32")
    args.data_dtype = args.data_dtype or ("auto" if feature else "fp32")
    args.batch_tokens = args.batch_tokens or (1024 if feature else 4096)
    args.prompt_pool = args.prompt_pool or ("broad" if feature else "narrow")
    return args


def _bar(total: int, desc: str):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


def _data_dtype(args: argparse.Namespace):
    import torch
    from .pipeline import resolve_dtype
    return resolve_dtype(args.data_dtype, torch.device("cpu"))


def _data_key(args: argparse.Namespace) -> tuple[dict, str]:
    key = {"prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
           "seed": args.seed, "pool": args.prompt_pool, "dtype": str(_data_dtype(args)).removeprefix("torch."),
           "version": 3}
    return key, hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def _cache_paths(args: argparse.Namespace) -> tuple[str, str]:
    digest = _data_key(args)[1]
    return os.path.join(args.work_dir, f"data-{digest}.pt"), os.path.join(args.work_dir, f"features-{digest}.pt")


def load_or_generate_data(args: argparse.Namespace, target, tokenizer) -> tuple[list, dict]:
    """The training data (and, cached beside it, the target's features, recorded while generating)."""
    import torch
    from .data import generate_dataset
    from .prompts import training_prompts
    key = _data_key(args)[0]
    path, features_path = _cache_paths(args)
    if os.path.exists(path):
        blob = torch.load(path, weights_only=False)
        return blob["data"], blob["info"]
    prompts = training_prompts(args.prompts, seed=args.seed, broad=args.prompt_pool == "broad")
    t0 = time.time()
    features: list = []
    with _bar(len(prompts) * args.max_new_tokens, "1/3 data (upper bound)") as bar:
        data = generate_dataset(target, tokenizer, prompts, args.max_new_tokens, args.batch_size, args.seed,
                                on_batch=lambda n: bar.update(args.batch_size * args.max_new_tokens),
                                features=features, compute_dtype=getattr(torch, key["dtype"]))
    info = {**key, "response_tokens": sum(len(e.ids) - e.prompt_len for e in data), "examples": len(data),
            "seconds": round(time.time() - t0, 1)}
    os.makedirs(args.work_dir, exist_ok=True)
    torch.save(features, features_path)
    torch.save({"data": data, "info": info}, path)
    return data, info


def load_features(args: argparse.Namespace) -> list:
    """The target's features for every example (feature design only), saved by the data stage."""
    import torch
    return torch.load(_cache_paths(args)[1], weights_only=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    from ..models.loading import load_bundled_model
    t_start = time.time()
    torch.manual_seed(args.seed)
    target, tokenizer = load_bundled_model("cpu")
    if args.stage == "measure":
        from .pipeline import remeasure
        print(json.dumps(remeasure(args, target, tokenizer, bar=_bar)["measured"], indent=1))
        return 0
    data, data_info = load_or_generate_data(args, target, tokenizer)
    print(f"data: {data_info}", file=sys.stderr)
    if args.stage == "data":
        return 0
    features = load_features(args) if args.design == "feature" else None
    from .pipeline import train_and_save
    card = train_and_save(args, target, tokenizer, data, data_info, t_start, bar=_bar, features=features)
    print(json.dumps(card["measured"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
