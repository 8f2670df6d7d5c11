"""The verification step under coupled sampling, as pure functions (the standard rule's is ``verify.verify``).

With noise E_t keyed by absolute position (``coupling``), the target's token at drafted position i is
y_i = argmax(p_i / E_i) = argmax(log p_i + G_i), a sample from p_i. The rule (Daliri, Musco & Suresh 2024):
 - left to right, draft x_i is accepted iff x_i == y_i;
 - at the first mismatch, y_i is emitted and the iteration ends;
 - if all n drafts match, the bonus is y_{n+1} from the last p.
Every emitted token is the target's own keyed sample, so the output is exactly distributed as the target's and
equals the target-only run with the same keyed noise, whatever the drafter proposed. Warping (temperature,
top-k, top-p) acts on p as in the standard rule; greedy (temperature 0) is the standard greedy rule (argmax).
No uniforms and no residual: a record's ``u`` is None, and the token at a mismatch has no residual probability.

Pure: the noise comes in as a function ``noise(offset)`` -> E (V,) on the logits' device for the position
``offset`` places after the first drafted one (the engine's reads its run's sampler; tests pass hand-built
tables). y is computed only for the rows the walk reads (``CoupledDraws``): a row's noise costs about 0.7 ms
on the bundled model's vocabulary, so a long prompt-lookup chain rejected early does not pay for the rest.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..sampling.coupled import coupled_accept_prob, gumbel_argmax, total_variation
from ..drafters.base import Proposal
from ..sampling import Warping
from .verify import Verdict, _index, _top, _to_host, _verify_greedy

Noise = Callable[[int], torch.Tensor]   # offset from the first drafted position -> E (V,)


class CoupledDraws:
    """y at each row of p (R, V): argmax(p[row] / noise(offsets[row])), computed when a row is first read."""

    def __init__(self, p: torch.Tensor, noise: Noise, offsets: Sequence[int]) -> None:
        self.p, self.noise, self.offsets = p, noise, list(offsets)
        self.drawn: dict[int, int] = {}

    def __getitem__(self, row: int) -> int:
        if row not in self.drawn:
            self.drawn[row] = int(gumbel_argmax(self.p[row], self.noise(self.offsets[row])))
        return self.drawn[row]


def first_mismatch(drafts: Sequence[int], draws: CoupledDraws | Sequence[int]) -> int:
    """Index of the first draft that differs from the target's draw at its row, or len(drafts)."""
    return next((i for i, x in enumerate(drafts) if draws[i] != x), len(drafts))


def verify_coupled(logits: torch.Tensor, proposal: Proposal, warping: Warping, noise: Noise,
                   bugs: InjectedBugs = NO_BUGS, show: bool = False) -> Verdict:
    """Accept the drafts that equal the target's keyed samples, then emit the target's sample where they stop
    (module docstring). ``logits`` (n + 1, V) and ``proposal`` as for ``verify``. ``show``: also the unwarped
    p(x), q(x) and, at a mismatch, the top ``TOP_N`` of p and q there (no residual). Of the injected bugs only
    ``drop_bonus`` acts here (there is no residual to get wrong)."""
    if warping.greedy:
        return _verify_greedy(logits, proposal, bugs, show)
    drafts, q = proposal.tokens, proposal.draft_probs
    n = len(drafts)
    p = warping.probs(logits)                                           # (n+1, V)
    y = CoupledDraws(p, noise, range(n + 1))
    n_acc = first_mismatch(drafts, y)
    token = y[n_acc]
    tested = min(n_acc + 1, n)
    rows, x = _index(drafts, logits.device)
    p_x = p[rows, x]
    q_x = q[rows, x] if q is not None else torch.ones(n, device=logits.device)
    if q is not None:
        tv, c_alpha = total_variation(p[:tested], q[:tested]), coupled_accept_prob(p[:tested], q[:tested], x[:tested])
    else:   # a point mass on x: P(y = x) = p(x), TV = 1 - p(x)
        tv, c_alpha = 1 - p_x[:tested], p_x[:tested]
    rejected = n_acc < n
    token_q = (q[n_acc, token] if q is not None else torch.zeros((), device=logits.device)) if rejected else None
    raw_p = raw_q = None
    if show:
        raw_p = p_x if warping.plain else logits[:n].float().softmax(-1)[rows, x]
        raw_q = proposal.raw_probs[rows, x] if proposal.raw_probs is not None else None
    h = _to_host(p_x, q_x, tv, c_alpha, p[n_acc, token], token_q, raw_p, raw_q)
    alpha = [min(1.0, a / b) if b > 0 else float(a > 0) for a, b in zip(h[0], h[1])]
    tops: dict = {}
    if rejected and show:
        tops = dict(p_top=_top(p[n_acc]), q_top=_top(q[n_acc]) if q is not None else [(drafts[n_acc], 1.0)])
    keeps = not (bugs.drop_bonus and n_acc == n > 0)
    return Verdict(n_accepted=n_acc, token=token, emitted=drafts[:n_acc] + ([token] if keeps else []),
                   p=h[0], q=h[1], alpha=alpha, u=None, token_p=h[4][0], token_residual_prob=None,
                   p_raw=h[6], q_raw=h[7], drawn_from=None, target_tokens=[y[i] for i in range(tested)],
                   coupled_alpha=h[3], tv=h[2], token_q=None if h[5] is None else h[5][0], **tops)
