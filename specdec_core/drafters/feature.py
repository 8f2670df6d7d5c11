"""The feature-reading draft (EAGLE-style) for the bundled target, and the drafter that runs it.

Where the token-only draft (``trained_draft``) sees tokens only, this draft also reads the target's
last hidden state — the *feature* its LM head turns into p — which the target computes anyway in
every verify forward. One draft step, at position t:

    h = eh_proj([enorm(embed(x_{t+1})); hnorm(f_t)])  →  one decoder layer  →  post_norm  =  f̂_{t+1}
    q(x_{t+2}) = softmax(f̂_{t+1} · head[draft vocabulary])   (the target's own tied head, rows restricted)

f_t is the target's feature where it has one (every accepted position); beyond that the draft feeds
its own guess f̂ back in. The layout (enorm, hnorm, eh_proj, mtp_block, post_norm) is transformers'
``MtpLayer``; the decoder layer starts as a copy of one of the target's layers. Only that layer, the
norms, the projection and the draft-vocabulary ids are the draft's own; the embedding and the head
are the target's (shared, not stored).

``FeatureDrafter`` implements the drafter protocol plus ``reads_features``: the engine hands it the
target's features after the prefill and after every verify forward (``observe_features``).
"""
from __future__ import annotations

import copy
import os
import weakref

import torch
from torch import nn

from .base import CATCHUP_MIN, DraftOutlook, DraftPolicy, Proposal, proposal_from_steps, with_catchup
from .tree import TreeProposal
from .tree_build import FedNodes, grow_tree
from ..models.kv_cache import new_kv_cache
from .int8 import Int8Cache
from ..timing import now_ms
from .trained import (SHARED_MODULES, DraftFilesError, draft_config, draft_vocab_logits, full_vocab_logits,
    read_card, read_weights, ready_for_decoding, write_card)

ASSET_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "smollm2_feature_draft")
WEIGHTS = "feature_draft.safetensors"
REBUILD = "python -m specdec_core.distill --design feature"


class FeatureDraft(nn.Module):
    """One EAGLE-style draft step over (token, target feature) pairs; see the module docstring."""

    def __init__(self, target: torch.nn.Module, init_layer: int, vocab_ids: torch.Tensor) -> None:
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
        self.config = draft_config(target.config, 1)
        h = self.config.hidden_size
        decoder = target.get_decoder()
        self.init_layer = init_layer
        self.embed_tokens = target.get_input_embeddings()            # shared with the target, frozen
        self.lm_head = target.get_output_embeddings()                # shared with the target, frozen
        self.enorm = LlamaRMSNorm(h, eps=self.config.rms_norm_eps)
        self.hnorm = LlamaRMSNorm(h, eps=self.config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        with torch.no_grad():                                        # start as "the layer applied to the feature"
            self.eh_proj.weight.zero_()
            self.eh_proj.weight[:, h:].copy_(torch.eye(h))
            self.eh_proj.weight[:, :h].normal_(0.0, 0.02)
        self.mtp_block = copy.deepcopy(decoder.layers[init_layer])
        self.mtp_block.self_attn.layer_idx = 0
        self.post_norm = copy.deepcopy(decoder.norm)
        self.rotary_emb = copy.deepcopy(decoder.rotary_emb)
        self.register_buffer("draft_vocab", vocab_ids.to(torch.long), persistent=False)
        self._head_rows: torch.Tensor | None = None
        self.int8_head: Int8Cache | None = None                      # the loader sets it: see trained_draft.draft_vocab_logits
        self.vocab_size = int(self.lm_head.weight.shape[0])
        self.to(self.lm_head.weight.device)
        self.embed_tokens.weight.requires_grad_(False)
        self.lm_head.weight.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                cache: object | None = None, last_logits: bool = False, attention_mask: torch.Tensor | None = None,
                all_logits: bool = False):
        """input_ids (B, T) = x_{t+1}; features (B, T, hidden) = f_t; position_ids (B, T) = t.
        Returns f̂_{t+1} (B, T, hidden); with ``last_logits`` also the (B, V) full-vocabulary logits at the
        last position, with ``all_logits`` the (B, T, V) logits at every position (one call = one draft
        forward, head included, for timing hooks). With a cache, it attends to its earlier positions too:
        causally, or as ``attention_mask`` (B, 1, T, past + T, additive) says (a token tree's level)."""
        e = self.embed_tokens(input_ids)
        x = self.eh_proj(torch.cat([self.enorm(e), self.hnorm(features.to(e.dtype))], dim=-1))
        mask = attention_mask
        past = cache.get_seq_length() if cache is not None else 0
        if mask is None and past and x.shape[1] > 1:   # a catch-up after a cached past: causal, offset
            q = torch.arange(x.shape[1], device=x.device)[:, None] + past
            k = torch.arange(past + x.shape[1], device=x.device)[None, :]
            mask = torch.zeros(q.shape[0], k.shape[1], dtype=x.dtype, device=x.device)
            mask = mask.masked_fill(k > q, float("-inf"))[None, None]
        x = self.mtp_block(x, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                           use_cache=cache is not None, position_embeddings=self.rotary_emb(x, position_ids))
        hidden = self.post_norm(x)
        if all_logits:
            return hidden, self.full_logits(hidden)
        return (hidden, self.full_logits(hidden[:, -1])) if last_logits else hidden

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, hidden) → (…, len(draft_vocab)) logits over the draft vocabulary."""
        return draft_vocab_logits(self, hidden)

    def full_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, hidden) → (…, V): the draft-vocabulary logits, -inf elsewhere (q = 0 there)."""
        return full_vocab_logits(self.draft_logits(hidden), self.draft_vocab, self.vocab_size)

    def make_drafter(self, name: str = "feature draft") -> "FeatureDrafter":
        """A fresh drafter running this draft (``drafters.model_drafter`` calls this)."""
        return FeatureDrafter(self, name)

    def own_state(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if not k.startswith(SHARED_MODULES)}


class FeatureDrafter:
    """Runs a ``FeatureDraft`` with its own KV cache. The cache holds only positions computed from the
    target's real features; the positions drafted from its own guesses are dropped after every verify."""

    reads_features = True
    draft_per_token = True
    tree_siblings = "distinct"   # under sampling: the draft's top-k candidates, or "independent" draws from q

    def __init__(self, draft: FeatureDraft, name: str = "feature draft") -> None:
        self.draft = draft
        self.name = name
        self.vocab_size = draft.vocab_size
        self.device = draft.lm_head.weight.device
        self.cache = None
        self.true_len = 0                        # draft-cache positions computed from real features
        self.features: torch.Tensor | None = None  # (capacity, hidden) target features by position
        self.n_features = 0

    def fresh(self) -> "FeatureDrafter":
        """A drafter running the same draft with a cache of its own (runs side by side need one each)."""
        return FeatureDrafter(self.draft, self.name)

    def start(self, prompt_ids: list[int]) -> int:
        self.cache = new_kv_cache(self.draft.config)
        self.true_len = self.n_features = 0
        self.features = None
        return 0

    def observe_features(self, start: int, features: torch.Tensor) -> None:
        """The target's features for positions start … start + len(features) - 1."""
        end = start + features.shape[0]
        if self.features is None or end > self.features.shape[0]:
            grown = features.new_empty((max(2 * end, 256), features.shape[-1]))
            if self.features is not None:
                grown[:self.n_features] = self.features[:self.n_features]
            self.features = grown
        self.features[start:end] = features
        self.n_features = end

    @torch.inference_mode()
    def _step(self, tokens: list[int] | torch.Tensor, feats: torch.Tensor, first_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft positions first_pos … (token x_{t+1} and feature f_t each) → f̂ (hidden,) and the (V,)
        logits at the last one."""
        x = tokens.view(1, -1) if isinstance(tokens, torch.Tensor) else torch.tensor([tokens], device=self.device)
        pos = torch.arange(first_pos, first_pos + x.shape[1], device=self.device)[None]
        hidden, logits = self.draft(x, feats.view(1, x.shape[1], -1), pos, self.cache, last_logits=True)
        return hidden[0, -1], logits[0]

    def outlook(self, ids: list[int]) -> DraftOutlook:
        return DraftOutlook(unseen=len(ids) - 1 - self.true_len)

    def _root(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, float, float]:
        """Catch up (positions t = true_len … len(ids)-2, inputs (f_t, x_{t+1}), all from the target; more than
        CATCHUP_MIN of them, the prompt or a stretch of K = 0 iterations, in a forward of their own), then the
        first draft step. Returns f̂ and the logits after the last token, the catch-up's ms (0: none) and when
        the first step's clock started."""
        last = len(ids) - 1
        catchup_ms = 0.0
        if last - self.true_len > CATCHUP_MIN:
            t0 = now_ms(self.device)
            self._step(ids[self.true_len + 1:last], self.features[self.true_len:last - 1], self.true_len)
            self.true_len = last - 1
            catchup_ms = now_ms(self.device) - t0
        t0 = now_ms(self.device)
        hidden, logits = self._step(ids[self.true_len + 1:last + 1], self.features[self.true_len:last], self.true_len)
        self.true_len = last
        return hidden, logits, catchup_ms, t0

    def _unready(self, ids: list[int]) -> str:
        """Why no draft can be made yet ("" = it can)."""
        last = len(ids) - 1
        return "no target features to read yet" if last < 1 or self.n_features < last else ""

    def propose(self, ids: list[int], k: int, policy: DraftPolicy) -> Proposal:
        if k <= 0:
            return Proposal([], None)
        if why := self._unready(ids):      # a one-token prompt: the target has read nothing yet
            return Proposal([], None, stop=why)
        last = len(ids) - 1
        hidden, logits, catchup_ms, t0 = self._root(ids)

        def step(i: int, prev_tok: torch.Tensor | None) -> torch.Tensor:
            nonlocal hidden, logits
            if prev_tok is not None:           # later steps feed the draft's own feature back in
                hidden, logits = self._step(prev_tok, hidden, last + i - 1)
            return logits

        return with_catchup(proposal_from_steps(step, k, policy, self.device, t0), catchup_ms)

    @torch.inference_mode()
    def propose_tree(self, ids: list[int], n_nodes: int, top_k: int, policy: DraftPolicy,
                     max_depth: int) -> TreeProposal:
        """An EAGLE-2 dynamic tree (``tree_build.grow_tree``): the first step gives the root's candidates, then
        one forward per level over the nodes it expands, each reading its parent's f̂ and seeing the prefix
        and its own ancestors. The tree's rows are dropped at the rollback (they hold the draft's guesses)."""
        if n_nodes <= 0 or max_depth <= 0:
            return TreeProposal([], [], "distinct", None)
        if why := self._unready(ids):
            return TreeProposal([], [], "distinct", None, stop=why)
        root_hidden, root_logits, catchup_ms, t0 = self._root(ids)
        first_ms = now_ms(self.device) - t0
        fed = FedNodes(self.true_len)
        hidden: dict[int, torch.Tensor] = {}
        dtype = self.draft.lm_head.weight.dtype

        def step(nodes: list[int], tokens: list[int], parents: list[int]) -> torch.Tensor:
            mask, pos = fed.feed(nodes, parents, dtype, self.device)
            x = torch.tensor([[tokens[n] for n in nodes]], device=self.device)
            feats = torch.stack([hidden[parents[n]] if parents[n] >= 0 else root_hidden for n in nodes])[None]
            out, logits = self.draft(x, feats, pos, self.cache, attention_mask=mask, all_logits=True)
            hidden.update((n, out[0, j]) for j, n in enumerate(nodes))
            return logits[0]

        prop, _ = grow_tree(root_logits, step, n_nodes, top_k, max_depth, policy, self.device, self.tree_siblings,
                            first_ms)
        return with_catchup(prop, catchup_ms)

    def rollback(self, valid_len: int) -> None:
        keep = min(self.true_len, valid_len)
        if self.cache is not None and self.cache.get_seq_length() > keep:
            self.cache.crop(keep - self.cache.get_seq_length())
        self.true_len = keep
        self.n_features = min(self.n_features, valid_len)

    def rollback_tree(self, valid_len: int, path: list[int]) -> None:
        """After a tree verify: as ``rollback`` (the tree's rows, all from the draft's own guesses, go; the
        engine handed the accepted path's real features to ``observe_features`` in path order)."""
        self.rollback(valid_len)


def save_feature_draft(draft: FeatureDraft, folder: str, card: dict) -> list[str]:
    """The draft's own tensors in fp16 (one file, ≈ 9 MB) plus the draft vocabulary, and the card."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    state = {k: v.to(torch.float16).contiguous() for k, v in draft.own_state().items()}
    state["draft_vocab"] = draft.draft_vocab.to(torch.int32).cpu().contiguous()
    save_file(state, os.path.join(folder, WEIGHTS))
    write_card(folder, {**card, "files": [WEIGHTS]})
    return [WEIGHTS]


def load_feature_draft(target: torch.nn.Module, folder: str = ASSET_DIR) -> FeatureDraft:
    """The shipped feature draft, tied to ``target``'s embedding and head. Raises ``DraftFilesError``
    naming the file and the rebuild command when a file is missing, corrupt or does not fit."""
    what, path = "the feature draft", os.path.join(folder, WEIGHTS)
    init_layer = read_card(folder, what, REBUILD, lambda c: int(c["init_layer"]))
    state = read_weights(path, what, REBUILD)
    if "draft_vocab" not in state:
        raise DraftFilesError(f"{path} has no draft_vocab; rebuild it with `{REBUILD}`")
    draft = FeatureDraft(target, init_layer, state.pop("draft_vocab"))
    expected = draft.own_state()
    if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in expected):
        raise DraftFilesError(f"the feature draft's file {path} does not match its card or this target; "
                              f"rebuild it with `{REBUILD}`")
    dtype = next(target.parameters()).dtype
    draft.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    return ready_for_decoding(draft)


_LOADED: "weakref.WeakKeyDictionary[torch.nn.Module, FeatureDraft]" = weakref.WeakKeyDictionary()


def feature_draft_for(target: torch.nn.Module) -> FeatureDraft:
    """``load_feature_draft(target)``, loaded once per target object."""
    if target not in _LOADED:
        _LOADED[target] = load_feature_draft(target)
    return _LOADED[target]
