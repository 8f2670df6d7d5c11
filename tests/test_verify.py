"""The verification step, tested exactly: no sampling statistics, no chi-square.

On small vocabularies, with target (p) and draft (q) tables that depend on the prefix, the law of the
emitted tokens is computed by enumeration: every drafted sequence (its probability is the product of the
q it was drawn from), every accept/reject branch of the uniform draws (acceptance is u < alpha, so the
branch "first j accepted, then a rejection" has probability alpha_1 ... alpha_j (1 - alpha_{j+1})), and
the distribution the new token is drawn from. The branches are decided by the real code (``decide``,
called with a u inside each branch) and the new token's distribution is the one it returns. The law of
the first L tokens must equal the target's autoregressive law to float64 precision; each injected bug
must move it by its closed-form amount.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
from collections import defaultdict
from collections.abc import Callable

import pytest
import torch

from specdec_core.bugs import NO_BUGS, InjectedBugs
from specdec_core.decoding.verify import Verdict, decide, verify
from specdec_core.drafters.base import DraftPolicy, Proposal, draw_draft_token
from specdec_core.sampling import Warping, first_rejection, residual_distribution, sample, warp_logits

Dist = Callable[[tuple], torch.Tensor]      # prefix -> (V,) float64 distribution


def _table(name: str, V: int, zero: bool) -> Dist:
    """A distribution for every prefix (random, fixed by the prefix). With ``zero``, one token (which
    depends on the prefix) gets no mass: a top-k/top-p cut for p, a token outside the draft's vocabulary for q."""
    def dist(prefix: tuple) -> torch.Tensor:
        seed = int.from_bytes(hashlib.sha256(f"{name}{prefix}".encode()).digest()[:8], "little")
        g = torch.Generator().manual_seed(seed)
        logits = 2.0 * torch.randn(V, generator=g, dtype=torch.float64)
        if zero:
            logits[int(torch.randint(V, (1,), generator=g))] = float("-inf")
        return logits.softmax(-1)
    return dist


def target_law(p: Dist, V: int, L: int) -> dict[tuple, float]:
    """P(t_1 ... t_L) = prod_i p(t_i | t_<i)."""
    law = {}
    for seq in itertools.product(range(V), repeat=L):
        prob = 1.0
        for i, t in enumerate(seq):
            prob *= float(p(seq[:i])[t])
        law[seq] = prob
    return law


def drafted(q: Dist, draw: Dist | str | None, prefix: tuple, K: int, V: int) -> list[tuple[tuple, float]]:
    """Every drafted sequence of length K and its probability. ``draw`` is how each token is drawn:
    None = from q itself; "argmax" = argmax q (the greedy_draft_ratio_rule bug); "lookup" = a fixed
    token per prefix (prompt lookup: q is a point mass on it); a Dist = from that distribution
    (the draft_temperature bug: q warped at another temperature)."""
    out = [((), 1.0)]
    for _ in range(K):
        nxt = []
        for seq, w in out:
            ctx = prefix + seq
            if draw == "argmax":
                nxt.append((seq + (int(q(ctx).argmax()),), w))
            elif draw == "lookup":
                nxt.append((seq + (sum(ctx) * 7 % V,), w))
            else:
                d = (q if draw is None else draw)(ctx)
                nxt += [(seq + (t,), w * float(d[t])) for t in range(V) if d[t] > 0]
        out = nxt
    return out


def iteration(p: Dist, q: Dist, V: int, K: int, prefix: tuple, bugs: InjectedBugs = NO_BUGS,
              draw: Dist | str | None = None) -> dict[tuple, float]:
    """The law of what one iteration from ``prefix`` emits: over the drafted sequences, the accept/reject
    branches (each decided by ``decide`` at a u inside it) and the new token's distribution."""
    out: dict[tuple, float] = defaultdict(float)
    for drafts, w_d in drafted(q, draw, prefix, K, V):
        p_rows = torch.stack([p(prefix + drafts[:i]) for i in range(K + 1)])
        q_rows = None if draw == "lookup" else torch.stack([q(prefix + drafts[:i]) for i in range(K)])
        q_x = [1.0 if q_rows is None else float(q_rows[i, x]) for i, x in enumerate(drafts)]
        alpha = [min(1.0, float(p_rows[i, x]) / q_x[i]) for i, x in enumerate(drafts)]
        for j in range(K + 1):                    # j drafts accepted, then (j < K) a rejection
            w = w_d * torch.tensor(alpha[:j], dtype=torch.float64).prod().item() * (1 - alpha[j] if j < K else 1)
            if w == 0:
                continue
            u = [a / 2 for a in alpha[:j]] + ([(1 + alpha[j]) / 2] + [0.5] * (K - j - 1) if j < K else [])
            d = decide(p_rows, Proposal(list(drafts), q_rows), torch.tensor(u, dtype=torch.float64), bugs)
            assert d.n_accepted == j and d.alpha == pytest.approx(alpha, abs=1e-15)
            if not d.keeps_new_token:                          # drop_bonus: the drafts, no new token
                out[drafts] += w
                continue
            for t in torch.nonzero(d.drawn_from).flatten().tolist():
                out[drafts[:j] + (t,)] += w * float(d.drawn_from[t])
    return out


def speculative_law(p: Dist, q: Dist, V: int, K: int, L: int, bugs: InjectedBugs = NO_BUGS,
                    draw: Dist | str | None = None) -> tuple[dict[tuple, float], float]:
    """The law of the first L emitted tokens, iteration after iteration (the process is Markov in what
    was emitted), and the expected number of tokens the first iteration emits."""
    @functools.cache
    def law_from(prefix: tuple) -> dict[tuple, float]:
        if len(prefix) >= L:
            return {prefix[:L]: 1.0}
        out: dict[tuple, float] = defaultdict(float)
        for emitted, w in iteration(p, q, V, K, prefix, bugs, draw).items():
            for seq, w_seq in law_from(prefix + emitted).items():
                out[seq] += w * w_seq
        return out
    first = iteration(p, q, V, K, (), bugs, draw)
    return dict(law_from(())), sum(w * len(e) for e, w in first.items())


def gap(law: dict[tuple, float], exact: dict[tuple, float]) -> float:
    return max(abs(law.get(s, 0.0) - exact[s]) for s in exact)


CASES = [(3, 1, 3), (4, 2, 3), (3, 3, 4), (5, 2, 2)]     # (V, K, L)


@pytest.mark.parametrize("V, K, L", CASES)
@pytest.mark.parametrize("zeros", [False, True], ids=["full", "zeros"])
def test_emitted_tokens_follow_the_target_exactly(V, K, L, zeros):
    p, q = _table("p", V, zeros), _table("q", V, zeros)
    law, _ = speculative_law(p, q, V, K, L)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert gap(law, target_law(p, V, L)) < 1e-12


@pytest.mark.parametrize("V, K, L", CASES[:3])
def test_prompt_lookup_point_mass_is_exact(V, K, L):
    p = _table("p", V, True)
    law, _ = speculative_law(p, p, V, K, L, draw="lookup")
    assert gap(law, target_law(p, V, L)) < 1e-12


@pytest.mark.parametrize("V, K, L", CASES[:3])
def test_dropping_the_bonus_stays_exact_and_emits_fewer_tokens(V, K, L):
    p, q = _table("p", V, False), _table("q", V, False)
    law, tokens = speculative_law(p, q, V, K, L, InjectedBugs(drop_bonus=True))
    _, tokens_correct = speculative_law(p, q, V, K, 1)
    assert gap(law, target_law(p, V, L)) < 1e-12
    # one token fewer exactly when every draft was accepted
    all_accepted = sum(w * torch.tensor([min(1.0, float(p(ds[:i])[x] / q(ds[:i])[x])) for i, x in enumerate(ds)],
                                        dtype=torch.float64).prod().item()
                       for ds, w in drafted(q, None, (), K, V))
    assert all_accepted > 0.01
    assert tokens == pytest.approx(tokens_correct - all_accepted, abs=1e-12)


def _first_token_closed_form(p: torch.Tensor, q: torch.Tensor, bug: str, tau: float) -> torch.Tensor:
    """The law of the first emitted token with K = 1, in closed form, for each bug."""
    r = residual_distribution(p, q)
    alpha = torch.where(q > 0, (p / q).clamp(max=1.0), torch.ones_like(p))
    if bug == "resample_from_p":              # accepted x: min(p, q)(x); else the replacement is drawn from p
        return torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * p
    if bug == "greedy_draft_ratio_rule":      # x = argmax q, accepted with min(1, p(x)/q(x)), else the residual
        x = int(q.argmax())
        return alpha[x] * torch.nn.functional.one_hot(torch.tensor(x), len(p)).double() + (1 - alpha[x]) * r
    q_tau = (q.log() / tau).softmax(-1)       # draft_temperature: x ~ q warped at tau, tested against q
    accepted = q_tau * alpha
    return accepted + (1 - accepted.sum()) * r


BUGS = {"resample_from_p": InjectedBugs(resample_from_p=True),
        "greedy_draft_ratio_rule": InjectedBugs(greedy_draft_ratio_rule=True),
        "draft_temperature": InjectedBugs(draft_temperature=0.5)}


def _bug_draw(bug: str, q: Dist) -> Dist | str | None:
    """How the bug draws the drafts (drafters.base.draw_draft_token): the verification step is handed q."""
    if bug == "greedy_draft_ratio_rule":
        return "argmax"
    if bug == "draft_temperature":
        return lambda ctx: (q(ctx).log() / BUGS[bug].draft_temperature).softmax(-1)
    return None


def test_the_bugs_draw_drafts_as_the_enumeration_assumes():
    """``_bug_draw`` is what the drafters do (``draw_draft_token``): both bugs hand verify the run's q."""
    logits = torch.randn(6, generator=torch.Generator().manual_seed(2))
    q = warp_logits(logits, 1.0)
    for seed in range(20):
        policy = DraftPolicy(1.0, 0, 1.0, torch.Generator().manual_seed(seed), bugs=BUGS["greedy_draft_ratio_rule"])
        token, q_given = draw_draft_token(logits, policy)
        assert int(token) == int(logits.argmax()) and torch.equal(q_given, q)
        policy = DraftPolicy(1.0, 0, 1.0, torch.Generator().manual_seed(seed), bugs=BUGS["draft_temperature"])
        token, q_given = draw_draft_token(logits, policy)
        assert int(token) == int(sample(warp_logits(logits, 0.5), torch.Generator().manual_seed(seed)))
        assert torch.equal(q_given, q)


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_bug_moves_the_first_token_by_its_closed_form_gap(bug):
    V = 5
    p, q = _table("p", V, False), _table("q", V, False)
    law, _ = speculative_law(p, q, V, 1, 1, BUGS[bug], draw=_bug_draw(bug, q))
    closed = _first_token_closed_form(p(()), q(()), bug, 0.5)
    assert max(abs(law.get((t,), 0.0) - float(closed[t])) for t in range(V)) < 1e-12
    expected_gap = float((closed - p(())).abs().max())
    assert expected_gap > 1e-3
    assert gap(law, target_law(p, V, 1)) == pytest.approx(expected_gap, abs=1e-12)


@pytest.mark.parametrize("bug", list(BUGS))
@pytest.mark.parametrize("V, K, L", [(4, 2, 3), (3, 3, 4)])
def test_each_bug_biases_longer_runs(bug, V, K, L):
    p, q = _table("p", V, False), _table("q", V, False)
    law, _ = speculative_law(p, q, V, K, L, BUGS[bug], draw=_bug_draw(bug, q))
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert gap(law, target_law(p, V, L)) > 1e-3


# --- verify itself: the generator, the boundary, greedy, hand-built logits --------------------------------

def test_verify_is_decide_with_the_runs_uniforms_then_one_draw():
    """The random stream the seeded traces depend on: n uniforms, then one draw for the new token."""
    V, n = 7, 3
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(n + 1, V, generator=g)
    q = torch.softmax(torch.randn(n, V, generator=g), -1)
    for seed in range(40):
        drafts = torch.randint(V, (n,), generator=g).tolist()
        prop = Proposal(drafts, q)
        v = verify(logits, prop, Warping(0.9, top_k=5), torch.Generator().manual_seed(seed))
        ref_gen = torch.Generator().manual_seed(seed)
        p = warp_logits(logits, 0.9, 5)
        d = decide(p, prop, torch.rand(n, generator=ref_gen))
        token = int(sample(d.drawn_from, ref_gen))
        assert (v.n_accepted, v.token, v.u, v.alpha) == (d.n_accepted, token, d.u, d.alpha)
        assert v.emitted == drafts[:v.n_accepted] + [token]
        assert v.token_p == pytest.approx(float(p[v.n_accepted, token]))


def test_u_equal_to_alpha_is_a_rejection():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.25, 0.75, 0.0]], dtype=torch.float64)            # alpha of token 1 = 0.5 / 0.75
    alpha = 0.5 / 0.75
    assert decide(p, Proposal([1], q), torch.tensor([alpha], dtype=torch.float64)).n_accepted == 0
    assert decide(p, Proposal([1], q), torch.tensor([alpha - 1e-12], dtype=torch.float64)).n_accepted == 1
    assert first_rejection([0.3, 0.9], [0.5, 0.9]) == 1 and first_rejection([], []) == 0


@pytest.mark.parametrize("drop", [False, True])
def test_greedy_keeps_the_agreeing_prefix_then_the_argmax(drop):
    V, K = 4, 3
    logits = torch.randn(K + 1, V, generator=torch.Generator().manual_seed(1))
    argmax = logits.argmax(-1).tolist()
    g = torch.Generator().manual_seed(5)
    state = g.get_state()
    for drafts in itertools.product(range(V), repeat=K):
        v = verify(logits, Proposal(list(drafts), None), Warping(0.0), g, InjectedBugs(drop_bonus=drop), show=True)
        agree = next((i for i, x in enumerate(drafts) if x != argmax[i]), K)
        assert v.n_accepted == agree and v.token == argmax[agree] and v.u is None
        assert v.p == v.alpha == [float(x == argmax[i]) for i, x in enumerate(drafts)]
        dropped = drop and agree == K
        assert v.emitted == list(drafts[:agree]) + ([] if dropped else [argmax[agree]])
        if agree < K:
            assert v.residual_top == v.p_top == [(argmax[agree], 1.0)] and v.q_top == [(drafts[agree], 1.0)]
    assert torch.equal(g.get_state(), state)                     # greedy draws nothing


INF = float("inf")


def _hand_built(last_row: list[float]) -> tuple[torch.Tensor, Proposal]:
    """Vocabulary 10, drafts [1, 4, 5], each drafted with near-certainty (logit 10 against -10)."""
    def peaked(t: int) -> list[float]:
        return [10.0 if i == t else -10.0 for i in range(10)]
    draft_logits = torch.tensor([peaked(1), peaked(4), peaked(5)])
    target_logits = torch.tensor([peaked(1), peaked(4), last_row, [-10.0] * 10])
    return target_logits, Proposal([1, 4, 5], draft_logits.softmax(-1), draft_logits.softmax(-1))


def test_hand_built_logits_reject_the_third_draft():
    """Like transformers' own ``_speculative_sampling`` test: the target agrees on 1 and 4 (alpha = 1) and
    puts no mass on 5 (alpha = 0), only on 7: whatever the seed, 1, 4 are kept and 7 replaces 5."""
    logits, prop = _hand_built([-INF] * 7 + [10.0] + [-INF] * 2)
    for seed in range(5):
        v = verify(logits, prop, Warping(1.0), torch.Generator().manual_seed(seed), show=True)
        assert v.n_accepted == 2 and v.emitted == [1, 4, 7] and v.token == 7
        assert v.alpha == [1.0, 1.0, 0.0] and v.p[2] == 0.0
        assert v.token_residual_prob == pytest.approx(1.0) and v.residual_top == [(7, pytest.approx(1.0))]
        assert v.p_raw == v.p                        # temperature 1, no top-k/top-p: warped == unwarped
        assert v.q_top[0][0] == 5 and v.p_top == [(7, pytest.approx(1.0))]


def test_hand_built_logits_accept_all_then_the_bonus():
    logits, prop = _hand_built([-10.0] * 5 + [10.0] + [-10.0] * 4)
    logits[3] = torch.tensor([-INF] * 9 + [0.0])                 # the bonus can only be 9
    for bugs, emitted in ((NO_BUGS, [1, 4, 5, 9]), (InjectedBugs(drop_bonus=True), [1, 4, 5])):
        v = verify(logits, prop, Warping(1.0), torch.Generator().manual_seed(0), bugs)
        assert isinstance(v, Verdict) and v.n_accepted == 3 and not v.rejected
        assert v.token == 9 and v.emitted == emitted and v.token_residual_prob is None
        assert torch.equal(v.drawn_from, logits[3].softmax(-1))


def test_resample_from_p_draws_the_replacement_from_p():
    logits, prop = _hand_built([0.0, 0.0] + [-INF] * 8)            # p at the third draft: 0 and 1, half each
    right = verify(logits, prop, Warping(1.0), torch.Generator().manual_seed(0))
    wrong = verify(logits, prop, Warping(1.0), torch.Generator().manual_seed(0), InjectedBugs(resample_from_p=True))
    assert right.n_accepted == wrong.n_accepted == 2
    assert torch.allclose(right.drawn_from, residual_distribution(logits[2].softmax(-1), prop.draft_probs[2]))
    assert torch.equal(wrong.drawn_from, logits[2].softmax(-1))
