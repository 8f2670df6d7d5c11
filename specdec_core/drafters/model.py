"""A transformers causal LM as a drafter: its own KV cache, one draft token per forward."""
from __future__ import annotations

import torch
from ..timing import now_ms
from .base import CATCHUP_MIN, DraftOutlook, DraftPolicy, Drafter, Proposal, proposal_from_steps, with_catchup
from ..models.kv_cache import new_kv_cache


class ModelDrafter:
    """A transformers causal LM with its own KV cache, drafting one token per forward."""

    def __init__(self, model: torch.nn.Module, name: str = "model") -> None:
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size = _vocab_size(model)
        self.cache = None
        self.cache_len = 0

    def fresh(self) -> "ModelDrafter":
        """A drafter running the same weights with a cache of its own (runs side by side need one each)."""
        return ModelDrafter(self.model, self.name)

    def start(self, prompt_ids: list[int]) -> int:
        self.cache = new_kv_cache(self.model.config)
        self.cache_len = 0
        return 0

    def outlook(self, ids: list[int]) -> DraftOutlook:
        return DraftOutlook(unseen=len(ids) - self.cache_len)

    @torch.inference_mode()
    def _forward(self, tokens: list[int] | torch.Tensor, logits_to_keep: int = 1) -> torch.Tensor:
        x = tokens.view(1, -1) if isinstance(tokens, torch.Tensor) else torch.tensor([tokens], device=self.device)
        out = self.model(input_ids=x, past_key_values=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        self.cache_len += x.shape[1]
        return out.logits[0, -1]

    def propose(self, ids: list[int], k: int, policy: DraftPolicy) -> Proposal:
        feed = ids[self.cache_len:]
        catchup_ms = 0.0
        if k > 0 and len(feed) > CATCHUP_MIN:
            t0 = now_ms(self.device)
            self._forward(feed[:-1])
            catchup_ms, feed = now_ms(self.device) - t0, feed[-1:]
        prop = proposal_from_steps(lambda i, prev: self._forward(feed if prev is None else prev), k, policy,
                                   self.device)
        return with_catchup(prop, catchup_ms)

    def rollback(self, valid_len: int) -> None:
        if self.cache_len > valid_len:
            self.cache.crop(valid_len - self.cache_len)
            self.cache_len = valid_len


def model_drafter(model: torch.nn.Module, name: str | None = None) -> "Drafter":
    """The drafter for a draft model: a ``ModelDrafter`` for a causal LM; a draft that needs more than
    tokens (the feature-reading draft) brings its own through ``make_drafter(name)``."""
    make = getattr(model, "make_drafter", None)
    if callable(make):
        return make(name) if name else make()
    return ModelDrafter(model, name=name or "model")


def _vocab_size(model: torch.nn.Module) -> int:
    return int(model.get_output_embeddings().weight.shape[0])
