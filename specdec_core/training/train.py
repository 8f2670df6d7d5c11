"""Distil the draft towards the target: soft cross-entropy against the target's top-32 distribution.

At every response position the loss is −Σ_j p_j log q_j over the target's top tokens j that lie in the
draft vocabulary (p = target, from the data stage; q = draft, softmax over the draft vocabulary): a
KL(p‖q) estimate up to a constant. Only the draft's layers and final norm train; the shared embedding
and LM head stay frozen. Every so often the step-1 agreement on held-out greedy answers (the draft's
argmax equals the target's next token, with the target's own prefix) is logged: the acceptance curve.
"""
from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable

import torch

from .data import Example

TOKENS_PER_BATCH = 4096


def build_vocab(data: list[Example], size: int, vocab_size: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """The ``size`` most frequent response tokens (ties: lower id first), plus ``always`` (e.g. EOS),
    filled up in token-id order (a frequency proxy for BPE vocabularies) when the data has fewer."""
    counts = Counter(t for ex in data for t in ex.ids[ex.prompt_len:])
    chosen = list(dict.fromkeys([*always, *(t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))]))
    chosen = chosen[:size]
    if len(chosen) < size:
        have = set(chosen)
        chosen += [t for t in range(vocab_size) if t not in have][: size - len(chosen)]
    return torch.tensor(sorted(chosen), dtype=torch.long)


def make_batches(data: list[Example], tokens_per_batch: int, seed: int) -> list[list[int]]:
    """Indices of ``data`` grouped by similar length, about ``tokens_per_batch`` padded tokens each, in a
    seeded random order."""
    order = sorted(range(len(data)), key=lambda i: len(data[i].ids))
    batches, cur, longest = [], [], 0
    for i in order:
        longest_if = max(longest, len(data[i].ids))
        if cur and longest_if * (len(cur) + 1) > tokens_per_batch:
            batches.append(cur)
            cur, longest_if = [], len(data[i].ids)
        cur.append(i)
        longest = longest_if
    if cur:
        batches.append(cur)
    random.Random(seed).shuffle(batches)
    return batches


def _collate(data: list[Example], idx: list[int], to_draft: torch.Tensor, pad: int):
    """Padded inputs, the (row, position) of every response prediction, and its soft label in draft-vocab terms."""
    exs = [data[i] for i in idx]
    width = max(len(e.ids) for e in exs)
    ids = torch.full((len(exs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(exs), width), dtype=torch.long)
    rows, cols, top_ids, top_logp = [], [], [], []
    for r, e in enumerate(exs):
        ids[r, :len(e.ids)] = torch.tensor(e.ids)
        mask[r, :len(e.ids)] = 1
        n = len(e.ids) - e.prompt_len
        rows.append(torch.full((n,), r))
        cols.append(torch.arange(e.prompt_len - 1, e.prompt_len - 1 + n))   # hidden at j predicts ids[j + 1]
        top_ids.append(e.top_ids.long())
        top_logp.append(e.top_logp.float())
    top_ids_t = torch.cat(top_ids)
    slot = to_draft[top_ids_t]                                               # -1 where outside the draft vocab
    p = torch.cat(top_logp).exp() * (slot >= 0)
    return ids, mask, torch.cat(rows), torch.cat(cols), slot.clamp(min=0), p


def distill_loss(draft: torch.nn.Module, data: list[Example], idx: list[int], to_draft: torch.Tensor,
                 pad: int) -> torch.Tensor:
    dev = draft.lm_head.weight.device
    ids, mask, rows, cols, slot, p = (t.to(dev) for t in _collate(data, idx, to_draft, pad))
    hidden = draft.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    logq = torch.log_softmax(draft.draft_logits(hidden[rows, cols]).float(), dim=-1)   # (M, N)
    return -(p * logq.gather(1, slot)).sum(-1).mean()


@torch.inference_mode()
def step1_agreement(draft: torch.nn.Module, heldout: list[Example], pad: int) -> float:
    """Share of held-out greedy response positions where the draft's argmax (full-vocabulary logits, so
    tokens outside the draft vocabulary count as misses) is the target's token, given the target's prefix."""
    hits = total = 0
    for e in heldout:
        x = torch.tensor([e.ids], device=draft.lm_head.weight.device)
        logits = draft(input_ids=x, use_cache=False).logits[0]
        n = len(e.ids) - e.prompt_len
        pred = logits[e.prompt_len - 1: e.prompt_len - 1 + n].argmax(-1)
        hits += int((pred == x[0, e.prompt_len:]).sum())
        total += n
    return hits / max(total, 1)


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def vocab_index(draft_vocab: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(vocab_size,) slot of each token in the draft vocabulary, -1 where it has none."""
    to_draft = torch.full((vocab_size,), -1, dtype=torch.long)
    to_draft[draft_vocab.cpu()] = torch.arange(len(draft_vocab))
    return to_draft


def train_loop(draft: torch.nn.Module, data: list[Example], batch_loss: Callable[[list[int]], torch.Tensor],
               evaluate: Callable[[], dict] | None, *, epochs: float, lr: float, seed: int, evals: int,
               tokens_per_batch: int, on_step: Callable[[int, float], None] | None,
               compute_dtype: torch.dtype = torch.float32, weight_decay: float = 0.0) -> dict:
    """The training loop both draft designs share: AdamW on the draft's trainable parameters, batches of
    similar length in a new seeded order each epoch, warm-up then cosine learning rate, gradient clipping.
    ``batch_loss(indices)`` is the design's loss; ``evaluate()`` its held-out agreement figures, logged
    ``evals`` times (and before the first step) against the response tokens seen. With ``compute_dtype``
    bfloat16 the loss runs under autocast (mixed precision: the weights, their gradients and the optimizer
    stay float32; the evaluations run in float32)."""
    torch.manual_seed(seed)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    per_epoch = make_batches(data, tokens_per_batch, seed)
    total = max(1, round(len(per_epoch) * epochs))
    eval_at = {round(total * (i + 1) / evals) for i in range(evals)} if evaluate else set()
    curve, losses, seen = [], [], 0

    def log_curve() -> None:
        draft.eval()
        curve.append({"tokens_seen": seen, **evaluate()})

    if evaluate:
        log_curve()
    t0 = time.time()
    order, order_epoch = per_epoch, 0
    for step in range(total):
        epoch, at = divmod(step, len(per_epoch))
        if epoch != order_epoch:                     # same length groups, a new seeded order each epoch
            order, order_epoch = make_batches(data, tokens_per_batch, seed + epoch), epoch
        batch = order[at]
        draft.train()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, lr, warmup=max(1, total // 20))
        with torch.autocast(params[0].device.type, dtype=compute_dtype, enabled=compute_dtype != torch.float32):
            loss = batch_loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        n_tok = sum(len(data[i].ids) - data[i].prompt_len for i in batch)
        seen += n_tok
        if on_step is not None:
            on_step(n_tok, losses[-1])
        if step + 1 in eval_at:
            log_curve()
    draft.eval()
    return {"steps": total, "batches_per_epoch": len(per_epoch), "losses": losses, "curve": curve,
            "response_tokens_seen": seen, "seconds": round(time.time() - t0, 1)}


def distill(draft: torch.nn.Module, data: list[Example], *, epochs: float, lr: float, seed: int, pad: int,
            heldout: list[Example] | None = None, evals: int = 8, tokens_per_batch: int = TOKENS_PER_BATCH,
            on_step: Callable[[int, float], None] | None = None, compute_dtype: torch.dtype = torch.float32) -> dict:
    """Train ``draft`` in place. Returns losses, the agreement curve (against response tokens seen) and timings."""
    to_draft = vocab_index(draft.draft_vocab, draft.config.vocab_size)
    evaluate = (lambda: {"step1_agreement": round(step1_agreement(draft, heldout, pad), 4)}) if heldout else None
    return train_loop(draft, data, lambda batch: distill_loss(draft, data, batch, to_draft, pad), evaluate,
                      epochs=epochs, lr=lr, seed=seed, evals=evals, tokens_per_batch=tokens_per_batch, on_step=on_step,
                      compute_dtype=compute_dtype)
