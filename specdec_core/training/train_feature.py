"""Distil the feature-reading draft (``specdec_core.drafters.feature``) towards the target.

The draft's input at position t is (x_{t+1}, f_t) — the next token and the target's feature at t — and
its output f̂_{t+1} should be the target's feature at t+1, whose head distribution p predicts x_{t+2}.
Loss per response position: the soft cross-entropy of ``train.py`` (target's top-32 labels, draft
vocabulary) plus ``feat_weight`` × SmoothL1(f̂, f). A second, unrolled pass feeds the draft its own
f̂_t as input instead of f_t (what it sees from its second draft step on), with weight ``unroll_weight``.
The curve logs step-1 agreement (true features) and step-2 agreement given step 1 was right.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..drafters.feature import FeatureDraft
from ..drafters.trained import SHARED_MODULES
from .data import Example
from .train import TOKENS_PER_BATCH, _collate, train_loop, vocab_index


def _padded_features(features: list[torch.Tensor], idx: list[int], width: int) -> torch.Tensor:
    out = torch.zeros((len(idx), width, features[idx[0]].shape[-1]))
    for r, i in enumerate(idx):
        out[r, :features[i].shape[0]] = features[i].float()
    return out


def _passes(draft: torch.nn.Module, ids: torch.Tensor, feats: torch.Tensor, unroll: bool, noise: float = 0.0):
    """Pass 1 on the target's features; pass 2 (optional) on the draft's own pass-1 guesses of them. With
    ``noise`` > 0 the input features get uniform noise in [-noise, noise] (training only)."""
    pos = torch.arange(ids.shape[1] - 1, device=ids.device)[None].expand(ids.shape[0], -1)
    inp = feats[:, :-1]
    if noise:
        inp = inp + (torch.rand_like(inp) * 2 - 1) * noise
    out1 = draft(ids[:, 1:], inp, pos)                                     # (B, W-1, H): f̂_{t+1}
    if not unroll:
        return out1, None
    own = torch.cat([inp[:, :1], out1[:, :-1].detach()], dim=1)             # f̂_t for t ≥ 1, f_0 for t = 0
    return out1, draft(ids[:, 1:], own, pos)


def feature_loss(draft: torch.nn.Module, data: list[Example], features: list[torch.Tensor], idx: list[int],
                 to_draft: torch.Tensor, pad: int, feat_weight: float, unroll_weight: float,
                 feat_noise: float = 0.0) -> torch.Tensor:
    dev = draft.lm_head.weight.device
    ids, mask, rows, cols, slot, p = (t.to(dev) for t in _collate(data, idx, to_draft, pad))
    feats = _padded_features(features, idx, ids.shape[1]).to(dev)
    outs = _passes(draft, ids, feats, unroll_weight > 0, feat_noise)
    valid = mask[:, 1:].bool()                                              # f_{t+1} exists
    total = torch.zeros(())
    for out, w in zip(outs, (1.0, unroll_weight)):
        if out is None:
            continue
        logq = torch.log_softmax(draft.draft_logits(out[rows, cols - 1]).float(), dim=-1)  # output t predicts x_{t+2}
        ce = -(p * logq.gather(1, slot)).sum(-1).mean()
        reg = F.smooth_l1_loss(out[valid], feats[:, 1:][valid])
        total = total + w * (ce + feat_weight * reg)
    return total


@torch.inference_mode()
def feature_agreement(draft: torch.nn.Module, heldout: list[Example], features: list[torch.Tensor]) -> tuple[float, float]:
    """Step-1 agreement (draft argmax == the target's greedy token, true features; tokens outside the draft
    vocabulary count as misses) and step-2 agreement where step 1 at the previous position was right."""
    hits1 = total1 = hits2 = total2 = 0
    dev = draft.lm_head.weight.device
    for e, f in zip(heldout, features):
        ids = torch.tensor([e.ids], device=dev)
        out1, out2 = _passes(draft, ids, f.float()[None].to(dev), unroll=True)
        t = torch.arange(e.prompt_len - 2, len(e.ids) - 2, device=dev)                 # outputs predicting the response
        gold = ids[0, t + 2]
        ok1 = draft.full_logits(out1[0, t]).argmax(-1) == gold
        ok2 = draft.full_logits(out2[0, t]).argmax(-1) == gold
        hits1, total1 = hits1 + int(ok1.sum()), total1 + len(t)
        prev_ok = torch.cat([torch.zeros(1, dtype=torch.bool, device=dev), ok1[:-1]])   # step 1 right one position earlier
        hits2, total2 = hits2 + int((ok2 & prev_ok).sum()), total2 + int(prev_ok.sum())
    return hits1 / max(total1, 1), hits2 / max(total2, 1)


def trainable_feature_draft(target: torch.nn.Module, layer: int, vocab_ids: torch.Tensor) -> FeatureDraft:
    """A new feature draft (``FeatureDraft(target, layer, vocab_ids)``) whose own modules train and whose
    shared embedding and head stay frozen."""
    draft = FeatureDraft(target, layer, vocab_ids)
    draft.requires_grad_(False)
    for name, p in draft.named_parameters():
        if not name.startswith(SHARED_MODULES):
            p.requires_grad_(True)
    return draft


def distill_features(draft: torch.nn.Module, data: list[Example], features: list[torch.Tensor], *, epochs: float,
                     lr: float, seed: int, pad: int, feat_weight: float = 1.0, unroll_weight: float = 0.5,
                     heldout: tuple[list[Example], list[torch.Tensor]] | None = None, evals: int = 8,
                     tokens_per_batch: int = TOKENS_PER_BATCH, on_step: Callable[[int, float], None] | None = None,
                     compute_dtype: torch.dtype = torch.float32, feat_noise: float = 0.0,
                     weight_decay: float = 0.0) -> dict:
    """Train ``draft`` in place; returns losses, the agreement curve (against response tokens seen), timings.
    ``feat_noise``: half-width of the uniform noise on the input features; ``weight_decay``: AdamW's."""
    to_draft = vocab_index(draft.draft_vocab, draft.vocab_size)

    def evaluate() -> dict:
        a1, a2 = feature_agreement(draft, *heldout)
        return {"step1_agreement": round(a1, 4), "step2_agreement_given_step1": round(a2, 4)}

    return train_loop(draft, data,
                      lambda batch: feature_loss(draft, data, features, batch, to_draft, pad, feat_weight, unroll_weight,
                                                 feat_noise),
                      evaluate if heldout else None, epochs=epochs, lr=lr, seed=seed, evals=evals,
                      tokens_per_batch=tokens_per_batch, on_step=on_step, compute_dtype=compute_dtype,
                      weight_decay=weight_decay)
