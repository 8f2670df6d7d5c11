"""Coupled (drafter-invariant) sampling: the noise keyed by absolute position, and the samplers that draw with it.

Daliri, Musco & Suresh 2024 ("Coupling without Communication and Drafter-Invariant Speculative Decoding"). At
each absolute position t of the sequence (its index in prompt + generated tokens, so it does not depend on how
iterations are cut) the noise is E_t ∈ R^V, i.i.d. standard exponentials from a generator keyed by (seed, t);
G_t = −log E_t is standard Gumbel noise. The target's token is y_t = argmax(log p_t + G_t) = argmax(p_t / E_t),
a sample from p_t (the Gumbel-max trick); the draft proposes x_t = argmax(q_t / E_t), a sample from q_t. Every
emitted token is some y_t, so a speculative run equals the target-only run with the same keyed noise, whatever
the drafter, K or tree (docs/coupled-sampling.md has the proof and the measured price in acceptance).
Notation: p = target, q = draft.

The noise is made on the CPU, by a fresh ``torch.Generator`` (Mersenne Twister) seeded with a 64-bit BLAKE2b
hash of the key, as float64 uniforms u (so a zero, which would shut a token out, has probability 2⁻⁵³ per
entry) turned into E = −log u, stored as float32 and moved to the run's device: the same seed gives the same
noise on every device. Cost per position over the bundled model's 49,152-token vocabulary on this project's
2-core CPU: about 0.7 ms (docs/coupled-sampling.md), against 0.05 ms for a standard inverse-CDF draw; a run's
sampler keeps the current iteration's rows, so the verify reuses what the draft made.

Samplers (``Sampler``): ``StandardSampler`` draws from the run's generator (``sampling.sample``);
``CoupledSampler`` draws with the keyed noise. Each run owns its sampler (no global generator: runs in
threads do not interfere). The injected bug ``coupled_noise_by_iteration`` keys the noise by (seed, iteration,
offset in the iteration) instead: still a fresh draw at every position, so still exact, but no longer
invariant (the text depends on where the iterations were cut).
"""
from __future__ import annotations

import hashlib
from typing import Protocol, runtime_checkable

import torch

from ..bugs import NO_BUGS, InjectedBugs
from .standard import sample

NOISE_CACHE_ROWS = 66   # rows a coupled sampler keeps: a chain of up to 64 drafts and its bonus, and one spare


def noise_key(seed: int, *parts: int) -> int:
    """A 64-bit key for the noise generator from (seed, *parts): BLAKE2b over their 8-byte little-endian forms
    (the number of parts is part of the input, so (s, t) and (s, i, o) never collide by construction)."""
    data = b"".join(int(x).to_bytes(8, "little", signed=True) for x in (seed, *parts))
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=b"specdec-noise").digest(), "little")


def keyed_exponentials(key: int, vocab_size: int) -> torch.Tensor:
    """(V,) float32 on the CPU: E_i = −log u_i for float64 uniforms u_i from a generator seeded with ``key``."""
    g = torch.Generator().manual_seed(key)
    return torch.rand(vocab_size, generator=g, dtype=torch.float64).log_().neg_().float()


def gumbel_argmax(probs: torch.Tensor, exps: torch.Tensor) -> torch.Tensor:
    """argmax_i probs_i / E_i over the last axis = argmax_i (log probs_i + G_i) with G = −log E (Gumbel): a
    sample from probs (any mass, normalised or not) for exponential noise E. A token of zero mass never wins."""
    return (probs / exps).argmax(-1)


def total_variation(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """TV(p, q) = ½ Σ |p − q| per row. The standard rule accepts a draft with probability 1 − TV."""
    return 0.5 * (target_probs - draft_probs).abs().sum(-1)


def coupled_accept_prob(target_probs: torch.Tensor, draft_probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """P(y = x | x drafted) per row under the Gumbel coupling: 1 / Σ_j max(q_j, p_j q(x) / p(x)) (0 where
    p(x) = 0). Why: x = y = i iff E_j ≥ E_i max(q_j / q_i, p_j / p_i) for all j, which given E_i = e has
    probability exp(−e Σ_{j≠i} max(·)); integrating over e ~ Exp(1) gives P(x = y = i) = 1 / Σ_j max(q_j / q_i,
    p_j / p_i); divide by q_i. At most min(1, p(x)/q(x)) (the standard rule's alpha); its mean over x ~ q is the
    coupled acceptance, at least (1 − TV) / (1 + TV). ``tokens`` (n,): the drafted token of each row."""
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    p_x, q_x = target_probs[rows, tokens], draft_probs[rows, tokens]
    scale = (q_x / p_x.clamp_min(1e-30))[:, None]
    total = torch.maximum(draft_probs, target_probs * scale).sum(-1)
    return torch.where(p_x > 0, 1.0 / total.clamp_min(1e-30), torch.zeros_like(total)).clamp(max=1.0)


def coupling_floor(tv: float) -> float:
    """The paper's lower bound on the coupled acceptance at a position with TV(p, q) = tv: (1 − tv) / (1 + tv)."""
    return (1.0 - tv) / (1.0 + tv)


@runtime_checkable
class Sampler(Protocol):
    """How a run draws a sampled token at an absolute position (``DraftPolicy.draw``, the baseline)."""
    coupled: bool

    def start_iteration(self, index: int, start_len: int) -> None: ...
    def draw(self, probs: torch.Tensor, position: int) -> torch.Tensor: ...


class StandardSampler:
    """Draws by inverse CDF from the run's generator; the position is not used (the stream's order is)."""
    coupled = False

    def __init__(self, generator: torch.Generator | None) -> None:
        self.generator = generator

    def start_iteration(self, index: int, start_len: int) -> None:
        pass

    def draw(self, probs: torch.Tensor, position: int) -> torch.Tensor:
        return sample(probs, self.generator)


class CoupledSampler:
    """Draws with the noise keyed by (seed, absolute position): ``draw(probs, t)`` = argmax(probs / E_t), every
    row of ``probs`` with the same E_t. Keeps the noise rows of the current iteration (``start_iteration`` drops
    them), so the verify reuses the draft's. ``by_iteration``: the injected bug's keying (module docstring)."""
    coupled = True

    def __init__(self, seed: int, by_iteration: bool = False) -> None:
        self.seed = int(seed)
        self.by_iteration = by_iteration
        self._iteration = (0, 0)
        self._cache: dict[tuple[int, int, str], torch.Tensor] = {}

    def start_iteration(self, index: int, start_len: int) -> None:
        """A new iteration (its index, and the sequence length it starts from): only the bug's keying reads them."""
        self._iteration = (index, start_len)
        self._cache.clear()

    def key(self, position: int) -> int:
        if self.by_iteration:
            index, start = self._iteration
            return noise_key(self.seed, index, position - start)
        return noise_key(self.seed, position)

    def noise(self, position: int, vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """E_t (V,) float32 on ``device`` for absolute position t."""
        at = (position, vocab_size, str(device))
        e = self._cache.get(at)
        if e is None:
            e = keyed_exponentials(self.key(position), vocab_size)
            if torch.device(device).type != "cpu":
                e = e.to(device)
            if len(self._cache) >= NOISE_CACHE_ROWS:
                del self._cache[next(iter(self._cache))]
            self._cache[at] = e
        return e

    def draw(self, probs: torch.Tensor, position: int) -> torch.Tensor:
        return gumbel_argmax(probs, self.noise(position, probs.shape[-1], probs.device))


def make_sampler(name: str, seed: int, generator: torch.Generator | None, bugs: InjectedBugs = NO_BUGS) -> Sampler:
    """The run's sampler for ``SpecConfig.sampler``; the ``coupled_noise_by_iteration`` bug keys by iteration."""
    if name == "coupled":
        return CoupledSampler(seed, by_iteration=bugs.coupled_noise_by_iteration)
    if name != "standard":
        raise ValueError(f"unknown sampler {name!r}; expected standard or coupled")
    return StandardSampler(generator)
