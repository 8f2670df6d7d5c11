"""The verification step of speculative sampling as one pure function, ``verify``.

The rule is speculative sampling as given by Leviathan et al. 2023 ("Fast Inference from Transformers
via Speculative Decoding", Algorithm 1) and Chen et al. 2023 ("Accelerating Large Language Model
Decoding with Speculative Sampling", Algorithm 2). With p_i the target's and q_i the draft's warped
distribution at drafted position i:
 - left to right, draft x_i is accepted iff u_i < alpha_i = min(1, p_i(x_i) / q_i(x_i)), u_i ~ U[0, 1);
 - at the first rejection, the replacement is drawn from the residual norm(max(0, p_i - q_i));
 - if all n drafts are accepted, a bonus token is drawn from p_{n+1}.
The emitted tokens are then distributed exactly as tokens drawn from the target one at a time
(tests/test_verify.py checks this by enumeration, to float64 precision). Greedy (temperature 0):
keep the drafts that agree with the target's argmax, then emit the argmax where they stop agreeing.

Pure: no model, no cache, no clock. It draws from the run's generator in a fixed order (n uniforms,
then one draw for the new token), which is what makes a seed's trace reproducible. Everything the
decision and the trace need is copied to the host in one transfer (one device sync); a sampled new
token and its display rows take one more.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..drafters.base import Proposal
from ..sampling import Warping, acceptance_probs, first_rejection, point_mass, residual_distribution, sample

TOP_N = 10   # rows of each distribution a full trace shows at a rejection

Top = list[tuple[int, float]]   # [(token id, probability), ...], most likely first, zero mass left out


@dataclass
class Decision:
    """How many drafts are accepted, given the uniforms, and the distribution the new token is drawn from."""
    n_accepted: int
    p: list[float]                       # per draft: warped p_i(x_i)
    q: list[float]                       # per draft: warped q_i(x_i) (1.0 for a point-mass proposal)
    alpha: list[float]                   # per draft: min(1, p/q)
    u: list[float]                       # per draft: the uniform it was tested with
    drawn_from: torch.Tensor             # (V,): the residual on a rejection, p_{n+1} when all were accepted
    residual: torch.Tensor | None        # the residual (None when all were accepted)
    q_row: torch.Tensor | None           # q at the rejected position (a point mass for a point-mass proposal)
    keeps_new_token: bool                # False only when the drop_bonus bug throws the bonus away
    p_raw: list[float] | None = None     # display: unwarped p(x), q(x)
    q_raw: list[float] | None = None

    @property
    def rejected(self) -> bool:
        return self.n_accepted < len(self.alpha)


@dataclass
class Verdict:
    """What one verification decided, as plain host values (tensors only where noted)."""
    n_accepted: int
    token: int                           # the resampled token (on a rejection) or the bonus token
    emitted: list[int]                   # the accepted drafts, then the token (unless drop_bonus dropped it)
    p: list[float]
    q: list[float]
    alpha: list[float]
    u: list[float] | None                # None when greedy
    token_p: float                       # warped p of the token at its position
    token_residual_prob: float | None    # its probability under the residual (1.0 when greedy; None for a bonus)
    p_raw: list[float] | None = None
    q_raw: list[float] | None = None
    drawn_from: torch.Tensor | None = None   # (V,) what the token was drawn from; None when greedy (argmax)
    residual_top: Top = field(default_factory=list)   # shown at a rejection (``show``): the residual,
    p_top: Top = field(default_factory=list)          # p and q at the rejected position, top TOP_N
    q_top: Top = field(default_factory=list)
    # coupled sampling only (``coupled_verify``; None otherwise), per tested draft:
    target_tokens: list[int] | None = None   # y, the target's Gumbel-max sample at the draft's position
    coupled_alpha: list[float] | None = None  # P(y = x | x drafted)
    tv: list[float] | None = None             # TV(p, q)
    token_q: float | None = None              # the draft's q of the token emitted at a mismatch

    @property
    def rejected(self) -> bool:
        return self.n_accepted < len(self.alpha)


def verify(logits: torch.Tensor, proposal: Proposal, warping: Warping, generator: torch.Generator | None,
           bugs: InjectedBugs = NO_BUGS, show: bool = False) -> Verdict:
    """Accept or reject the proposal's drafts and draw the next token (see the module docstring).

    ``logits`` (n + 1, V): the target's logits at the n drafted positions and the one after them.
    ``proposal``: the drafted tokens, the warped q each was drawn from (``draft_probs``; None = a point
    mass on the token, as for prompt lookup) and, for display, the unwarped q (``raw_probs``).
    ``show``: also return the display values (unwarped p(x) and q(x), and at a rejection the top
    ``TOP_N`` of the residual, p and q). Injected bugs: ``resample_from_p`` draws the replacement from p,
    ``drop_bonus`` leaves the bonus out of ``emitted`` (the other bugs act on how drafts are drawn)."""
    if warping.greedy:
        return _verify_greedy(logits, proposal, bugs, show)
    drafts = proposal.tokens
    n = len(drafts)
    p = warping.probs(logits)                                           # (n+1, V)
    u = torch.rand(n, generator=generator, device=logits.device)
    raw = (None, None)
    if show:   # at temperature 1 without top-k/top-p the warped p already is the unwarped one
        rows, d_idx = _index(drafts, logits.device)
        raw = (p[rows, d_idx] if warping.plain else logits[:n].float().softmax(-1)[rows, d_idx],
               proposal.raw_probs[rows, d_idx] if proposal.raw_probs is not None else None)
    d = decide(p, proposal, u, bugs, raw)
    shown_rows = [d.residual, p[d.n_accepted], d.q_row] if (d.rejected and show) else []
    new = sampled_to_host(sample(d.drawn_from, generator), p[d.n_accepted], d.residual, shown_rows)
    return Verdict(
        n_accepted=d.n_accepted, token=new.token,
        emitted=_emitted(drafts, d.n_accepted, new.token, d.keeps_new_token), p=d.p, q=d.q, alpha=d.alpha, u=d.u,
        token_p=new.p, token_residual_prob=new.residual_prob, p_raw=d.p_raw, q_raw=d.q_raw,
        drawn_from=d.drawn_from, **new.tops)


def decide(target_probs: torch.Tensor, proposal: Proposal, u: torch.Tensor, bugs: InjectedBugs = NO_BUGS,
           raw: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)) -> Decision:
    """The sampled decision for given uniforms ``u`` (n,): accepted count, and the distribution the new
    token is to be drawn from. ``target_probs`` (n + 1, V) is the warped p; any float dtype (float64 stays
    float64). ``raw``: display tensors (unwarped p(x), q(x)) copied to the host in the same transfer."""
    drafts, draft_probs = proposal.tokens, proposal.draft_probs
    n = len(drafts)
    rows, d_idx = _index(drafts, target_probs.device)
    q_x = draft_probs[rows, d_idx] if draft_probs is not None else torch.ones(n, device=target_probs.device)
    p_x = target_probs[rows, d_idx]
    alpha = acceptance_probs(p_x, q_x)
    host = host_values(p=p_x, q=q_x, alpha=alpha, u=u, raw=raw)
    n_acc = first_rejection(host.u, host.alpha)
    residual = q_row = None
    if n_acc < n:
        q_row = (draft_probs[n_acc] if draft_probs is not None
                 else point_mass(drafts[n_acc], target_probs.shape[-1], target_probs.device))
        residual = target_probs[n_acc] if bugs.resample_from_p else residual_distribution(target_probs[n_acc], q_row)
    return Decision(n_accepted=n_acc, p=host.p, q=host.q, alpha=host.alpha, u=host.u,
                    drawn_from=residual if residual is not None else target_probs[n], residual=residual,
                    q_row=q_row, keeps_new_token=not (bugs.drop_bonus and n_acc == n > 0), p_raw=host.p_raw,
                    q_raw=host.q_raw)


def _verify_greedy(logits: torch.Tensor, proposal: Proposal, bugs: InjectedBugs, show: bool) -> Verdict:
    """Greedy: p is one-hot at the argmax, so p(x) = alpha = [x == argmax] and no (n+1, V) one-hot is built;
    on a mismatch the residual is p itself, so the argmax is emitted. No generator call."""
    drafts, draft_probs = proposal.tokens, proposal.draft_probs
    n = len(drafts)
    rows, d_idx = _index(drafts, logits.device)
    argmax = logits.argmax(-1)                                          # (n+1,)
    q_x = draft_probs[rows, d_idx] if draft_probs is not None else torch.ones(n, device=logits.device)
    p_x = alpha = (d_idx == argmax[:n]).float()
    raw_p = logits[:n].float().softmax(-1)[rows, d_idx] if show else None
    raw_q = proposal.raw_probs[rows, d_idx] if (show and proposal.raw_probs is not None) else None
    host = host_values(p=p_x, q=q_x, alpha=alpha, raw=(raw_p, raw_q), ids=argmax)
    n_acc = first_rejection([0.0] * n, host.alpha)
    token = host.ids[n_acc]
    tops: dict[str, Top] = {}
    if n_acc < n and show:
        one = [(token, 1.0)]
        q_top = _top(draft_probs[n_acc]) if draft_probs is not None else [(drafts[n_acc], 1.0)]
        tops = dict(residual_top=one, p_top=list(one), q_top=q_top)
    return Verdict(n_accepted=n_acc, token=token,
                   emitted=_emitted(drafts, n_acc, token, not (bugs.drop_bonus and n_acc == n > 0)),
                   p=host.p, q=host.q, alpha=host.alpha, u=None, token_p=1.0, token_residual_prob=1.0,
                   p_raw=host.p_raw, q_raw=host.q_raw, **tops)


def _emitted(drafts: list[int], n_acc: int, token: int, keeps_token: bool) -> list[int]:
    return drafts[:n_acc] + ([token] if keeps_token else [])


def _index(drafts: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, drafted ids) for gathering each drafted token's probability from an (n, V) table."""
    return torch.arange(len(drafts), device=device), torch.tensor(drafts, device=device, dtype=torch.long)


def _top(probs: torch.Tensor, n: int = TOP_N) -> Top:
    vals, idx = torch.topk(probs.float(), min(n, probs.shape[-1]))
    return [(i, v) for v, i in zip(vals.tolist(), idx.tolist()) if v > 0]


def _to_host(*parts: torch.Tensor | None) -> list[list[float] | None]:
    """Several small tensors copied to the host in ONE transfer (one device sync): flattened, joined,
    split again. Joined as float32 (exact for float32 values and token ids below 2**24), or as float64
    when any part is float64 (so a float64 table keeps its precision). None stays None."""
    present = [t.reshape(-1) for t in parts if t is not None]
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in present) else torch.float32
    flat = torch.cat([t.to(dtype) for t in present]).tolist() if present else []
    out: list[list[float] | None] = []
    at = 0
    for t in parts:
        if t is None:
            out.append(None)
        else:
            out.append(flat[at:at + t.numel()])
            at += t.numel()
    return out


@dataclass(frozen=True)
class HostValues:
    """What a decision reads per drafted token (or tree node), on the host (``host_values``); None where
    not asked for."""
    p: list[float] | None = None         # warped p(x)
    q: list[float] | None = None         # warped q(x)
    alpha: list[float] | None = None
    u: list[float] | None = None         # the uniforms
    p_raw: list[float] | None = None     # display: unwarped p(x), q(x)
    q_raw: list[float] | None = None
    ids: list[int] | None = None         # a token per row: greedy's argmax, the target draw's draws
    ids_p: list[float] | None = None     # p of each row's token


def host_values(*, p: torch.Tensor | None = None, q: torch.Tensor | None = None,
                alpha: torch.Tensor | None = None, u: torch.Tensor | None = None,
                raw: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
                ids: torch.Tensor | None = None, ids_p: torch.Tensor | None = None) -> HostValues:
    """The given per-token tensors on the host, in ONE transfer (``_to_host``)."""
    h = _to_host(p, q, alpha, u, raw[0], raw[1], ids, ids_p)
    return HostValues(p=h[0], q=h[1], alpha=h[2], u=h[3], p_raw=h[4], q_raw=h[5],
                      ids=None if h[6] is None else [int(t) for t in h[6]], ids_p=h[7])


@dataclass(frozen=True)
class SampledToken:
    """The new token on the host (``sampled_to_host``)."""
    token: int
    p: float                             # its p where it was drawn
    residual_prob: float | None          # its probability under what it was drawn from (None: none given)
    tops: dict[str, Top]                 # residual_top, p_top, q_top as asked for (empty: none)


def sampled_to_host(token: torch.Tensor, p_row: torch.Tensor, residual: torch.Tensor | None,
                    top_rows: list[torch.Tensor]) -> SampledToken:
    """The sampled token (a one-element tensor), its p (``p_row`` is p where it was drawn) and its probability
    under ``residual``, and the top-``TOP_N`` of each of ``top_rows`` (residual, p, q), in ONE transfer."""
    tops = [torch.topk(r.float(), min(TOP_N, r.shape[-1])) for r in top_rows]
    host = _to_host(token, p_row[token], None if residual is None else residual[token],
                    *[t.values for t in tops], *[t.indices for t in tops])
    lists = [[(int(i), v) for v, i in zip(vals, idx) if v > 0]
             for vals, idx in zip(host[3:3 + len(tops)], host[3 + len(tops):])]
    return SampledToken(token=int(host[0][0]), p=host[1][0], residual_prob=None if host[2] is None else host[2][0],
                        tops=dict(zip(("residual_top", "p_top", "q_top"), lists)))
