"""A transformers causal LM as a drafter: its own KV cache, one draft token per forward."""
from __future__ import annotations

import torch
from ..timing import now_ms
from .base import CATCHUP_MIN, DraftOutlook, DraftPolicy, Drafter, Proposal, proposal_from_steps, with_catchup
from .tree import TreeProposal
from .tree_build import FedNodes, grow_tree
from ..models.kv_cache import new_kv_cache
from ..models.tree_attention import keep_rows


class ModelDrafter:
    """A transformers causal LM with its own KV cache, drafting one token per forward (a chain) or one tree
    level per forward (``propose_tree``)."""

    tree_siblings = "distinct"   # under sampling: the draft's top-k candidates, or "independent" draws from q

    def __init__(self, model: torch.nn.Module, name: str = "model") -> None:
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size = _vocab_size(model)
        self.cache = None
        self.cache_len = 0
        self._tree: tuple[FedNodes, list[int]] | None = None   # the last tree's fed nodes, until rollback_tree

    def fresh(self) -> "ModelDrafter":
        """A drafter running the same weights with a cache of its own (runs side by side need one each)."""
        return ModelDrafter(self.model, self.name)

    def start(self, prompt_ids: list[int]) -> int:
        self.cache = new_kv_cache(self.model.config)
        self.cache_len = 0
        self._tree = None
        return 0

    def outlook(self, ids: list[int]) -> DraftOutlook:
        return DraftOutlook(unseen=len(ids) - self.cache_len)

    @torch.inference_mode()
    def _forward(self, tokens: list[int] | torch.Tensor, logits_to_keep: int = 1) -> torch.Tensor:
        x = tokens.view(1, -1) if isinstance(tokens, torch.Tensor) else torch.tensor([tokens], device=self.device)
        out = self.model(input_ids=x, past_key_values=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        self.cache_len += x.shape[1]
        return out.logits[0, -1]

    def _catch_up(self, ids: list[int]) -> tuple[list[int], float]:
        """More than CATCHUP_MIN unseen tokens: all but the last in a forward of their own. Returns what is
        left to feed with the first draft step and the catch-up's ms (0: none)."""
        feed = ids[self.cache_len:]
        if len(feed) <= CATCHUP_MIN:
            return feed, 0.0
        t0 = now_ms(self.device)
        self._forward(feed[:-1])
        return feed[-1:], now_ms(self.device) - t0

    def propose(self, ids: list[int], k: int, policy: DraftPolicy) -> Proposal:
        if k <= 0:
            return Proposal([], None)
        feed, catchup_ms = self._catch_up(ids)
        prop = proposal_from_steps(lambda i, prev: self._forward(feed if prev is None else prev), k, policy,
                                   self.device)
        return with_catchup(prop, catchup_ms)

    @torch.inference_mode()
    def propose_tree(self, ids: list[int], n_nodes: int, top_k: int, policy: DraftPolicy,
                     max_depth: int) -> TreeProposal:
        """An EAGLE-2 dynamic tree (``tree_build.grow_tree``): one forward over the unseen tokens gives the
        root's candidates, then one forward per level over the nodes it expands, each seeing the prefix and
        its ancestors (``models.tree_attention``). The tree's rows stay in the cache until ``rollback_tree``."""
        if n_nodes <= 0 or max_depth <= 0:
            return TreeProposal([], [], "distinct", None)
        feed, catchup_ms = self._catch_up(ids)
        t0 = now_ms(self.device)
        root = self._forward(feed)
        first_ms = now_ms(self.device) - t0
        fed = FedNodes(self.cache_len)
        dtype = next(self.model.parameters()).dtype

        def step(nodes: list[int], tokens: list[int], parents: list[int]) -> torch.Tensor:
            mask, pos = fed.feed(nodes, parents, dtype, self.device)
            x = torch.tensor([[tokens[n] for n in nodes]], device=self.device)
            out = self.model(input_ids=x, attention_mask=mask, position_ids=pos, past_key_values=self.cache,
                             use_cache=True)
            self.cache_len += len(nodes)
            return out.logits[0]

        prop, layout = grow_tree(root, step, n_nodes, top_k, max_depth, policy, self.device, self.tree_siblings,
                                 first_ms)
        self._tree = (fed, layout)
        return with_catchup(prop, catchup_ms)

    def rollback(self, valid_len: int) -> None:
        if self.cache_len > valid_len:
            self.cache.crop(valid_len - self.cache_len)
            self.cache_len = valid_len

    def rollback_tree(self, valid_len: int, path: list[int]) -> None:
        """After a tree verify: keep the prefix and the accepted path's rows (as far as they were fed), moved
        into place behind it, and nothing else; never past ``valid_len``."""
        if self._tree is None:
            self.rollback(valid_len)
            return
        fed, layout = self._tree
        self._tree = None
        rows = fed.path_rows(path, layout)
        length = min(valid_len, fed.prefix_len + len(rows))
        keep_rows(self.cache, rows[:max(0, length - fed.prefix_len)], fed.prefix_len, length)
        self.cache_len = length


def model_drafter(model: torch.nn.Module, name: str | None = None) -> "Drafter":
    """The drafter for a draft model: a ``ModelDrafter`` for a causal LM; a draft that needs more than
    tokens (the feature-reading draft) brings its own through ``make_drafter(name)``."""
    make = getattr(model, "make_drafter", None)
    if callable(make):
        return make(name) if name else make()
    return ModelDrafter(model, name=name or "model")


def _vocab_size(model: torch.nn.Module) -> int:
    return int(model.get_output_embeddings().weight.shape[0])
