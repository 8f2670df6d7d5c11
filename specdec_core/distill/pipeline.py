"""Stages 2 and 3 of ``python -m specdec_core.distill``: train, save, reload, measure, write the card."""
from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import torch

from ..config import SpecConfig
from ..engine import speculative_generate
from ..models import encode_prompt
from ..trained_draft import build_draft, load_bundled_draft, save_draft, write_card
from .data import Example, generate_dataset
from .prompts import heldout_prompts
from .train import build_vocab, distill

MEASURE_K = 4


def measure_acceptance(target: torch.nn.Module, draft: torch.nn.Module, tokenizer, prompts: list[str],
                       temperature: float, max_new_tokens: int, k: int = MEASURE_K, seed: int = 0) -> dict:
    """accepted ÷ drafted and tokens per iteration over ``prompts``, through the real engine."""
    drafted = accepted = tokens = iterations = 0
    for i, prompt in enumerate(prompts):
        cfg = SpecConfig(k=k, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                         seed=seed + i, full_trace=False)
        tr = speculative_generate(target, draft, encode_prompt(tokenizer, prompt), cfg, tokenizer=tokenizer)
        drafted, accepted = drafted + tr.stats.drafted, accepted + tr.stats.accepted
        tokens, iterations = tokens + tr.stats.new_tokens, iterations + tr.stats.iterations
    return {"temperature": temperature, "k": k, "prompts": len(prompts), "drafted": drafted, "accepted": accepted,
            "acceptance_rate": round(accepted / max(drafted, 1), 4),
            "tokens_per_iteration": round(tokens / max(iterations, 1), 3)}


def train_and_save(args: argparse.Namespace, target: torch.nn.Module, tokenizer, data: list[Example],
                   data_info: dict, t_start: float, bar: Callable) -> dict:
    layers = [int(x) for x in str(args.layers).split(",") if x.strip()]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    target.requires_grad_(False)
    held = heldout_prompts(args.heldout)
    # held-out greedy answers for the agreement curve (not trained on: other templates, other topics)
    curve_set = generate_dataset(target, tokenizer, held[:16], 64, 16, seed=args.seed + 7)
    vocab = build_vocab(data, args.vocab, target.config.vocab_size, always=(tokenizer.eos_token_id,))
    draft = build_draft(target, layers, vocab)
    for p in draft.parameters():
        p.requires_grad_(False)
    for p in [*draft.model.layers.parameters(), *draft.model.norm.parameters()]:
        p.requires_grad_(True)
    n_train = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    tokens_per_epoch = data_info["response_tokens"]
    with bar(int(tokens_per_epoch * args.epochs), "2/3 train") as b:
        def on_step(n: int, loss: float) -> None:
            b.update(n)
            b.set_postfix(loss=f"{loss:.3f}")
        log = distill(draft, data, epochs=args.epochs, lr=args.lr, seed=args.seed, pad=pad, heldout=curve_set,
                      on_step=on_step)
    card = {
        "what": "draft for SmolLM2-135M-Instruct (bundled): a Llama decoder of "
                f"{len(layers)} layers initialised from the target's layers {layers}, the target's final norm, "
                f"a head over the {len(vocab)} most frequent response tokens; embedding and LM head shared with "
                "the target (not stored)",
        "init_layers": layers, "draft_vocab_size": len(vocab), "trainable_params": n_train,
        "command": "python -m specdec_core.distill " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "work_dir", "stage")),
        "data": {**data_info, "source": "the target's own answers to template × topic chat prompts "
                 "(specdec_core/distill/prompts.py), greedy and sampled (T 0.8, top-p 0.95) batches alternating; "
                 "labels: the target's top-32 log-probs at temperature 1"},
        "training": {"epochs": args.epochs, "lr": args.lr, "steps": log["steps"],
                     "response_tokens_seen": log["response_tokens_seen"], "seconds": log["seconds"],
                     "first_loss": round(log["losses"][0], 4), "last_loss": round(sum(log["losses"][-20:]) / len(log["losses"][-20:]), 4),
                     "curve": log["curve"]},
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}",
        "seed": args.seed,
    }
    card["files"] = save_draft(draft, args.out, {**card, "measured": None})
    shipped = load_bundled_draft(target, args.out)          # measure what was written (fp16 round trip)
    with bar(2 * len(held) * args.eval_tokens, "3/3 measure") as b:
        measured = {}
        for name, temp in (("greedy", 0.0), ("t0.7", 0.7)):
            measured[name] = measure_acceptance(target, shipped, tokenizer, held, temp, args.eval_tokens,
                                                seed=args.seed)
            b.update(len(held) * args.eval_tokens)
    card["measured"] = {"heldout_prompts": len(held), "new_tokens_each": args.eval_tokens, **measured}
    card["total_seconds"] = round(time.time() - t_start, 1)
    write_card(args.out, card)                              # the weights are already written
    return card
