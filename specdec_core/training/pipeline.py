"""Stages 2 and 3 of ``python -m specdec_core.distill``: train, save, reload, measure, write the card.

Two designs (``--design``): ``token`` (a few decoder layers over tokens, ``trained_draft``) and
``feature`` (one EAGLE-style layer reading the target's features, ``feature_draft``). Both share the
data, the held-out prompts, the draft vocabulary and the measurement through the real engine.
"""
from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import torch

from ..config import RECOMMENDED_CONFIDENCE_STOP, SpecConfig
from ..models.cpu_matmul import cpu_has_native_bf16
from ..decoding.engine import speculative_generate
from ..drafters.int8 import decoding_precision
from ..models.loading import encode_prompt
from .data import Example, generate_dataset
from .prompts import heldout_prompts
from .train import build_vocab, distill

MEASURE_K = 4
DATA_SOURCE = ("the target's own answers to chat prompts from the pool named above (specdec_core/training/prompts.py: "
               "template × topic pairs, and in the broad pool whole chat prompts too), "
               "greedy and sampled (T 0.8, top-k 256, top-p 0.95) batches alternating; labels: the target's top-32 "
               "log-probs at temperature 1")


def measure_acceptance(target: torch.nn.Module, make_draft: Callable[[], object], tokenizer, prompts: list[str],
                       temperature: float, max_new_tokens: int, k: int = MEASURE_K, seed: int = 0,
                       confidence_stop: float = 0.0) -> dict:
    """accepted ÷ drafted and tokens per iteration over ``prompts``, through the real engine
    (``make_draft()``: a draft model or a fresh drafter for each prompt)."""
    drafted = accepted = tokens = iterations = 0
    for i, prompt in enumerate(prompts):
        cfg = SpecConfig(k=k, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                         seed=seed + i, full_trace=False, confidence_stop=confidence_stop)
        tr = speculative_generate(target, make_draft(), encode_prompt(tokenizer, prompt), cfg, tokenizer=tokenizer)
        drafted, accepted = drafted + tr.stats.drafted, accepted + tr.stats.accepted
        tokens, iterations = tokens + tr.stats.new_tokens, iterations + tr.stats.iterations
    return {"temperature": temperature, "k": k, **({"confidence_stop": confidence_stop} if confidence_stop else {}),
            "prompts": len(prompts), "drafted": drafted, "accepted": accepted,
            "acceptance_rate": round(accepted / max(drafted, 1), 4),
            "tokens_per_iteration": round(tokens / max(iterations, 1), 3)}


def resolve_dtype(choice: str, device: torch.device) -> torch.dtype:
    """``--train-dtype``, ``--data-dtype``: bf16, fp32, or auto = bf16 where the device has native bf16 arithmetic
    (a CPU with AVX-512 BF16 or AMX, as oneDNN reports it; a CUDA GPU that supports it), fp32 elsewhere. On this
    project's CPU bf16 trains the feature draft about 2.2 × faster than fp32 and generates its data about 1.8 ×
    faster."""
    if choice == "auto":
        native = torch.cuda.is_bf16_supported() if device.type == "cuda" else device.type == "cpu" and cpu_has_native_bf16()
        choice = "bf16" if native else "fp32"
    return torch.bfloat16 if choice == "bf16" else torch.float32


def _train_token(args, target, data, vocab, curve_set, pad, on_step, compute_dtype):
    from ..drafters.trained import build_draft
    layers = [int(x) for x in str(args.layers).split(",") if x.strip()]
    draft = build_draft(target, layers, vocab)
    draft.requires_grad_(False)
    for p in [*draft.model.layers.parameters(), *draft.model.norm.parameters()]:
        p.requires_grad_(True)
    n_train = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    log = distill(draft, data, epochs=args.epochs, lr=args.lr, seed=args.seed, pad=pad, heldout=curve_set,
                  tokens_per_batch=args.batch_tokens, on_step=on_step, compute_dtype=compute_dtype)
    what = (f"a Llama decoder of {len(layers)} layers initialised from the target's layers {layers}, the "
            "target's final norm")
    return draft, log, {"init_layers": layers, "trainable_params": n_train}, what


def _train_feature(args, target, data, vocab, curve_set, pad, on_step, compute_dtype, features, curve_features):
    from .train_feature import distill_features, trainable_feature_draft
    layer = int(str(args.layers).split(",")[-1])
    draft = trainable_feature_draft(target, layer, vocab)
    n_train = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    log = distill_features(draft, data, features, epochs=args.epochs, lr=args.lr, seed=args.seed, pad=pad,
                           heldout=(curve_set, curve_features), tokens_per_batch=args.batch_tokens, on_step=on_step,
                           compute_dtype=compute_dtype)
    what = (f"EAGLE-style: fc([embedding; target feature]) then one decoder layer initialised from the target's "
            f"layer {layer}, then a norm; reads the target's last hidden state")
    return draft, log, {"init_layer": layer, "trainable_params": n_train}, what


def _save_and_reload(design: str, target: torch.nn.Module, draft: torch.nn.Module, out: str,
                     card: dict) -> tuple[list[str], Callable[[], object]]:
    """Write the draft, load it back from disk (fp16 round trip) and return its files and a drafter factory."""
    if design == "feature":
        from ..drafters.feature import save_feature_draft
        files = save_feature_draft(draft, out, card)
    else:
        from ..drafters.trained import save_draft
        files = save_draft(draft, out, card)
    return files, _drafters(design, target, out)


def _drafters(design: str, target: torch.nn.Module, out: str) -> Callable[[], object]:
    """A factory of fresh drafters for the draft in ``out``."""
    if design == "feature":
        from ..drafters.feature import FeatureDrafter, load_feature_draft
        loaded = load_feature_draft(target, out)
        return lambda: FeatureDrafter(loaded)
    from ..drafters.trained import load_bundled_draft
    shipped = load_bundled_draft(target, out)
    return lambda: shipped


def train_and_save(args: argparse.Namespace, target: torch.nn.Module, tokenizer, data: list[Example],
                   data_info: dict, t_start: float, bar: Callable, features: list[torch.Tensor] | None = None) -> dict:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    target.requires_grad_(False)
    held = heldout_prompts(args.heldout)
    # held-out greedy answers for the agreement curve (not trained on: other templates, other topics)
    # (its seeded generation also fixes the global generator the feature draft's random init draws from)
    curve_set = generate_dataset(target, tokenizer, held[:16], 64, 16, seed=args.seed + 7)
    vocab = build_vocab(data, args.vocab, target.config.vocab_size, always=(tokenizer.eos_token_id,))
    compute_dtype = resolve_dtype(args.train_dtype, target.device)
    with bar(int(data_info["response_tokens"] * args.epochs), "2/3 train") as b:
        def on_step(n: int, loss: float) -> None:
            b.update(n)
            b.set_postfix(loss=f"{loss:.3f}")
        if args.design == "feature":
            from .features import target_features
            draft, log, arch, what = _train_feature(args, target, data, vocab, curve_set, pad, on_step, compute_dtype,
                                                    features, target_features(target, curve_set))
        else:
            draft, log, arch, what = _train_token(args, target, data, vocab, curve_set, pad, on_step, compute_dtype)
    card = {
        "what": f"{args.design} draft for SmolLM2-135M-Instruct (bundled): {what}; a head over the {len(vocab)} "
                "most frequent response tokens (q = 0 elsewhere); embedding and LM head shared with the target "
                "(not stored)",
        "design": args.design, **arch, "draft_vocab_size": len(vocab),
        "command": "python -m specdec_core.distill " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "work_dir", "stage")),
        "data": {**data_info, "source": DATA_SOURCE},
        "training": {"epochs": args.epochs, "lr": args.lr, "batch_tokens": args.batch_tokens,
                     "compute_dtype": str(compute_dtype).removeprefix("torch."),
                     "steps": log["steps"],
                     "response_tokens_seen": log["response_tokens_seen"], "seconds": log["seconds"],
                     "first_loss": round(log["losses"][0], 4),
                     "last_loss": round(sum(log["losses"][-20:]) / len(log["losses"][-20:]), 4),
                     "curve": log["curve"]},
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}",
        "seed": args.seed,
    }
    card["files"], make_draft = _save_and_reload(args.design, target, draft, args.out, {**card, "measured": None})
    card["measured"] = measure_heldout(target, tokenizer, make_draft, bar, args.heldout, args.eval_tokens, args.seed)
    card["total_seconds"] = round(time.time() - t_start, 1)
    from ..drafters.trained import write_card
    write_card(args.out, card)                              # the weights are already written
    return card


MEASURED_SETTINGS = (("greedy", 0.0, 0.0, MEASURE_K), ("t0.7", 0.7, 0.0, MEASURE_K),   # (name, temperature,
                     ("greedy_confidence_stop", 0.0, RECOMMENDED_CONFIDENCE_STOP, MEASURE_K),  #  confidence stop, K)
                     ("t0.7_confidence_stop", 0.7, RECOMMENDED_CONFIDENCE_STOP, MEASURE_K),
                     ("greedy_k1", 0.0, 0.0, 1), ("t0.7_k1", 0.7, 0.0, 1))


def measure_heldout(target: torch.nn.Module, tokenizer, make_draft: Callable[[], object], bar: Callable,
                    n_prompts: int, eval_tokens: int, seed: int) -> dict:
    """Stage 3: acceptance on ``n_prompts`` held-out prompts, greedy and at temperature 0.7: drafting K =
    MEASURE_K tokens, the same with the recommended confidence stop (the draft stops after its confidence
    falls), and one draft per iteration (K = 1: accepted ÷ drafted is then the per-draft acceptance α, the
    first draft's, which deeper drafts from the draft's own fed-back guesses do not dilute)."""
    held = heldout_prompts(n_prompts)
    measured = {}
    with bar(len(MEASURED_SETTINGS) * len(held) * eval_tokens, "3/3 measure") as b:
        for name, temp, stop, k in MEASURED_SETTINGS:
            measured[name] = measure_acceptance(target, make_draft, tokenizer, held, temp, eval_tokens, k=k,
                                                seed=seed, confidence_stop=stop)
            b.update(len(held) * eval_tokens)
    return {"heldout_prompts": len(held), "new_tokens_each": eval_tokens,
            "decoding": decoding_precision(target.get_output_embeddings().weight), **measured}


def remeasure(args: argparse.Namespace, target: torch.nn.Module, tokenizer, bar: Callable) -> dict:
    """``--stage measure``: stage 3 alone, on the draft already in ``args.out`` and on the held-out prompts its
    card names; only the card's "measured" part is rewritten (the weights, and how they were made, stay)."""
    from ..drafters.trained import read_card, write_card
    make_draft = _drafters(args.design, target, args.out)
    card = read_card(args.out, f"the {args.design} draft", f"python -m specdec_core.distill --design {args.design}",
                     lambda c: c)
    before = card.get("measured") or {}
    card["measured"] = measure_heldout(target, tokenizer, make_draft, bar, before.get("heldout_prompts", args.heldout),
                                       before.get("new_tokens_each", args.eval_tokens), args.seed)
    write_card(args.out, card)
    return card
