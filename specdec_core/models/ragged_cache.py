"""One KV cache for a batch of sequences of different lengths (ragged rows), fed in one forward.

Row b's valid entries are the first ``lengths[b]`` slots of its cache row; the slots after them (up to the
batch's longest row) hold nothing it may read. A forward feeds each row ``counts[b]`` new tokens, padded to the
longest feed T; they land in slots S … S + T − 1 of every row (S = the cache's length). ``layout`` gives that
forward its additive 4-D attention mask and position ids:
 - a real new token j of row b sees its row's valid slots [0, lengths[b]) and its own new tokens 0 … j,
   at position lengths[b] + j, exactly as in a forward of that row alone;
 - a padding token sees only itself (no row of the mask is empty, so softmax never divides by zero).
After the forward ``appended`` moves each row's real new entries behind its valid prefix (one scatter per
layer) and cuts the cache to the longest row; ``truncate`` keeps only each row's first ``valid[b]`` entries
(a rejected draft's keys go, per row); ``select`` keeps only some rows (finished rows leave the batch).
Works on the engine's ``GrowingLayer`` and on transformers' ``DynamicLayer``.
"""
from __future__ import annotations

import torch

from .kv_cache import new_kv_cache


class RaggedCache:
    """A ``DynamicCache`` of batch B plus each row's valid length (module docstring)."""

    def __init__(self, config: object, batch: int) -> None:
        if batch < 1:
            raise ValueError(f"a batch needs at least one row, got {batch}")
        self.cache = new_kv_cache(config)
        self.lengths = [0] * batch
        self.size = 0                                 # slots every row has (the longest row's length)

    def layout(self, counts: list[int], dtype: torch.dtype, device: torch.device | str | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention mask (B, 1, T, S + T) additive, position ids (B, T)) for a forward feeding ``counts[b]``
        tokens to row b (0 is allowed: the row is all padding)."""
        if len(counts) != len(self.lengths) or min(counts) < 0:
            raise ValueError(f"counts must give each of the {len(self.lengths)} rows a count >= 0, got {counts}")
        t, s = max(max(counts), 1), self.size
        lengths = torch.tensor(self.lengths)[:, None, None]          # (B, 1, 1)
        real = torch.arange(t)[None, :, None] < torch.tensor(counts)[:, None, None]   # (B, T, 1): query is real
        key = torch.arange(s + t)[None, None, :]                     # (1, 1, S + T)
        query = torch.arange(t)[None, :, None]                       # (1, T, 1)
        new = key - s                                                # a key's index among the new tokens
        seen = (real & ((key < lengths) | ((new >= 0) & (new <= query)))) | (new == query)
        mask = torch.zeros(seen.shape, dtype=dtype).masked_fill_(~seen, torch.finfo(dtype).min)
        positions = torch.tensor(self.lengths)[:, None] + torch.arange(t)[None, :]
        return mask[:, None].to(device), positions.to(device)

    @torch.inference_mode()
    def appended(self, counts: list[int]) -> None:
        """After the forward ``layout(counts)`` was made for: row b keeps its ``counts[b]`` new entries, moved
        to slots lengths[b] …; the cache is cut to the longest row."""
        t, s = max(max(counts), 1), self.size
        dest = torch.tensor(self.lengths)[:, None] + torch.arange(t)[None, :]      # (B, T)
        for layer in self._layers():
            for states in (layer.keys, layer.values):                # views of the layer's storage
                src = states[:, :, s:s + t].clone()
                index = dest.to(states.device)[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])
                states.scatter_(2, index, src)                       # a row's padding lands past its new length
        self.lengths = [n + c for n, c in zip(self.lengths, counts)]
        self.size = s + t
        self._cut(max(self.lengths))

    def truncate(self, valid: list[int]) -> None:
        """Row b keeps its first ``valid[b]`` entries (never more than it has)."""
        self.lengths = [min(n, v) for n, v in zip(self.lengths, valid)]
        self._cut(max(self.lengths))

    @torch.inference_mode()
    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order): the other rows leave the batch."""
        if not rows:
            raise ValueError("select needs at least one row")
        for layer in self._layers():
            index = torch.tensor(rows, device=layer.keys.device)
            if hasattr(layer, "_kbuf") and layer._kbuf is not None:  # GrowingLayer: the buffers, then the views
                layer._kbuf, layer._vbuf = layer._kbuf.index_select(0, index), layer._vbuf.index_select(0, index)
                layer.keys, layer.values = layer._kbuf[..., :layer._len, :], layer._vbuf[..., :layer._len, :]
            else:
                layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
        self.lengths = [self.lengths[r] for r in rows]
        self._cut(max(self.lengths))

    def _layers(self) -> list:
        return [layer for layer in self.cache.layers if getattr(layer, "is_initialized", False)]

    def _cut(self, size: int) -> None:
        for layer in self._layers():
            cur = layer.keys.shape[-2]
            if cur > size:
                layer.crop(size - cur)
        self.size = size


@torch.inference_mode()
def ragged_decode(model: torch.nn.Module, cache: RaggedCache, feeds: list[list[int]], pad_id: int = 0
                  ) -> torch.Tensor:
    """ONE forward of ``model``'s decoder (a transformers causal LM) over each row's ``feeds[b]`` after what
    ``cache`` holds; the cache then holds them too. Returns the last hidden states (B, T, hidden) — the final
    norm's output, what the LM head reads: row b's real tokens are ``[b, :len(feeds[b])]``. The caller applies
    the head only where it needs logits (``model.get_output_embeddings()``)."""
    counts = [len(f) for f in feeds]
    t = max(max(counts), 1)
    device = next(model.parameters()).device
    x = torch.tensor([f + [pad_id] * (t - len(f)) for f in feeds], device=device)
    mask, positions = cache.layout(counts, next(model.parameters()).dtype, device)
    out = model.get_decoder()(input_ids=x, attention_mask=mask, position_ids=positions,
                              past_key_values=cache.cache, use_cache=True)
    cache.appended(counts)
    return out.last_hidden_state
