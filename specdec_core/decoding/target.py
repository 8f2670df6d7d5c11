"""The target model with its KV cache, and the checks every run makes on its inputs."""
from __future__ import annotations

from typing import Any
import torch
from ..drafters.base import Drafter
from ..drafters.model import model_drafter
from ..models.kv_cache import new_kv_cache
from ..models.tree_attention import keep_rows, tree_feed


class TargetModel:
    """The target LM with its KV cache; ``forward(ids)`` feeds whatever the cache has not seen.
    With ``keep_features``, each forward also leaves the post-norm last hidden states of the tokens it
    fed in ``features`` (first position ``features_from``) for a feature-reading drafter.
    A token tree goes through ``tree_forward`` (one forward with the tree attention mask) and ``keep_path``
    (only the accepted path stays in the cache, and in ``features``)."""

    def __init__(self, model: torch.nn.Module, keep_features: bool = False) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = new_kv_cache(model.config)              # appends in place, crops in O(1)
        self.cache_len = 0
        self.forwards = 0
        self.keep_features = keep_features
        self.features: torch.Tensor | None = None            # (fed tokens, hidden)
        self.features_from = 0
        self._tree_base = 0                                  # first node's cache row in the last tree forward

    def forward(self, ids: list[int], extra: list[int] = (), logits_to_keep: int = 1) -> torch.Tensor:
        return self._run(ids[self.cache_len:] + list(extra), logits_to_keep)

    def tree_forward(self, ids: list[int], tokens: list[int], parents: list[int]) -> torch.Tensor:
        """ONE forward over the unseen tokens of ``ids`` (the last is the tree's root) and the tree's nodes,
        each node seeing the prefix and its ancestors only (``models.tree_attention``): the logits at the
        root and at each node, (N + 1, V)."""
        chain = ids[self.cache_len:]
        feed = tree_feed(parents, len(chain), self.cache_len, next(self.model.parameters()).dtype, self.device)
        self._tree_base = self.cache_len + len(chain)
        return self._run(chain + list(tokens), len(tokens) + 1, attention_mask=feed.attention_mask,
                         position_ids=feed.position_ids)

    def keep_path(self, path: list[int], valid_len: int) -> None:
        """After ``tree_forward``: the accepted path's keys/values (node indices, root to leaf) moved behind the
        chain, the cache cut to ``valid_len`` entries; ``features`` keep the chain's rows then the path's."""
        base = self._tree_base
        keep_rows(self.cache, [base + i for i in path], base, valid_len)
        if self.features is not None:
            n_chain = base - self.features_from
            rows = torch.tensor(list(range(n_chain)) + [n_chain + i for i in path], device=self.features.device)
            self.features = self.features.index_select(0, rows)
        self.cache_len = valid_len

    @torch.inference_mode()
    def _run(self, feed: list[int], logits_to_keep: int, **kwargs: torch.Tensor) -> torch.Tensor:
        x = torch.tensor([feed], device=self.device)
        hook = None
        if self.keep_features:   # the final norm's output = what the LM head reads, for every fed token
            def keep(module, args, out):
                self.features, self.features_from = out[0], self.cache_len
            hook = self.model.get_decoder().norm.register_forward_hook(keep)
        try:
            logits = self.model(input_ids=x, past_key_values=self.cache, use_cache=True,
                                logits_to_keep=logits_to_keep, **kwargs).logits
        finally:
            if hook is not None:
                hook.remove()
        self.cache_len += len(feed)
        self.forwards += 1
        return logits[0]                                       # (logits_to_keep, V)

    def rollback(self, valid_len: int) -> None:
        if self.cache_len > valid_len:
            self.cache.crop(valid_len - self.cache_len)
            self.cache_len = valid_len


def normalize_input_ids(input_ids: Any) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2 and input_ids.shape[0] == 1:
            input_ids = input_ids[0]
        if input_ids.dim() != 1:
            raise ValueError(f"input_ids must have shape (n,) or (1, n), got {tuple(input_ids.shape)}")
        input_ids = input_ids.tolist()
    if not isinstance(input_ids, (list, tuple)) or not all(isinstance(t, int) for t in input_ids):
        raise ValueError("input_ids must be a list of ints or a LongTensor")
    if len(input_ids) == 0:
        raise ValueError("the prompt is empty: give at least one token")
    return list(input_ids)


def as_drafter(draft: Any, target: torch.nn.Module) -> Drafter:
    if isinstance(draft, torch.nn.Module):
        draft = model_drafter(draft)
    if not isinstance(draft, Drafter):
        raise ValueError(f"draft must be a causal LM or a drafter object, got {type(draft).__name__}")
    vocab = getattr(draft, "vocab_size", None)
    target_vocab = int(target.get_output_embeddings().weight.shape[0])
    if vocab is not None and vocab != target_vocab:
        raise ValueError(f"the draft's vocabulary size ({vocab}) differs from the target's ({target_vocab}): "
                         "speculative decoding needs one shared vocabulary")
    return draft


def _resolve_eos(eos_token_id: int | None, tokenizer: Any) -> int | None:
    if eos_token_id is None and tokenizer is not None:
        eos_token_id = getattr(tokenizer, "eos_token_id", None)
    return eos_token_id
