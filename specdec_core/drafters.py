"""Drafters: whatever proposes the K tokens the target then verifies.

The protocol is small on purpose (``Drafter`` below):
- ``start(prompt_ids)`` once per generation (a model drafter only resets its KV cache: it fills it on its
  first draft, so a run whose K policy never drafts never pays for it);
- ``propose(ids, k, policy)`` returns up to k tokens and, for each, the warped distribution q it was
  drawn from (``None`` = a point mass on the token, as for the n-gram drafter);
- ``rollback(valid_len)`` tells it that only ``ids[:valid_len]`` survived verification, so it can crop
  its cache instead of starting over. The next ``propose`` gets the full sequence and absorbs the
  tokens it has not seen yet (the resampled or bonus token) in the same forward as its first draft;
  more than two unseen tokens (its prompt, or what was emitted while it sat out K = 0 iterations) get a
  forward of their own first, timed apart as the proposal's ``catchup_ms``.
- ``outlook(ids)`` (optional) says, for free, what the next proposal will be like (``DraftOutlook``).
A drafter that reads the target's features (``feature_draft.FeatureDrafter``) also sets
``reads_features = True``; the engine then calls ``observe_features(start, features)`` with the
target's post-norm last hidden states after the prefill and after every verify forward, before the
rollback (so the rows past the accepted prefix are dropped by it).
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch

from .bugs import NO_BUGS, InjectedBugs
from .sampling import sample, warp_logits
from .timing import now_ms


@dataclass
class DraftPolicy:
    """How drafts are drawn: the run's warping, its generator, and any injected bugs."""
    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None
    eos_token_id: int | None = None
    bugs: InjectedBugs = NO_BUGS
    raw_probs: bool = True      # also return the unwarped q (display only; full traces want it)
    confidence_stop: float = 0.0  # stop after a draft whose ``chain_confidence`` falls below this (0 = never)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Proposal:
    tokens: list[int]                     # up to k drafted token ids
    draft_probs: torch.Tensor | None      # (len(tokens), V) warped q each token was drawn from; None = point mass
    raw_probs: torch.Tensor | None = None  # (len(tokens), V) unwarped softmax, for display only
    forward_ms: list[float] = field(default_factory=list)  # one entry per draft forward / lookup
    forwards: int = 0                     # model forwards actually run (the catch-up included)
    catchup_ms: float = 0.0               # a forward over > 2 unseen tokens before the first draft step
    stop: str = ""                        # why fewer than k drafts, in one line ("no n-gram match"); "" = not said


@dataclass(frozen=True)
class DraftOutlook:
    """What a drafter can tell, for free, before it drafts (``outlook(ids)``, optional): the K policy
    prices the next iteration with it."""
    match_len: int | None = None   # prompt lookup: how many of the last tokens its source matches (0: none)
    ties: int | None = None        # prompt lookup: earlier occurrences that match as far back (1: unique)
    agreeing: int | None = None    # prompt lookup: how many of those ties continue with the token it drafts first
    available: int | None = None   # prompt lookup: tokens its source offers after the match
    unseen: int | None = None      # a draft model: tokens it must run over before it can draft
    copying: bool | None = None    # prompt lookup: the match reaches back past the first generated token (all
                                   # generated so far copies its source); None before any token or without start()
    to_eos: int | None = None      # prompt lookup: its source reaches the end-of-sequence token after this many
                                   # tokens (the EOS included: a copy that holds ends the run there); None: it
                                   # does not within MAX_MATCH tokens, or not told the token


@runtime_checkable
class Drafter(Protocol):
    name: str

    def start(self, prompt_ids: list[int]) -> int: ...          # returns forwards run (prefill)
    def propose(self, ids: list[int], k: int, policy: DraftPolicy) -> Proposal: ...
    def rollback(self, valid_len: int) -> None: ...


def outlook_of(drafter: Any) -> Callable[[list[int], int | None], DraftOutlook] | None:
    """The drafter's optional ``outlook``, as a function of (ids, end-of-sequence token id); None if it has
    none. An ``outlook(ids)`` without the ``eos_token_id`` keyword (a custom drafter) is called without it."""
    fn = getattr(drafter, "outlook", None)
    if not callable(fn):
        return None
    try:
        takes_eos = "eos_token_id" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_eos = False
    return (lambda ids, eos: fn(ids, eos_token_id=eos)) if takes_eos else (lambda ids, eos: fn(ids))


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


CATCHUP_MIN = 2   # unseen tokens a draft model's first step absorbs itself (the bonus and the last draft)


def with_catchup(prop: Proposal, catchup_ms: float) -> Proposal:
    """``prop`` with a separate catch-up forward of ``catchup_ms`` (0: none) counted in."""
    if catchup_ms > 0:
        prop.catchup_ms, prop.forwards = catchup_ms, prop.forwards + 1
    return prop


def model_drafter(model: torch.nn.Module, name: str | None = None) -> "Drafter":
    """The drafter for a draft model: a ``ModelDrafter`` for a causal LM; a draft that needs more than
    tokens (the feature-reading draft) brings its own through ``make_drafter(name)``."""
    make = getattr(model, "make_drafter", None)
    if callable(make):
        return make(name) if name else make()
    return ModelDrafter(model, name=name or "model")


def draw_draft_token(logits: torch.Tensor, policy: DraftPolicy) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The drafted token and the warped q it was drawn from (None when greedy: q is the point mass on
    the argmax, and no (V,) one-hot is built). Injected bugs change only how the token is drawn."""
    if policy.greedy:
        return logits.argmax(-1), None
    q = warp_logits(logits, policy.temperature, policy.top_k, policy.top_p)
    bugs = policy.bugs
    if bugs.greedy_draft_ratio_rule:
        return logits.argmax(-1), q
    if bugs.draft_temperature is not None:
        return sample(warp_logits(logits, bugs.draft_temperature, policy.top_k, policy.top_p), policy.generator), q
    return sample(q, policy.generator), q


def chain_confidence(chain: float, logits: torch.Tensor) -> float:
    """The draft's own estimate that its drafts so far AND the next one are all accepted: the running
    product of its top unwarped probability at each step. The draft's top probability tracks how often
    the target accepts its token closely (docs/trained-drafts.md, "The confidence stop"), so the product is a
    cheap forecast of the chain surviving verification. It reads q only, never p, so stopping on it leaves
    the output distribution exact (it decides only how many drafts are offered, from the draft's side)."""
    return chain * float(logits.float().softmax(-1).max())


def proposal_from_steps(step: Callable[[int, torch.Tensor | None], torch.Tensor], k: int, policy: DraftPolicy,
                        device: torch.device, t0: float | None = None) -> Proposal:
    """Up to k drafts, one ``step(i, previous_token)`` each (it returns the (V,) draft logits; the previous
    token is None for the first). Stops after EOS, and after a draft whose ``chain_confidence`` is below
    ``policy.confidence_stop``: that draft is still offered (its forward has run, and verifying one more
    token costs little), the next ones are not drafted. As transformers' assistant confidence threshold
    does. ``t0``: when the first step's clock started, if earlier."""
    tokens: list[torch.Tensor] = []
    qs, raws, times = [], [], []
    prev = None
    chain = 1.0
    stop = ""
    for i in range(k):
        t_start = t0 if (i == 0 and t0 is not None) else now_ms(device)
        logits = step(i, prev)
        tok, q = draw_draft_token(logits, policy)
        if q is not None:
            qs.append(q)
        times.append(now_ms(device) - t_start)
        tokens.append(tok)
        raws.append(logits)
        prev = tok
        if policy.eos_token_id is not None and int(tok) == policy.eos_token_id:
            stop = "the draft drew the end-of-sequence token" if i < k - 1 else ""
            break
        if policy.confidence_stop > 0 and i < k - 1:
            chain = chain_confidence(chain, logits)
            if chain < policy.confidence_stop:
                which = "draft 1 is" if i == 0 else f"drafts 1–{i + 1} are all"
                stop = (f"the draft's confidence that {which} accepted, {chain:.2f}, fell below the confidence "
                        f"stop {policy.confidence_stop:g}")
                break
    if not tokens:                                   # k <= 0
        return Proposal([], None)
    draft_probs = torch.stack(qs) if qs else None
    raw = None
    if policy.raw_probs:  # at temperature 1 without top-k/top-p, q already is the plain softmax
        plain = policy.temperature == 1 and policy.top_k == 0 and policy.top_p >= 1.0
        raw = draft_probs if (plain and draft_probs is not None) else torch.stack(raws).float().softmax(-1)
    return Proposal(torch.stack(tokens).tolist(), draft_probs, raw, times, len(times), stop=stop)


class NGramDrafter:
    """Prompt lookup: find an earlier occurrence of the sequence's last n tokens (n from ``max_ngram``
    down to ``min_ngram``) in prompt + generated text and propose the tokens that followed it. Of several
    occurrences it takes the one whose match reaches furthest back (a copy keeps following its source
    rather than jumping to another place with the same last few tokens), the most recent among equals.
    q is a point mass, so alpha = p(x) and the residual is p with x removed."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = "ngram"
        self._match: tuple[tuple, Match] | None = None   # (key of ids, its match)
        self._prompt_len: int | None = None

    def fresh(self) -> "NGramDrafter":
        """The same lookup with a state of its own (runs side by side need one each)."""
        return NGramDrafter(self.max_ngram, self.min_ngram)

    def start(self, prompt_ids: list[int]) -> int:
        self._match = None
        self._prompt_len = len(prompt_ids)
        return 0

    def _find(self, ids: list[int]) -> Match:
        key = (len(ids), tuple(ids[-8:]))        # outlook and propose of one iteration share the lookup
        if self._match is None or self._match[0] != key:
            self._match = (key, find_match(np.asarray(ids), self.max_ngram, self.min_ngram))
        return self._match[1]

    def outlook(self, ids: list[int], eos_token_id: int | None = None) -> DraftOutlook:
        m = self._find(ids)
        if not m.length:
            return DraftOutlook(match_len=0, available=0, ties=m.ties, agreeing=m.agreeing)
        generated = len(ids) - self._prompt_len if self._prompt_len is not None else 0
        source = ids[m.start:m.start + MAX_MATCH]
        return DraftOutlook(match_len=m.length, available=len(ids) - m.start, ties=m.ties, agreeing=m.agreeing,
                            copying=m.length > generated if generated > 0 else None,
                            to_eos=source.index(eos_token_id) + 1 if eos_token_id in source else None)

    def propose(self, ids: list[int], k: int, policy: DraftPolicy) -> Proposal:
        t0 = now_ms(torch.device("cpu"))
        m = self._find(ids)
        tokens = ids[m.start:m.start + k] if m.length and k > 0 else []
        stop = "no n-gram match" if not m.length else (
            f"the match's source has only {len(tokens)} token(s) after it" if len(tokens) < k else "")
        if policy.eos_token_id is not None and policy.eos_token_id in tokens[:-1]:
            tokens = tokens[: tokens.index(policy.eos_token_id) + 1]
            stop = "the copy reached the end-of-sequence token"
        return Proposal(tokens, None, None, [now_ms(torch.device("cpu")) - t0], 0, stop=stop if k > 0 else "")

    def rollback(self, valid_len: int) -> None:
        pass


MAX_MATCH = 64   # how far back a prompt-lookup match is followed (and the longest match length reported)


class Match(NamedTuple):
    """Prompt lookup's match (``find_match``)."""
    start: int         # where the continuation it proposes starts (-1: no match)
    length: int        # how many of the sequence's last tokens it matches (0: none)
    ties: int          # earlier occurrences that match as far back
    agreeing: int      # how many of those ties are followed by the token at ``start``


NO_MATCH = Match(-1, 0, 0, 0)


def find_match(ids: np.ndarray, max_ngram: int, min_ngram: int = 1) -> Match:
    """Where prompt lookup's continuation starts, the length of its match and how many occurrences tie
    with it: the earlier occurrence of the last n tokens (longest n first) whose agreement with the
    sequence's end reaches furthest back (counted up to ``MAX_MATCH`` tokens), the most recent among
    equals; and how many of the occurrences that tie with it continue the same way."""
    n_ids = len(ids)
    for n in range(min(max_ngram, n_ids - 1), min_ngram - 1, -1):
        pattern = ids[n_ids - n:]
        # windows starting at 0 .. n_ids-n-1 (the trailing occurrence itself is excluded)
        windows = np.lib.stride_tricks.sliding_window_view(ids[:n_ids - 1], n)
        hits = np.flatnonzero((windows == pattern).all(axis=1))
        if not len(hits):
            continue
        back = np.arange(1, MAX_MATCH - n + 1)                     # compare ids[h - b] with ids[n_ids - n - b]
        before = hits[:, None] - back[None, :]
        ref_at = n_ids - n - back
        ok = (before >= 0) & (ref_at >= 0)[None, :]
        same = ok & (ids[np.clip(before, 0, None)] == ids[np.clip(ref_at, 0, None)][None, :])
        extra = np.cumprod(same, axis=1).sum(axis=1)               # tokens of agreement beyond the n-gram
        best = len(hits) - 1 - int(np.argmax(extra[::-1]))         # the furthest-reaching, most recent of equals
        start = int(hits[best]) + n
        tied = hits[extra == extra[best]]
        agreeing = int((ids[tied + n] == ids[start]).sum())        # every hit is followed by a token (hits < n_ids - n)
        return Match(start, n + int(extra[best]), len(tied), agreeing)
    return NO_MATCH


def lookup_ngram(ids: np.ndarray, k: int, max_ngram: int, min_ngram: int = 1) -> list[int]:
    """Up to k tokens of prompt lookup's continuation (``find_match``)."""
    if k <= 0:
        return []
    m = find_match(ids, max_ngram, min_ngram)
    return ids[m.start:m.start + k].tolist() if m.length else []


def new_kv_cache(config: object) -> object:
    """A transformers ``DynamicCache`` whose full-attention layers append in place (``GrowingLayer``):
    each forward copies only its new keys/values instead of re-concatenating the whole cache, and a
    rollback only moves the end. Same tensors, same values, same API (``crop`` takes a negative n)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer
    cache = DynamicCache(config=config)
    cache.layers = [_growing_layer_class()() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


@functools.cache
def _growing_layer_class() -> type:
    """Built on first use so that importing the engine does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """keys/values are views of the first ``length`` rows of a buffer with spare room (doubled when
        full). Private to this engine: beam-search reordering and offloading are not supported."""
        _layer_type = None  # never registered as transformers' default layer

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            super().lazy_initialization(key_states, value_states)
            self._kbuf = self._vbuf = None
            self._len = 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self._len + key_states.shape[-2]
            if self._kbuf is None or end > self._kbuf.shape[-2]:
                self._kbuf, self._vbuf = self._grown(self._kbuf, key_states, end), self._grown(self._vbuf, value_states, end)
            self._kbuf[..., self._len:end, :].copy_(key_states)
            self._vbuf[..., self._len:end, :].copy_(value_states)
            self._len = end
            self.keys, self.values = self._kbuf[..., :end, :], self._vbuf[..., :end, :]
            return self.keys, self.values

        def _grown(self, buf: torch.Tensor | None, states: torch.Tensor, needed: int) -> torch.Tensor:
            new = states.new_empty((*states.shape[:-2], max(2 * needed, 64), states.shape[-1]))
            if buf is not None and self._len:
                new[..., :self._len, :].copy_(buf[..., :self._len, :])
            return new

        def crop(self, tokens_to_remove: int) -> None:
            super().crop(tokens_to_remove)         # checks the sign, shortens the views
            if self.is_initialized:
                self._len = self.keys.shape[-2]

        def reset(self) -> None:
            super().reset()
            self._kbuf = self._vbuf = None
            self._len = 0

    return GrowingLayer


def _vocab_size(model: torch.nn.Module) -> int:
    return int(model.get_output_embeddings().weight.shape[0])
