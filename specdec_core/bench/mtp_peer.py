"""transformers' own multi-token-prediction loop running the project's feature draft: its "same draft" peer.

transformers 5.x drafts with ``generate(..., use_mtp=True)``: an ``MtpModel`` of ``config.num_mtp_layers``
``MtpLayer``s — enorm, hnorm, eh_proj, one decoder layer of the target's class, post_norm — fed the
target's last hidden state (post-norm, the feature ``FeatureDraft`` reads) and the target's tied
embedding and head. ``FeatureDraft`` has exactly that layout, so a one-layer ``MtpModel`` can run its
modules unchanged; its head is swapped for the draft's (the same draft-vocabulary rows, -inf elsewhere),
so both loops propose from the same q.

What stays different, by transformers' design: its loop drafts one token per MTP layer, so the peer is
K = 1 (one draft, then a 2-token verify) — compare it with our engine at fixed K = 1. Its
``MtpModel.from_pretrained(main_model)`` looks for MTP weights in the target's checkpoint; the GGUF
target has none, so ``mtp_generation`` supplies the one ``build_mtp_model`` made, for the duration of a
``with`` block.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..drafters.feature import FeatureDraft


class _DraftHead(nn.Module):
    """The draft's own head (draft-vocabulary rows of the target's head, q = 0 elsewhere) as a module."""

    def __init__(self, draft: FeatureDraft) -> None:
        super().__init__()
        self.draft = draft

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.draft.full_logits(hidden)


def build_mtp_model(target: nn.Module, draft: FeatureDraft) -> Any:
    """A one-layer transformers ``MtpModel`` whose layer *is* the draft's modules (shared, not copied)."""
    from transformers.modeling_layers import MtpModel
    with _num_mtp_layers(target.config, 1):
        mtp = MtpModel(target, 1)
    layer = mtp.layers[0]
    for name in ("enorm", "hnorm", "eh_proj", "mtp_block", "post_norm"):
        setattr(layer, name, getattr(draft, name))
    mtp.shared_head = _DraftHead(draft)
    return mtp.to(next(draft.parameters()).device).eval()


@contextlib.contextmanager
def mtp_generation(target: nn.Module, mtp: Any) -> Iterator[None]:
    """Within the block, ``target.generate(..., use_mtp=True)`` drafts with ``mtp`` (``build_mtp_model``)."""
    from transformers.modeling_layers import MtpModel
    saved = MtpModel.__dict__["from_pretrained"]
    MtpModel.from_pretrained = classmethod(lambda cls, main_model, **kwargs: mtp)
    try:
        with _num_mtp_layers(target.config, 1):
            yield
    finally:
        MtpModel.from_pretrained = saved


@contextlib.contextmanager
def _num_mtp_layers(config: Any, n: int) -> Iterator[None]:
    had, old = hasattr(config, "num_mtp_layers"), getattr(config, "num_mtp_layers", None)
    config.num_mtp_layers = n
    try:
        yield
    finally:
        if had:
            config.num_mtp_layers = old
        else:
            delattr(config, "num_mtp_layers")
