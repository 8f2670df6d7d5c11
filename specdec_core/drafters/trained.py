"""The bundled draft: a small model the project trained for SmolLM2-135M-Instruct (``python -m specdec_core.distill``).

What it is: a Llama decoder with a few layers (initialised from some of the target's own layers, then
distilled towards the target's next-token distributions on its own answers to chat prompts), the
target's final-norm shape, and a head over only the most frequent output tokens (the "draft
vocabulary"). It shares the target's token embedding and its tied LM head: only its own layers, its
norm and the draft-vocabulary ids are stored (``specdec_core/assets/smollm2_draft/``, fp16 safetensors).

Its logits still cover the full vocabulary (-inf outside the draft vocabulary, so q = 0 there), which
keeps speculative sampling exact (the rule holds for any q) and makes it a drop-in causal LM: it works
as ``speculative_generate(target, draft, ...)`` and as transformers' ``target.generate(...,
assistant_model=draft)``.
"""
from __future__ import annotations

import copy
import json
import os
import weakref
from collections.abc import Callable
from typing import TypeVar

import torch

from ..models.cpu_matmul import small_batch_linear
from .int8 import Int8Cache, int8_linear, int8_ready, use_int8_decoding, wants_grad

ASSET_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "smollm2_draft")
CARD = "draft_card.json"
REBUILD = "python -m specdec_core.distill"
T = TypeVar("T")
D = TypeVar("D", bound=torch.nn.Module)
SHARED_MODULES = ("embed_tokens", "lm_head")   # a draft's children that are the target's own: tied at load time,
                                               # never stored, trained or converted


def draft_config(target_config, n_layers: int):
    """The target's config with ``n_layers`` decoder layers."""
    cfg = copy.deepcopy(target_config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types)[:n_layers]
    cfg.tie_word_embeddings = True
    return cfg


def head_rows(draft: torch.nn.Module) -> torch.Tensor:
    """The shared LM head's rows for ``draft.draft_vocab``, gathered once (cached on ``draft._head_rows``)
    and again after a dtype or device change, or when autograd needs a normal tensor."""
    rows, w = draft._head_rows, draft.lm_head.weight
    stale = rows is None or rows.dtype != w.dtype or rows.device != w.device
    if stale or (rows.is_inference() and not torch.is_inference_mode_enabled()):
        with torch.no_grad():
            rows = draft._head_rows = w[draft.draft_vocab].contiguous()
    return rows


def draft_vocab_logits(draft: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """(…, hidden) → (…, len(draft_vocab)) logits over the draft vocabulary. A draft its loader prepared for
    decoding multiplies by an int8 copy of the rows where it can (``int8_decode``): q is then the draft's q at
    that precision, which keeps the sampling exact (the rule holds for any q)."""
    rows = head_rows(draft)
    if draft.int8_head is not None and int8_ready(rows) and not wants_grad(hidden):
        return int8_linear(hidden, draft.int8_head.get(rows))
    return small_batch_linear(hidden, rows)


def ready_for_decoding(draft: D) -> D:
    """A loaded draft, frozen, in eval mode, its own linear layers and its head rows multiplied in int8 where
    the CPU allows (``int8_decode``; the modules shared with the target keep their class): what both loaders
    return."""
    draft.requires_grad_(False)
    use_int8_decoding(draft, skip=SHARED_MODULES)
    draft.int8_head = Int8Cache()
    return draft.eval()


def full_vocab_logits(small: torch.Tensor, vocab_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(…, len(vocab_ids)) draft-vocabulary logits → (…, vocab_size), -inf elsewhere (q = 0 there)."""
    full = small.new_full((*small.shape[:-1], vocab_size), float("-inf"))
    full[..., vocab_ids] = small
    return full


def _draft_class():
    """Built on first use, so that importing this module does not import transformers."""
    from transformers import LlamaForCausalLM
    from transformers.modeling_outputs import CausalLMOutputWithPast

    class TrainedDraft(LlamaForCausalLM):
        """LlamaForCausalLM whose head computes only the draft-vocabulary rows of the (shared) LM head."""

        def set_draft_vocab(self, vocab_ids: torch.Tensor) -> None:
            ids = vocab_ids.to(torch.long).to(self.lm_head.weight.device)
            self.register_buffer("draft_vocab", ids, persistent=False)
            self._head_rows = None                           # gathered lazily, after weights are tied
            self.int8_head = None                            # set by the loader: see draft_vocab_logits

        def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
            """(…, hidden) → (…, len(draft_vocab)) logits over the draft vocabulary (differentiable in hidden)."""
            return draft_vocab_logits(self, hidden)

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                    inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0, **kwargs):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                             **kwargs)
            hidden = out.last_hidden_state
            if isinstance(logits_to_keep, int) and logits_to_keep > 0:
                hidden = hidden[:, -logits_to_keep:]
            elif not isinstance(logits_to_keep, int):
                hidden = hidden[:, logits_to_keep]
            logits = full_vocab_logits(self.draft_logits(hidden), self.draft_vocab, self.config.vocab_size)
            return CausalLMOutputWithPast(logits=logits, past_key_values=out.past_key_values)

    return TrainedDraft


def build_draft(target: torch.nn.Module, layers: list[int], vocab_ids: torch.Tensor) -> torch.nn.Module:
    """A draft with ``len(layers)`` layers copied from the target's ``layers``, its final norm copied,
    its embedding and LM head shared with the target (the same Parameter objects, frozen)."""
    cls = _draft_class()
    cfg = draft_config(target.config, len(layers))
    with torch.device("meta"):
        draft = cls(cfg)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.lm_head = target.lm_head
    draft.model.layers = torch.nn.ModuleList(copy.deepcopy(target.model.layers[i]) for i in layers)
    for new_idx, layer in enumerate(draft.model.layers):
        layer.self_attn.layer_idx = new_idx
    draft.model.norm = copy.deepcopy(target.model.norm)
    draft.model.rotary_emb = copy.deepcopy(target.model.rotary_emb)
    draft.set_draft_vocab(vocab_ids)
    draft.to(next(target.parameters()).device)
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.lm_head.weight.requires_grad_(False)
    return draft.eval()


def own_state(draft: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What the draft does not share with the target: its layers and its norm."""
    return {k: v for k, v in draft.state_dict().items() if not k.startswith(("model.embed_tokens", "lm_head"))}


def save_draft(draft: torch.nn.Module, folder: str, card: dict) -> list[str]:
    """One fp16 safetensors file per layer (each well under 10 MB), one for the norm and the draft
    vocabulary, and the card. Returns the file names."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    state = own_state(draft)
    files = []
    for i in range(draft.config.num_hidden_layers):
        part = {k: v.to(torch.float16).contiguous() for k, v in state.items() if k.startswith(f"model.layers.{i}.")}
        files.append(f"layer_{i}.safetensors")
        save_file(part, os.path.join(folder, files[-1]))
    rest = {k: v.to(torch.float16).contiguous() for k, v in state.items() if not k.startswith("model.layers.")}
    rest["draft_vocab"] = draft.draft_vocab.to(torch.int32).cpu().contiguous()
    files.append("head.safetensors")
    save_file(rest, os.path.join(folder, files[-1]))
    write_card(folder, {**card, "files": files})
    return files


def write_card(folder: str, card: dict) -> None:
    with open(os.path.join(folder, CARD), "w") as f:
        json.dump(card, f, indent=1)


class DraftFilesError(RuntimeError):
    """The shipped draft's files are missing or unreadable; the message names the file and the fix."""


def read_card(folder: str, what: str, rebuild: str, fields: Callable[[dict], T]) -> T:
    """``fields(card)`` of a draft's card, or ``DraftFilesError`` naming the card and the rebuild command
    when it is missing, unreadable or lacks what ``fields`` reads."""
    path = os.path.join(folder, CARD)
    try:
        with open(path) as f:
            card = json.load(f)
        if not isinstance(card, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise DraftFilesError(f"{what}'s card {path} is missing or unreadable ({e}); rebuild it with `{rebuild}`") from e
    try:
        return fields(card)
    except (KeyError, TypeError, ValueError) as e:
        raise DraftFilesError(f"{what}'s card {path} is missing a field ({e}); rebuild it with `{rebuild}`") from e


def read_weights(path: str, what: str, rebuild: str) -> dict[str, torch.Tensor]:
    """One safetensors file, or ``DraftFilesError`` naming it and the rebuild command."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        return load_file(path)
    except (OSError, SafetensorError, ValueError) as e:
        raise DraftFilesError(f"{what}'s weight file {path} is missing or corrupt ({e}); "
                              f"rebuild it with `{rebuild}`") from e


def load_bundled_draft(target: torch.nn.Module, folder: str = ASSET_DIR) -> torch.nn.Module:
    """The project's trained draft for the bundled target, tied to ``target``'s embedding and LM head.

    Works as ``speculative_generate(target, draft, ...)`` and as ``target.generate(..., assistant_model=draft)``.
    Raises ``DraftFilesError`` naming the file and ``python -m specdec_core.distill`` when a file is
    missing or corrupt."""
    what = "the trained draft"
    layers, files = read_card(folder, what, REBUILD, lambda c: ([int(i) for i in c["init_layers"]], list(c["files"])))
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(read_weights(os.path.join(folder, name), what, REBUILD))
    if "draft_vocab" not in state:
        raise DraftFilesError(f"{os.path.join(folder, 'head.safetensors')} has no draft_vocab; rebuild it with `{REBUILD}`")
    vocab = state.pop("draft_vocab")
    draft = build_draft(target, layers, vocab)
    dtype = next(target.parameters()).dtype
    expected = own_state(draft)
    if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in expected):
        raise DraftFilesError(f"the trained draft's files in {folder} do not match its card or this target "
                              f"(missing or extra tensors); rebuild them with `{REBUILD}`")
    draft.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    return ready_for_decoding(draft)


_LOADED: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()


def trained_draft_for(target: torch.nn.Module) -> torch.nn.Module:
    """``load_bundled_draft(target)``, loaded once per target object (the app and the tabs share it)."""
    if target not in _LOADED:
        _LOADED[target] = load_bundled_draft(target)
    return _LOADED[target]
