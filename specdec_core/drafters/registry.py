"""Drafter names -> drafters: the app's and the CLI's choices ("ngram", "self", the shipped drafts, a
model key of the pool)."""
from __future__ import annotations

from typing import Any
import torch
from ..models.loading import (check_tokenizer_compat)
from ..models.pool import LoadedModel, ModelPool
from .trained import trained_draft_for


def make_drafter(pool: ModelPool, target: LoadedModel, draft_key: str) -> Any:
    """A drafter for ``target``: "ngram" (prompt lookup), "self" (the target drafting for itself, the
    classic pitfall: c = 1), "feature" / "trained" (the project's trained drafts, feature-reading and
    token-only; bundled target only), or a model key for the pool ("bundled", a hub id, a folder). A model
    draft must pass the tokenizer compatibility check."""
    from .model import ModelDrafter, model_drafter
    from .ngram import NGramDrafter
    from .registry import SHIPPED, shipped_draft_for
    if draft_key == "ngram":
        return NGramDrafter()
    if draft_key in SHIPPED:
        if target.key != "bundled":
            raise ValueError(f"{SHIPPED[draft_key]} is made for the bundled SmolLM2-135M-Instruct only")
        return model_drafter(shipped_draft_for(draft_key, target.model), name=draft_key)
    if draft_key in ("self", target.key):
        return ModelDrafter(target.model, name=f"self ({target.label})")
    draft = pool.get(draft_key)
    check_tokenizer_compat(target.tokenizer, draft.tokenizer)
    return ModelDrafter(draft.model, name=draft.label)


# The drafts the project ships for the bundled target, by key: what the app, the CLI, the tabs and the
# bench call them.
SHIPPED = {"feature": "the trained feature-reading draft (EAGLE-style)", "trained": "the trained token-only draft"}


def shipped_draft_for(key: str, target: torch.nn.Module) -> torch.nn.Module:
    """The shipped draft ``key`` (see ``SHIPPED``) tied to ``target``, loaded once per target object.
    Run it with ``drafters.model_drafter(draft)`` (the feature draft brings its own drafter)."""
    if key == "feature":
        from .feature import feature_draft_for
        return feature_draft_for(target)
    if key == "trained":
        return trained_draft_for(target)
    raise ValueError(f"no shipped draft {key!r}; expected one of {', '.join(SHIPPED)}")
