"""The target model over a batch of rows: one ragged KV cache, ONE forward for every row's unseen tokens."""
from __future__ import annotations

import torch

from ..models.ragged_cache import RaggedCache, ragged_decode


class BatchTarget:
    """The target LM with a ragged cache (``models.ragged_cache``). ``forward(rows, extras)`` feeds row b what its
    cache has not seen of ``rows[b]`` plus ``extras[b]`` (the drafts) and returns each row's logits at every
    token fed. With ``keep_features`` each forward also leaves each row's post-norm last hidden states
    (``features[b]``, first position ``features_from[b]``) for a feature-reading draft.

    ``fed[b]`` is how far into row b's tokens the target has read; the cache holds exactly those unless the
    ``batch_one_crop`` bug cut it shorter (``rollback``)."""

    def __init__(self, model: torch.nn.Module, batch: int, keep_features: bool = False) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = RaggedCache(model.config, batch)
        self.fed = [0] * batch
        self.forwards = 0
        self.keep_features = keep_features
        self.features: list[torch.Tensor | None] = [None] * batch
        self.features_from = [0] * batch

    def forward(self, rows: list[list[int]], extras: list[list[int]] | None = None, logits: bool = True
                ) -> list[torch.Tensor]:
        """Row b's logits (n_b, V) at the n_b tokens it was fed (none asked: an empty list)."""
        extras = extras or [[] for _ in rows]
        feeds = [ids[f:] + list(x) for ids, f, x in zip(rows, self.fed, extras)]
        counts = [len(f) for f in feeds]
        if not any(counts):
            return [torch.empty(0, device=self.device) for _ in rows] if logits else []
        starts = list(self.fed)
        hidden = ragged_decode(self.model, self.cache, feeds)                  # (B, T, hidden)
        self.fed = [f + c for f, c in zip(self.fed, counts)]
        self.forwards += 1
        if self.keep_features:
            self.features = [hidden[b, :c] for b, c in enumerate(counts)]
            self.features_from = starts
        if not logits:
            return []
        real = torch.cat([hidden[b, :c] for b, c in enumerate(counts)])         # (Σ n_b, hidden): no padding
        with torch.inference_mode():
            out = self.model.get_output_embeddings()(real)
        return list(out.split(counts))

    def rollback(self, valid: list[int], one_crop: bool = False) -> None:
        """Row b keeps its first ``valid[b]`` tokens. ``one_crop`` (the ``batch_one_crop`` bug): the cache is cut
        with the first row's length for every row, while each row's ``fed`` says it kept its own."""
        self.fed = [min(f, v) for f, v in zip(self.fed, valid)]
        self.cache.truncate([valid[0]] * len(valid) if one_crop else self.fed)

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (finished rows leave the batch)."""
        self.cache.select(rows)
        self.fed = [self.fed[r] for r in rows]
        self.features = [self.features[r] for r in rows]
        self.features_from = [self.features_from[r] for r in rows]
