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
- ``propose_tree(ids, n_nodes, top_k, policy, max_depth)`` (optional) proposes a token tree instead
  (``tree.TreeProposal``), and ``rollback_tree(valid_len, path)`` then keeps only the accepted path.
A drafter that reads the target's features (``feature_draft.FeatureDrafter``) also sets
``reads_features = True``; the engine then calls ``observe_features(start, features)`` with the
target's post-norm last hidden states after the prefill and after every verify forward, before the
rollback (so the rows past the accepted prefix are dropped by it).
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..sampling.coupled import Sampler
from ..sampling import sample, warp_logits
from ..timing import now_ms


@dataclass
class DraftPolicy:
    """How drafts are drawn: the run's warping, its generator or sampler, and any injected bugs.

    A sampled draft token is drawn with ``draw(q, offset)``: through the run's ``sampler`` at absolute position
    ``position + offset`` (``position``: where the proposal's first token goes, set by the engine with ``at``),
    so a coupled run drafts with the same keyed noise the target's tokens are drawn with, whatever the drafter
    (``coupling``); without a sampler, from ``generator``."""
    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None
    eos_token_id: int | None = None
    bugs: InjectedBugs = NO_BUGS
    raw_probs: bool = True      # also return the unwarped q (display only; full traces want it)
    confidence_stop: float = 0.0  # stop after a draft whose ``chain_confidence`` falls below this (0 = never)
    sampler: Sampler | None = None  # None: draw from ``generator`` (the standard sampler)
    position: int = 0           # absolute position (index in prompt + generated) of the proposal's first token

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def coupled(self) -> bool:
        """Sampled drafts are drawn with the coupled sampler's keyed noise."""
        return self.sampler is not None and self.sampler.coupled and not self.greedy

    def at(self, position: int) -> "DraftPolicy":
        """This policy for a proposal whose first token goes at absolute ``position``."""
        return dataclasses.replace(self, position=position)

    def draw(self, probs: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """A token per row of ``probs`` (..., V) for the token ``offset`` places after the proposal's first."""
        if self.sampler is None:
            return sample(probs, self.generator)
        return self.sampler.draw(probs, self.position + offset)


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


CATCHUP_MIN = 2   # unseen tokens a draft model's first step absorbs itself (the bonus and the last draft)


P = TypeVar("P")


def with_catchup(prop: P, catchup_ms: float) -> P:
    """``prop`` (a Proposal or a TreeProposal) with a separate catch-up forward of ``catchup_ms`` (0: none) counted in."""
    if catchup_ms > 0:
        prop.catchup_ms, prop.forwards = catchup_ms, prop.forwards + 1
    return prop


def draw_draft_token(logits: torch.Tensor, policy: DraftPolicy, offset: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The drafted token (``offset`` places after the proposal's first) and the warped q it was drawn from (None
    when greedy: q is the point mass on the argmax, and no (V,) one-hot is built). Injected bugs change only how
    the token is drawn."""
    if policy.greedy:
        return logits.argmax(-1), None
    q = warp_logits(logits, policy.temperature, policy.top_k, policy.top_p)
    bugs = policy.bugs
    if bugs.greedy_draft_ratio_rule:
        return logits.argmax(-1), q
    if bugs.draft_temperature is not None:
        return policy.draw(warp_logits(logits, bugs.draft_temperature, policy.top_k, policy.top_p), offset), q
    return policy.draw(q, offset), q


def chain_confidence(chain: float, logits: torch.Tensor) -> float:
    """The draft's own estimate that its drafts so far AND the next one are all accepted: the running
    product of its top unwarped probability at each step. The draft's top probability tracks how often
    the target accepts its token closely (docs/trained-drafts.md, "The confidence stop"), so the product is a
    cheap forecast of the chain surviving verification. It reads q only, never p, so stopping on it leaves
    the output distribution exact (it decides only how many drafts are offered, from the draft's side)."""
    return chain * float(logits.float().softmax(-1).max())


class DraftChain:
    """One sequence's drafts as they are drawn, one step at a time (``add``): the tokens, the warped q each was
    drawn from, the draft's logits (display) and each step's ms (``times``, the caller's clock). Done after k
    drafts, after EOS, or after a draft whose ``chain_confidence`` is below ``policy.confidence_stop``: that
    draft is still offered (its forward has run, and verifying one more token costs little), the next ones are
    not drafted, as transformers' assistant confidence threshold does. ``proposal_from_steps`` drives one chain;
    a batch drives one per row with a forward per step for all of them (``batch.drafters``)."""

    def __init__(self, k: int, policy: DraftPolicy) -> None:
        self.k, self.policy = k, policy
        self.tokens: list[torch.Tensor] = []
        self.qs: list[torch.Tensor] = []
        self.raws: list[torch.Tensor] = []
        self.times: list[float] = []
        self.confidence = 1.0
        self.stop = ""
        self.done = k <= 0

    def add(self, logits: torch.Tensor) -> torch.Tensor:
        """Draw the next draft from the draft's (V,) ``logits`` and record it; returns the token."""
        policy, i = self.policy, len(self.tokens)
        tok, q = draw_draft_token(logits, policy, i)
        if q is not None:
            self.qs.append(q)
        self.tokens.append(tok)
        self.raws.append(logits)
        last = i == self.k - 1
        if policy.eos_token_id is not None and int(tok) == policy.eos_token_id:
            self.stop = "" if last else "the draft drew the end-of-sequence token"
            self.done = True
        elif policy.confidence_stop > 0 and not last:
            self.confidence = chain_confidence(self.confidence, logits)
            if self.confidence < policy.confidence_stop:
                which = "draft 1 is" if i == 0 else f"drafts 1–{i + 1} are all"
                self.stop = (f"the draft's confidence that {which} accepted, {self.confidence:.2f}, fell below the "
                             f"confidence stop {policy.confidence_stop:g}")
                self.done = True
        self.done = self.done or last
        return tok

    def proposal(self) -> Proposal:
        if not self.tokens:                          # k <= 0
            return Proposal([], None)
        policy = self.policy
        draft_probs = torch.stack(self.qs) if self.qs else None
        raw = None
        if policy.raw_probs:  # at temperature 1 without top-k/top-p, q already is the plain softmax
            plain = policy.temperature == 1 and policy.top_k == 0 and policy.top_p >= 1.0
            raw = draft_probs if (plain and draft_probs is not None) else torch.stack(self.raws).float().softmax(-1)
        return Proposal(torch.stack(self.tokens).tolist(), draft_probs, raw, self.times, len(self.times),
                        stop=self.stop)


def proposal_from_steps(step: Callable[[int, torch.Tensor | None], torch.Tensor], k: int, policy: DraftPolicy,
                        device: torch.device, t0: float | None = None) -> Proposal:
    """Up to k drafts (``DraftChain``), one ``step(i, previous_token)`` each (it returns the (V,) draft logits;
    the previous token is None for the first). ``t0``: when the first step's clock started, if earlier."""
    chain = DraftChain(k, policy)
    prev = None
    while not chain.done:
        t_start = t0 if (not chain.tokens and t0 is not None) else now_ms(device)
        prev = chain.add(step(len(chain.tokens), prev))
        chain.times.append(now_ms(device) - t_start)
    return chain.proposal()
