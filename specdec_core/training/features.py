"""The target's features for the feature-reading draft: one teacher-forced pass over the data.

For every example (prompt + the target's own response) we keep the target's last hidden state after
its final norm — the vector its LM head reads — at every position, in float16. The feature draft
(``specdec_core.drafters.feature``) learns to predict the next feature from (feature, next token).
Batched by similar length, right-padded (causal attention never looks at the padding after a row).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .data import Example
from .train import make_batches


@torch.inference_mode()
def target_features(target: torch.nn.Module, data: list[Example], tokens_per_batch: int = 4096,
                    on_batch: Callable[[int], None] | None = None) -> list[torch.Tensor]:
    """``features[i]``: (len(data[i].ids), hidden) float16, the target's post-norm last hidden states."""
    decoder = target.get_decoder()
    out: list[torch.Tensor | None] = [None] * len(data)
    for idx in make_batches(data, tokens_per_batch, seed=0):
        width = max(len(data[i].ids) for i in idx)
        ids = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, :len(data[i].ids)] = torch.tensor(data[i].ids)
        hidden = decoder(input_ids=ids.to(target.device), use_cache=False).last_hidden_state
        for r, i in enumerate(idx):
            out[i] = hidden[r, :len(data[i].ids)].to(torch.float16).cpu().clone()
        if on_batch is not None:
            on_batch(sum(len(data[i].ids) for i in idx))
    return out  # type: ignore[return-value]
