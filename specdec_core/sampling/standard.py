"""Sampling math for speculative decoding: pure tensor functions, no models, no caches.

Notation, used throughout the project: **p = target** distribution, **q = draft** distribution
(in code: ``target_probs`` / ``draft_probs``). Some write-ups swap the letters; this project never does.

The rule (Leviathan et al. 2023, Chen et al. 2023): a draft token x drawn from q is accepted with
probability alpha = min(1, p(x) / q(x)), i.e. iff u < alpha for u ~ U[0, 1). On the first rejection the
replacement is drawn from the residual norm(max(0, p - q)); if every draft is accepted, a bonus token is
drawn from the next target distribution. The emitted tokens are then distributed exactly as p.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def warp_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Logits (..., V) -> probabilities (..., V) in float32, warped like transformers' own warpers:
    temperature, then top-k, then top-p. ``temperature == 0`` is greedy: a one-hot at the argmax."""
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    scores = logits / temperature
    if top_k > 0:
        kth = torch.topk(scores, min(top_k, scores.shape[-1]), dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))  # ties with the k-th are kept
    if top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, dim=-1)  # ascending
        cumulative = sorted_scores.softmax(-1).cumsum(-1)
        remove_sorted = cumulative <= (1 - top_p)
        remove_sorted[..., -1] = False  # always keep the most likely token
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        scores = scores.masked_fill(remove, float("-inf"))
    return scores.softmax(-1)


@dataclass(frozen=True)
class Warping:
    """How a run turns logits into the distribution it samples from (the same for p and q)."""
    temperature: float           # 0 = greedy
    top_k: int = 0               # 0 = off
    top_p: float = 1.0           # 1.0 = off

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def plain(self) -> bool:
        """True when warping is the plain softmax (temperature 1, no top-k, no top-p): warped == unwarped."""
        return self.temperature == 1 and self.top_k == 0 and self.top_p >= 1.0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return warp_logits(logits, self.temperature, self.top_k, self.top_p)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` (..., V) -> (...,) long, by inverse-CDF sampling: u ~ U[0, 1) scaled
    to the row's mass, and the first token whose cumulative mass (float64) exceeds it. Token i is drawn
    with probability probs[i] / sum(probs); a token of zero mass never is (its interval is empty, and the
    draw is capped at the last token with mass). One uniform per row: over a 49,152-token vocabulary this
    takes about 0.05 ms on a 2-core CPU where ``torch.multinomial`` takes 0.78 ms, a cost paid by every
    sampled draft and every sampled target token."""
    rows = probs.reshape(-1, probs.shape[-1])
    u = torch.rand((rows.shape[0], 1), generator=generator, dtype=torch.float64, device=probs.device)
    return inverse_cdf(rows, u).reshape(probs.shape[:-1])


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``sample``'s draw for given uniforms: probs (R, V), u (R, 1) float64 in [0, 1) -> (R,) long."""
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1:].contiguous()
    drawn = torch.searchsorted(cdf, u * total, right=True)
    last = torch.searchsorted(cdf, total)                 # the first index reaching the total: the last with mass
    return torch.minimum(drawn, last)[:, 0]


def acceptance_probs(target_p: torch.Tensor, draft_q: torch.Tensor) -> torch.Tensor:
    """alpha = min(1, p(x) / q(x)) elementwise, for the drafted tokens' p(x), q(x). q(x) > 0 always for a
    token that was drawn from q; a zero is treated as certain acceptance only when p(x) > 0."""
    ratio = torch.where(draft_q > 0, target_p / draft_q.clamp_min(1e-30), (target_p > 0).float())
    return ratio.clamp(max=1.0)


def first_rejection(u: Sequence[float] | torch.Tensor, alpha: Sequence[float] | torch.Tensor) -> int:
    """Index of the first draft with u >= alpha (rejected: acceptance is u < alpha), or len(alpha) if all
    are accepted. The engine passes host lists (the values it already copied off the device)."""
    return next((i for i, (ui, ai) in enumerate(zip(u, alpha)) if ui >= ai), len(alpha))


def residual_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)). Zero mass only happens when p == q, where no rejection can occur; guard
    anyway by returning p."""
    residual = (target_probs - draft_probs).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp_min(1e-30), target_probs)


def point_mass(token_id: int, vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """q of a deterministic drafter (n-gram): all mass on the proposed token."""
    q = torch.zeros(vocab_size, device=device)
    q[token_id] = 1.0
    return q
