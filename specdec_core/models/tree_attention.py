"""Tree attention: feeding a token tree to a causal LM in ONE forward, and keeping only the accepted
path in its KV cache afterwards.

A feed after ``past_len`` cached tokens is ``n_chain`` chain tokens (the tokens the cache has not seen
yet; the last of them is the tree's root) followed by the N tree nodes (``parents`` as in
``drafters.tree``: topological order, -1 = the root; checked here too, as this layer sits below the
drafters). Each query position sees
 - every cached token and every chain token up to itself (ordinary causal attention), and
 - for a tree node: the whole chain, its ancestors and itself, and no other node;
and sits at position ``past_len + j`` (chain token j) or ``past_len + n_chain - 1 + depth`` (a node), so
the logits at node i are exactly those of a chain forward over the root-to-node path
(tests/test_tree_attention.py checks this on the bundled model).

transformers 5.x passes a 4-D ``attention_mask`` (batch, 1, queries, keys) to the attention as it is
(``masking_utils._preprocess_mask_arguments``). Its meaning then depends on the attention
implementation: SDPA reads a boolean mask as "True = attend" and a float mask as additive, the eager
implementation only adds it. The masks here are additive floats (0 = attend, the dtype's minimum =
masked), which both read the same way.

After verification ``keep_rows`` moves the accepted nodes' keys and values into place behind the
chain and drops the rest, in any ``DynamicCache`` of full-attention layers (the engine's ``GrowingLayer``
included), so the next forward continues as after a chain.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch



@dataclass
class TreeFeed:
    """What one tree forward is given besides the token ids."""
    attention_mask: torch.Tensor     # (1, 1, n_chain + N, past_len + n_chain + N) additive float
    position_ids: torch.Tensor       # (1, n_chain + N) long


def visibility(parents: list[int], n_chain: int = 1) -> torch.Tensor:
    """Boolean (n_chain + N, n_chain + N): which fed token each fed token sees (the cached prefix, seen by
    all, left out). Chain tokens causally; a node: the whole chain, its ancestors and itself."""
    _check(parents)
    if n_chain < 1:
        raise ValueError(f"a tree needs its root fed or cached: n_chain must be >= 1, got {n_chain}")
    n = len(parents)
    size = n_chain + n
    vis = torch.zeros(size, size, dtype=torch.bool)
    vis[:, :n_chain] = torch.ones(size, n_chain, dtype=torch.bool).tril()   # node rows: all of the chain
    for i, p in enumerate(parents):
        row = n_chain + i
        if p >= 0:
            vis[row, n_chain:] = vis[n_chain + p, n_chain:]
        vis[row, row] = True
    return vis


def additive_mask(visible: torch.Tensor, past_len: int, dtype: torch.dtype,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """A (1, 1, q, past_len + k) additive mask from a boolean (q, k) visibility over the fed tokens: every
    cached token visible, 0 where visible, the dtype's minimum elsewhere."""
    q = visible.shape[0]
    seen = torch.cat([torch.ones(q, past_len, dtype=torch.bool), visible.cpu()], dim=1)
    mask = torch.zeros(seen.shape, dtype=dtype)
    mask.masked_fill_(~seen, torch.finfo(dtype).min)
    return mask.to(device)[None, None]


def tree_positions(parents: list[int], n_chain: int, past_len: int) -> list[int]:
    """The position of each fed token: chain token j at past_len + j, a node at the root's + its depth."""
    _check(parents)
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    root = past_len + n_chain - 1
    return list(range(past_len, root + 1)) + [root + d for d in depth]


def tree_feed(parents: list[int], n_chain: int, past_len: int, dtype: torch.dtype = torch.float32,
              device: torch.device | str | None = None) -> TreeFeed:
    """The attention mask and position ids of a feed of ``n_chain`` chain tokens + the tree's nodes after
    ``past_len`` cached tokens (module docstring)."""
    if past_len < 0:
        raise ValueError(f"past_len must be >= 0, got {past_len}")
    mask = additive_mask(visibility(parents, n_chain), past_len, dtype, device)
    pos = torch.tensor([tree_positions(parents, n_chain, past_len)], dtype=torch.long, device=device)
    return TreeFeed(attention_mask=mask, position_ids=pos)


def _check(parents: list[int]) -> None:
    for i, p in enumerate(parents):
        if isinstance(p, bool) or not isinstance(p, int) or not -1 <= p < i:
            raise ValueError(f"node {i}: parent must be -1 (the root) or an earlier node, got {p!r}")


@torch.inference_mode()
def keep_rows(cache: object, rows: list[int], start: int, length: int) -> None:
    """Move the cached keys/values at positions ``rows`` (increasing, each >= ``start`` + its index) to
    ``start``, ``start + 1``, …, then cut every layer to ``length`` entries (at most ``start + len(rows)``).
    For the accepted path of a tree fed at ``base`` = past_len + n_chain: ``rows = [base + i for i in path]``,
    ``start = base``. Works in place on full-attention layers (DynamicLayer and the engine's GrowingLayer)."""
    if length > start + len(rows):
        raise ValueError(f"keep_rows: length {length} is past the kept rows (start {start} + {len(rows)})")
    if any(r < start + j for j, r in enumerate(rows)) or any(b <= a for a, b in zip(rows, rows[1:])):
        raise ValueError(f"keep_rows: rows must increase from start {start} on, got {rows}")
    moved = [(j, r) for j, r in enumerate(rows) if r != start + j]
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False):
            continue
        if type(layer).__name__ not in ("DynamicLayer", "GrowingLayer"):
            raise ValueError(f"keep_rows works on full-attention cache layers only, not {type(layer).__name__}")
        cur = layer.keys.shape[-2]
        if cur < length:
            raise ValueError(f"keep_rows: the cache holds {cur} entries, fewer than the {length} to keep")
        if moved and moved[0][0] + start < length:
            src = torch.tensor(rows, device=layer.keys.device)
            for t in (layer.keys, layer.values):   # views of the layer's storage: written in place
                t[..., start:start + len(rows), :] = t.index_select(-2, src)
        if cur > length:
            layer.crop(length - cur)
