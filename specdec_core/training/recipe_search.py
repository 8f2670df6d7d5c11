"""``python -m specdec_core.training.recipe_search``: which feature-draft recipe buys the most acceptance.

How the recipe of ``python -m specdec_core.distill`` was chosen. One data stage, then many trainings of
the feature draft on subsets of that data, each in its own process (they share one GPU well: each is
small), all scored on the same held-out answers:

 1. data - the target answers the training prompts (only the parts the chosen variants use, ``PARTS``):
           A = the narrow pool (``prompts.training_prompts(..., broad=False)``), greedy and sampled batches
           alternating as the distill command does, up to 160 tokens; B = the same prompts, every answer
           sampled (T 0.8, top-p 0.95, top-k 256); N = the narrow pool as the
           distill command answers it (up to 80 tokens); W = twice as many prompts of the broad pool, alternating, up to 80 tokens. The target's
           features by one teacher-forced pass. Held-out greedy answers (64 tokens) to two sets: template
           pairs (``HELDOUT_TEMPLATES`` × ``HELDOUT_TOPICS``: templates and topics never trained on) and
           ``FREEFORM_HELDOUT`` (whole chat prompts written apart from every training list).
 2. each variant (``VARIANTS``: which answers, how many prompts, answers cut to their first N tokens,
    epochs, learning rate, the loss weights, the draft vocabulary, tokens per batch) trains a fresh
    draft and writes its step-1 / step-2 agreement curve on the template pairs
    (``train_feature.feature_agreement``) and its final agreement on each held-out set as JSON.

Made for a GPU (``--device cuda``: the data stage then takes a few minutes, each variant 2–6 minutes when
several run at once); on this project's 2-core CPU the same work would take days. Nothing here is used by
the product; the training command's defaults cite what it measured (docs/trained-drafts.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Variant:
    """One training of the feature draft: which answers (``PARTS``), how many prompts, answers cut to their first
    N tokens (0: whole), epochs, and what ``train_feature.distill_features`` gets beyond its data."""
    answers: str
    prompts: int
    cut: int
    epochs: float
    lr: float = 2e-3
    feat_weight: float = 1.0          # the feature loss's weight
    unroll_weight: float = 0.5        # the unrolled pass's weight
    vocab: int = 16384                # the draft vocabulary
    batch_tokens: int = 1024          # tokens per batch
    feat_noise: float = 0.0           # input-feature noise
    weight_decay: float = 0.0         # AdamW weight decay


VARIANTS: dict[str, Variant] = {
    "shipped-recipe": Variant("A", 1024, 0, 8),
    "2k-prompts-e4": Variant("A", 2048, 0, 4),
    "2k-prompts-e8": Variant("A", 2048, 0, 8),
    "all-prompts-e3": Variant("A", 4212, 0, 3),
    "all-prompts-e5": Variant("A", 4212, 0, 5),
    "all-prompts-80tok-e5": Variant("A", 4212, 80, 5),
    "all-prompts-e3-lr4e-3": Variant("A", 4212, 0, 3, lr=4e-3),
    "all-prompts-e3-featloss0.1": Variant("A", 4212, 0, 3, feat_weight=0.1),
    "all-prompts-e3-unroll1": Variant("A", 4212, 0, 3, unroll_weight=1.0),
    "all-prompts-e3-vocab32k": Variant("A", 4212, 0, 3, vocab=32768),
    "all-prompts-e3-batch4k": Variant("A", 4212, 0, 3, lr=4e-3, batch_tokens=4096),
    "two-answers-e2": Variant("AB", 4212, 0, 2),
    "two-answers-e3-lr4e-3": Variant("AB", 4212, 0, 3, lr=4e-3),
    "two-answers-e4": Variant("AB", 4212, 0, 4),
    # the prompt pool: narrow, and broad at the same and at other budgets
    "narrow-80tok-e5": Variant("N", 4212, 80, 5),
    "broad-80tok-e5": Variant("W", 4212, 80, 5),
    "broad-8k-prompts-40tok-e5": Variant("W", 8424, 40, 5),
    "broad-6k-prompts-56tok-e5": Variant("W", 6318, 56, 5),
    "broad-80tok-e8": Variant("W", 4212, 80, 8),
    # regularisation against the gap between training and held-out agreement (the shipped draft
    # agrees 0.66 with its own training answers, 0.53 with held-out ones), and twice the data
    "broad-e8-noise0.2": Variant("W", 4212, 80, 8, feat_noise=0.2),
    "broad-e8-noise0.5": Variant("W", 4212, 80, 8, feat_noise=0.5),
    "broad-e8-wd0.1": Variant("W", 4212, 80, 8, weight_decay=0.1),
    "broad-e8-noise0.2-wd0.1": Variant("W", 4212, 80, 8, feat_noise=0.2, weight_decay=0.1),
    "broad-8k-prompts-80tok-e4": Variant("W", 8424, 80, 4),
    "broad-8k-prompts-80tok-e6": Variant("W", 8424, 80, 6),
    "broad-8k-e6-noise0.2": Variant("W", 8424, 80, 6, feat_noise=0.2),
}

#     part: (pool, prompts, answer tokens, every answer sampled)
PARTS: dict[str, tuple[str, int, int, bool]] = {
    "A": ("narrow", 4212, 160, False),
    "B": ("narrow", 4212, 160, True),
    "N": ("narrow", 4212, 80, False),
    "W": ("broad", 8424, 80, False),
}


def _load_target(device: str):
    from ..models.loading import load_bundled_model
    target, tok = load_bundled_model(device, dtype=torch.float32)
    return target.requires_grad_(False), tok


def _heldout_sets() -> dict[str, list[str]]:
    from .prompts import FREEFORM_HELDOUT, heldout_template_pairs
    return {"held": heldout_template_pairs(), "free": list(FREEFORM_HELDOUT)}


def stage_data(work_dir: str, device: str, parts: str) -> None:
    """Generate (and cache, one file per part) the answers and features the variants need."""
    from .data import generate_batch, generate_dataset
    from .features import target_features
    from .prompts import training_prompts
    held_sets = _heldout_sets()
    todo = [p for p in (*parts, *held_sets) if not os.path.exists(os.path.join(work_dir, f"part-{p}.pt"))]
    if not todo:
        return
    target, tok = _load_target(device)
    os.makedirs(work_dir, exist_ok=True)
    for part in todo:
        if part in PARTS:
            pool, n, tokens, sampled = PARTS[part]
            prompts, batch = training_prompts(n, seed=0, broad=pool == "broad"), 256
            if sampled:
                data = [ex for i, s in enumerate(range(0, len(prompts), batch))
                        for ex in generate_batch(target, tok, prompts[s:s + batch], tokens, sampled=True,
                                                 seed=1_000_003 + i)]
            else:
                data = generate_dataset(target, tok, prompts, tokens, batch, seed=0)
        else:
            prompts = held_sets[part]
            data = generate_dataset(target, tok, prompts, 64, len(prompts), seed=7)   # one batch: greedy
        feats = target_features(target, data, tokens_per_batch=65536)
        torch.save({"data": data, "feats": feats}, os.path.join(work_dir, f"part-{part}.pt"))


def _load_part(work_dir: str, part: str) -> tuple[list, list]:
    blob = torch.load(os.path.join(work_dir, f"part-{part}.pt"), weights_only=False)
    return blob["data"], blob["feats"]


def _cut(example, feature: torch.Tensor, n: int):
    from .data import Example
    if not n or len(example.ids) - example.prompt_len <= n:
        return example, feature
    end = example.prompt_len + n
    return Example(example.ids[:end], example.prompt_len, example.top_ids[:n], example.top_logp[:n]), feature[:end]


def stage_variant(name: str, work_dir: str, out: str, device: str) -> dict:
    from .train import build_vocab
    from .train_feature import distill_features, feature_agreement, trainable_feature_draft
    v = VARIANTS[name]
    target, tok = _load_target(device)
    parts = {part: _load_part(work_dir, part) for part in v.answers}
    held, free = _load_part(work_dir, "held"), _load_part(work_dir, "free")
    pairs = [_cut(e, f, v.cut) for part in v.answers for e, f in zip(parts[part][0][:v.prompts], parts[part][1][:v.prompts])]
    train, train_feats = [p[0] for p in pairs], [p[1] for p in pairs]
    vocab = build_vocab(train, v.vocab, target.config.vocab_size, always=(tok.eos_token_id,))
    torch.manual_seed(0)
    draft = trainable_feature_draft(target, 29, vocab)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    t0 = time.time()
    log = distill_features(draft, train, train_feats, epochs=v.epochs, lr=v.lr, seed=0, pad=pad,
                           feat_weight=v.feat_weight, unroll_weight=v.unroll_weight, heldout=held, evals=6,
                           tokens_per_batch=v.batch_tokens, feat_noise=v.feat_noise, weight_decay=v.weight_decay)
    result = {"name": name, "spec": asdict(v),
              "answer_tokens": sum(len(e.ids) - e.prompt_len for e in train),
              "seconds": round(time.time() - t0, 1), "curve": log["curve"],
              "final": {k: feature_agreement(draft, *v) for k, v in (("held", held), ("free", free))}}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.training.recipe_search", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--work-dir", default=".recipe_search", help="the generated data")
    ap.add_argument("--out", default=".recipe_search/results", help="one JSON file per variant")
    ap.add_argument("--only", default=",".join(VARIANTS), help="comma-separated variant names")
    ap.add_argument("--variant", default=None, help=argparse.SUPPRESS)      # one variant, in a child process
    args = ap.parse_args(argv)
    if args.variant:
        stage_variant(args.variant, args.work_dir, args.out, args.device)
        return 0
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    stage_data(args.work_dir, args.device, "".join(sorted({p for n in names for p in VARIANTS[n].answers})))
    os.makedirs(args.out, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    common = ["--device", args.device, "--work-dir", args.work_dir, "--out", args.out]
    children = [subprocess.Popen([sys.executable, "-m", __spec__.name, "--variant", n, *common], env=env)
                for n in names]
    return max(child.wait() for child in children)


if __name__ == "__main__":
    raise SystemExit(main())
