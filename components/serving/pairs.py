"""The target ← draft pairs the app offers, and the prompts that show each kind of draft at its best.

A pair key names what the Live tab's selector and /generate's ``pair`` take: the bundled SmolLM2-135M
with its trained drafts, with n-gram prompt lookup or drafting for itself, and the Hugging Face Hub
presets (``preset:<index into PRESETS>``). ``resolve_pair`` loads a key's models through the pool (one
lock per model) and gives the ``Pair`` a run needs: the models to lock and a fresh drafter per run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from specdec_core import PRESETS, LoadedModel, NGramDrafter, check_tokenizer_compat
from specdec_core.drafters.model import model_drafter
from specdec_core.drafters.registry import SHIPPED, shipped_draft_for
from specdec_core.models.pool import FairLock

PAIR_NGRAM = "bundled|ngram"
PAIR_SELF = "bundled|self"
PAIR_TRAINED = "bundled|trained"
PAIR_FEATURE = "bundled|feature"
SHIPPED_PAIRS = {PAIR_FEATURE: "feature", PAIR_TRAINED: "trained"}   # pair key -> shipped draft key
DEFAULT_PAIR = PAIR_FEATURE   # shows the most: real p ≠ q, rejections, residuals

EXTRACTIVE_PROMPTS = (     # the answer copies the prompt: prompt lookup shines
    "Repeat this sentence exactly, three times: The quick brown fox jumps over the lazy dog near the old "
    "stone bridge.",
    "Rewrite this code with the variable x renamed to total, and show the whole function:\n\n"
    "def order_value(items):\n    x = 0\n    for item in items:\n        x += item.price * item.quantity\n"
    "    return x",
    "Count from 1 to 40, separated by commas.",
)
OPEN_PROMPTS = (           # open-ended answers: where the trained drafts help (they learnt chat answers)
    "Write a short poem about the sea at night.",
    "Give me three surprising facts about octopuses.",
)
DEFAULT_PROMPT = OPEN_PROMPTS[0]   # the default pair's kind of prompt: its draft learnt chat answers, not copying


class Pool(Protocol):
    def get(self, key: str) -> LoadedModel: ...


def pair_choices() -> list[tuple[str, str]]:
    """(label, key) for the pair selector: bundled + n-gram, bundled drafting for itself, hub presets."""
    return ([("SmolLM2-135M + its trained draft (reads the target's features, EAGLE-style)", PAIR_FEATURE),
             ("SmolLM2-135M + its trained token-only draft", PAIR_TRAINED),
             ("SmolLM2-135M (bundled) + n-gram prompt lookup", PAIR_NGRAM),
             ("SmolLM2-135M drafting for itself (pitfall: the draft costs as much as the target)", PAIR_SELF)]
            + [(f"{p.label} (Hugging Face Hub)", f"preset:{i}") for i, p in enumerate(PRESETS)])


def pair_keys() -> list[str]:
    """Every pair key, in the selector's order."""
    return [key for _, key in pair_choices()]


@dataclass
class Pair:
    key: str
    target: LoadedModel
    draft_model: LoadedModel | None      # None for the n-gram drafter
    meta: dict = field(default_factory=dict)

    def drafter(self) -> Any:
        """A fresh drafter for one run (drafters keep per-run state such as a KV cache)."""
        if self.draft_model is None:
            return NGramDrafter()
        return model_drafter(self.draft_model.model, name="self" if self.draft_model is self.target else (
            SHIPPED_PAIRS.get(self.key, "model")))

    def locks(self) -> list[LoadedModel]:
        """The models to lock for a run, each once, in a fixed order (no deadlock between two pairs)."""
        models = {m.key: m for m in (self.target, self.draft_model) if m is not None}
        return [models[k] for k in sorted(models)]


def resolve_pair(pool: Pool, key: str) -> Pair:
    """Load (or fetch from the pool) the models of a pair. Raises ValueError / RuntimeError with a
    message fit for the page (unknown pair, download failed, incompatible tokenizers)."""
    if key == PAIR_NGRAM:
        t = pool.get("bundled")
        return Pair(key, t, None, {"target": t.label, "draft": "n-gram prompt lookup", "pair": key})
    if isinstance(key, str) and key in SHIPPED_PAIRS:
        t = pool.get("bundled")
        name = SHIPPED_PAIRS[key]
        draft = shipped_draft_for(name, t.model)   # DraftFilesError (a RuntimeError) names the file and the fix
        dm = LoadedModel(f"bundled|{name}-draft", SHIPPED[name], draft, t.tokenizer, FairLock())
        return Pair(key, t, dm, {"target": t.label, "draft": SHIPPED[name], "pair": key})
    if key == PAIR_SELF:
        t = pool.get("bundled")
        return Pair(key, t, t, {"target": t.label, "draft": f"{t.label} (the same model)", "pair": key})
    if isinstance(key, str) and key.startswith("preset:") and key[7:].isdigit() and int(key[7:]) < len(PRESETS):
        preset = PRESETS[int(key[7:])]
        t = pool.get(preset.target)
        d = pool.get(preset.draft)
        try:
            check_tokenizer_compat(t.tokenizer, d.tokenizer)
        except ValueError as e:
            raise ValueError(f"{preset.label}: the draft and target tokenizers differ ({e})") from e
        return Pair(key, t, d, {"target": t.label, "draft": d.label, "pair": key})
    raise ValueError(f"unknown model pair {key!r:.80}")


def pair_label(key: str) -> str:
    """The selector's label of a pair key (the key itself when unknown)."""
    if not isinstance(key, str):
        return f"{key!r:.80}"
    return dict((v, k) for k, v in pair_choices()).get(key, key)


# prompts the Draft comparison and K sweep tabs open with: copying, where every kind of draft has a chance
COMPARE_PROMPTS = (
    "Repeat this sentence exactly, twice: The quick brown fox jumps over the lazy dog near the old stone bridge.",
    "Count from 1 to 30, separated by commas.",
    "Copy this list exactly: apples, bananas, cherries, dates, elderberries, figs, grapes, honeydew.",
)


__all__ = ["PAIR_NGRAM", "PAIR_SELF", "PAIR_TRAINED", "PAIR_FEATURE", "SHIPPED_PAIRS", "DEFAULT_PAIR",
           "EXTRACTIVE_PROMPTS", "OPEN_PROMPTS", "DEFAULT_PROMPT", "Pool", "Pair", "pair_choices", "pair_keys",
           "resolve_pair", "pair_label", "COMPARE_PROMPTS"]
