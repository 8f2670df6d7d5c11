"""Coupled sampling's pieces, with hand-built tables (no models): the keyed noise, the Gumbel-max draw, the coupled
acceptance probability, the coupled verify of a chain and of a tree, the config and the Trace contract.
The engine end to end (invariance, exactness by chi-square): tests/test_coupled_engine.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specdec_core import SpecConfig, Trace
from specdec_core.bugs import InjectedBugs
from specdec_core.sampling.coupled import (CoupledSampler, StandardSampler, coupled_accept_prob, coupling_floor,
    gumbel_argmax, keyed_exponentials, make_sampler, noise_key, total_variation)
from specdec_core.decoding.coupled_verify import verify_coupled
from specdec_core.decoding.tree_verify import verify_tree
from specdec_core.decoding.verify import verify
from specdec_core.drafters.base import DraftPolicy, Proposal
from specdec_core.drafters.tree import TreeProposal
from tests.tree_helpers import chain_parents
from specdec_core.drafters.tree_build import grow_tree
from specdec_core.sampling import Warping, sample, warp_logits
from specdec_core.trace import sampler_of

PLAIN = Warping(1.0)


def _probs(rows: list[list[float]]) -> torch.Tensor:
    t = torch.tensor(rows, dtype=torch.float32)
    return t / t.sum(-1, keepdim=True)


def _logits(p: torch.Tensor) -> torch.Tensor:
    return p.log()                 # zeros become -inf: plain warping gives p back


def _chi_square_ok(counts: np.ndarray, p: torch.Tensor) -> None:
    """No draw outside p's support, and the counts fit p (chi-square p-value > 1e-3)."""
    p64 = p.double().numpy()
    live = p64 > 0
    assert counts[~live].sum() == 0
    expected = p64[live] / p64[live].sum() * counts.sum()
    assert chisquare(counts[live], expected).pvalue > 1e-3


def _noise_table(seed: int, n: int, V: int):
    s = CoupledSampler(seed)
    return lambda offset: s.noise(offset, V)


# --- the keyed noise -----------------------------------------------------------------------------------------

def test_noise_is_keyed_by_seed_and_position_and_leaves_the_global_generator_alone():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    a, b = CoupledSampler(7), CoupledSampler(7)
    assert torch.equal(a.noise(30, 50), b.noise(30, 50))                 # fresh instances: the same noise
    assert not torch.equal(a.noise(30, 50), a.noise(31, 50))              # another position
    assert not torch.equal(a.noise(30, 50), CoupledSampler(8).noise(30, 50))   # another seed
    assert noise_key(7, 30) == noise_key(7, 30) != noise_key(7, 30, 0)
    assert torch.equal(keyed_exponentials(noise_key(7, 30), 50), a.noise(30, 50))
    assert torch.equal(torch.random.get_rng_state(), before)
    e = a.noise(5, 10_000)
    assert e.dtype == torch.float32 and (e > 0).all() and abs(float(e.mean()) - 1) < 0.05   # Exp(1)


def test_iteration_keying_is_the_bug_and_the_cache_is_bounded():
    good, bug = CoupledSampler(3), CoupledSampler(3, by_iteration=True)
    good.start_iteration(0, 10)
    bug.start_iteration(0, 10)
    first = good.noise(12, 20)
    good.start_iteration(1, 11)
    bug.start_iteration(1, 11)
    assert torch.equal(good.noise(12, 20), first)                 # position keyed: the cut does not matter
    assert torch.equal(bug.noise(12, 20), keyed_exponentials(noise_key(3, 1, 1), 20))
    for t in range(200):
        good.noise(t, 4)
    assert len(good._cache) <= 66
    assert isinstance(make_sampler("coupled", 1, None, InjectedBugs(coupled_noise_by_iteration=True)), CoupledSampler)
    assert make_sampler("coupled", 1, None, InjectedBugs(coupled_noise_by_iteration=True)).by_iteration
    assert isinstance(make_sampler("standard", 1, None), StandardSampler)
    with pytest.raises(ValueError, match="unknown sampler"):
        make_sampler("gumbel", 1, None)


@pytest.mark.parametrize("warped", [False, True])
def test_the_keyed_draw_samples_p_exactly(warped):
    """20,000 positions of one seed, each its own noise: the draws follow p (chi-square), never a cut token."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    p = warp_logits(logits, 0.7, 4, 0.9) if warped else logits.softmax(-1)
    s, n = CoupledSampler(11), 20_000
    counts = np.bincount([int(s.draw(p, t)) for t in range(n)], minlength=6)
    _chi_square_ok(counts, p)


def test_gumbel_argmax_is_the_log_form():
    p, e = _probs([[0.1, 0.5, 0.4]])[0], torch.tensor([0.3, 2.0, 0.5])
    assert int(gumbel_argmax(p, e)) == int((p.log() - e.log()).argmax()) == 2


# --- the coupled acceptance probability ---------------------------------------------------------------------

def test_coupled_accept_prob_matches_simulation_and_its_bounds():
    p = torch.tensor([0.5, 0.2, 0.2, 0.1, 0.0], dtype=torch.float64)
    q = torch.tensor([0.3, 0.4, 0.1, 0.1, 0.1], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    e = -torch.rand((400_000, 5), generator=g, dtype=torch.float64).log()
    x, y = (q / e).argmax(-1), (p / e).argmax(-1)
    c = coupled_accept_prob(p.expand(5, 5), q.expand(5, 5), torch.arange(5))
    alpha = torch.minimum(torch.ones(5), p / q)
    for i in range(5):
        sim = float((y[x == i] == i).double().mean())
        assert float(c[i]) == pytest.approx(sim, abs=0.01)
        assert float(c[i]) <= float(alpha[i]) + 1e-12
    tv = float(total_variation(p, q))
    overall = float((q * c).sum())
    assert overall == pytest.approx(float((x == y).double().mean()), abs=0.005)
    assert coupling_floor(tv) <= overall <= 1 - tv
    point = coupled_accept_prob(p[None], torch.nn.functional.one_hot(torch.tensor([1]), 5).double(), torch.tensor([1]))
    assert float(point[0]) == pytest.approx(0.2)                    # a point mass: P(y = x) = p(x)
    assert float(coupled_accept_prob(p[None], q[None], torch.tensor([4]))[0]) == 0.0   # p(x) = 0


# --- the coupled verify of a chain --------------------------------------------------------------------------

P3 = _probs([[5, 3, 1, 1, 0], [1, 1, 4, 2, 2], [2, 2, 2, 2, 2]])
Q3 = _probs([[3, 3, 2, 1, 1], [1, 3, 3, 2, 1], [1, 1, 1, 1, 1]])


def _y(p: torch.Tensor, noise, rows: int) -> list[int]:
    return [int(gumbel_argmax(p[i], noise(i))) for i in range(rows)]


def test_verify_coupled_accepts_drafts_equal_to_the_target_sample_then_emits_it():
    for seed in range(40):
        noise = _noise_table(seed, 3, 5)
        y = _y(P3, noise, 3)
        wrong = (y[1] + 1) % 4
        v = verify_coupled(_logits(P3), Proposal([y[0], wrong], Q3[:2]), PLAIN, noise, show=True)
        assert v.n_accepted == 1 and v.emitted == [y[0], y[1]] and v.token == y[1]
        assert v.u is None and v.target_tokens == [y[0], y[1]] and v.token_residual_prob is None
        assert v.p == pytest.approx([float(P3[0, y[0]]), float(P3[1, wrong])])
        assert v.alpha == pytest.approx([min(1, v.p[i] / v.q[i]) for i in range(2)])
        assert v.token_p == pytest.approx(float(P3[1, y[1]])) and v.token_q == pytest.approx(float(Q3[1, y[1]]))
        assert v.tv == pytest.approx(total_variation(P3[:2], Q3[:2]).tolist(), abs=1e-6)
        assert all(c <= a + 1e-6 for c, a in zip(v.coupled_alpha, v.alpha))
        assert v.residual_top == [] and v.p_top[0][0] == int(P3[1].argmax()) and v.q_top
        clean = verify_coupled(_logits(P3), Proposal(y[:2], Q3[:2]), PLAIN, noise)
        assert clean.n_accepted == 2 and clean.emitted == y and not clean.rejected and clean.token_q is None
        dropped = verify_coupled(_logits(P3), Proposal(y[:2], Q3[:2]), PLAIN, noise, InjectedBugs(drop_bonus=True))
        assert dropped.emitted == y[:2]
        lookup = verify_coupled(_logits(P3), Proposal([wrong], None), PLAIN, noise)   # a point mass on the draft
        if wrong != y[0]:
            assert lookup.emitted == [y[0]] and lookup.coupled_alpha == pytest.approx([float(P3[0, wrong])])
            assert lookup.tv == pytest.approx([1 - float(P3[0, wrong])]) and lookup.token_q == 0.0


def test_verify_coupled_reads_only_the_rows_it_needs_and_greedy_is_the_standard_rule():
    read = []

    def noise(offset):
        read.append(offset)
        return CoupledSampler(0).noise(offset, 5)
    y0 = int(gumbel_argmax(P3[0], CoupledSampler(0).noise(0, 5)))
    verify_coupled(_logits(P3), Proposal([(y0 + 1) % 4, 0], Q3[:2]), PLAIN, noise)
    assert read == [0]                                          # a mismatch at the first draft: one row of noise
    g = verify_coupled(_logits(P3), Proposal([0, 2], Q3[:2]), Warping(0.0), noise)
    s = verify(_logits(P3), Proposal([0, 2], Q3[:2]), Warping(0.0), None)
    assert (g.emitted, g.n_accepted, g.target_tokens) == (s.emitted, s.n_accepted, None)


def test_drafts_drawn_with_the_same_noise_and_the_output_law():
    """Drafts drawn from q with the keyed noise (DraftPolicy.draw), verified by the coupled rule: the emitted
    tokens are the target's keyed samples, the first follows p_0 and, after an accepted draft, the second p_1
    (chi-square), and acceptance matches the mean coupled acceptance probability."""
    n, first, second, accepted, expected = 2000, [], [], 0, 0.0
    for seed in range(n):
        sampler = CoupledSampler(seed)
        policy = DraftPolicy(1.0, 0, 1.0, None, sampler=sampler).at(20)
        drafts = [int(policy.draw(Q3[i], i)) for i in range(2)]
        noise = lambda off, s=sampler: s.noise(20 + off, 5)
        v = verify_coupled(_logits(P3), Proposal(drafts, Q3[:2]), PLAIN, noise)
        assert v.emitted == _y(P3, noise, 3)[:len(v.emitted)]
        first.append(v.emitted[0])
        if len(v.emitted) > 1:
            second.append(v.emitted[1])
        accepted += v.emitted[0] == drafts[0]
        expected += v.coupled_alpha[0]
    for tokens, p in ((first, P3[0]), (second, P3[1])):
        _chi_square_ok(np.bincount(tokens, minlength=5), p)
    assert accepted / n == pytest.approx(expected / n, abs=0.035)


# --- the coupled rule on a token tree -----------------------------------------------------------------------

def test_tree_coupled_rule_walks_down_the_target_samples():
    """Root children a, b; a has child c. Rows: root (offset 0), a and b (offset 1: depth 1), c (offset 2)."""
    p = _probs([[4, 3, 2, 1], [1, 2, 3, 4], [2, 2, 1, 1], [1, 1, 1, 1]])
    q = _probs([[3, 3, 2, 2], [3, 3, 2, 2], [1, 2, 3, 4]])
    for seed in range(30):
        noise = _noise_table(seed, 3, 4)
        y = [int(gumbel_argmax(p[r], noise(o))) for r, o in ((0, 0), (1, 1), (2, 1), (3, 2))]
        other = (y[0] + 1) % 4
        tree = TreeProposal([y[0], other, (y[1] + 1) % 4], [-1, -1, 0], "distinct", q)
        v = verify_tree(_logits(p), tree, PLAIN, None, noise=noise, show=True)
        assert v.rule == "coupled" and v.path == [0] and v.emitted == [y[0], y[1]]
        assert v.status == ["accepted", "rejected", "rejected"] and v.u == [None] * 3 and v.alpha == [None] * 3
        assert v.token_residual_prob is None and v.token_q == pytest.approx(float(q[2, y[1]])) and not v.residual_top
        leaf = verify_tree(_logits(p), TreeProposal([y[0], other, y[1]], [-1, -1, 0], "distinct", q), PLAIN, None,
                           noise=noise)
        assert leaf.path == [0, 2] and leaf.stopped_at_leaf and leaf.emitted == [y[0], y[1], y[3]]


def test_a_chain_as_a_tree_gives_the_chain_verdict():
    for seed in range(30):
        noise = _noise_table(seed, 3, 5)
        y = _y(P3, noise, 3)
        drafts = [y[0], (y[1] + seed) % 5]
        chain = verify_coupled(_logits(P3), Proposal(drafts, Q3[:2]), PLAIN, noise)
        tree = verify_tree(_logits(P3), TreeProposal(drafts, chain_parents(2), "independent", Q3[:2]), PLAIN, None,
                           noise=noise)
        assert tree.emitted == chain.emitted and tree.token_p == pytest.approx(chain.token_p)


# --- the draft side ----------------------------------------------------------------------------------------

def test_draft_policy_draws_with_the_keyed_noise_at_absolute_positions():
    q = Q3[0]
    s = CoupledSampler(5)
    pol = DraftPolicy(1.0, 0, 1.0, None, sampler=s)
    assert pol.coupled and not DraftPolicy(0.0, 0, 1.0, None, sampler=s).coupled
    assert int(pol.at(10).draw(q, 2)) == int(CoupledSampler(5).draw(q, 12))
    std = DraftPolicy(1.0, 0, 1.0, torch.Generator().manual_seed(3))
    assert not std.coupled and int(std.draw(q)) == int(sample(q, torch.Generator().manual_seed(3)))


def test_tree_children_under_coupling_lead_with_the_coupled_draw():
    logits = torch.tensor([1.0, 0.8, 0.5, 0.3, 0.1, -0.2])
    for seed in range(20):
        pol = DraftPolicy(1.0, 0, 1.0, None, sampler=CoupledSampler(seed)).at(7)

        def step(nodes, tokens, parents):
            return logits.expand(len(nodes), -1)
        prop, _ = grow_tree(logits, step, 6, 3, 2, pol, torch.device("cpu"), siblings="independent")
        root_kids = [t for t, par in zip(prop.tokens, prop.parents) if par == -1]
        assert prop.siblings == "distinct" and len(set(root_kids)) == len(root_kids)
        assert int(CoupledSampler(seed).draw(logits.softmax(-1), 7)) in root_kids


# --- settings and the trace contract ------------------------------------------------------------------------

def test_the_sampler_setting_is_validated_and_recorded_only_when_coupled():
    assert SpecConfig().sampler == "standard" and "sampler" not in SpecConfig().trace_dict()
    assert SpecConfig(sampler="coupled").trace_dict()["sampler"] == "coupled"
    for bad in ("gumbel", "", None, 1):
        with pytest.raises(ValueError, match="sampler must be one of standard, coupled"):
            SpecConfig(sampler=bad)


def _coupled_trace_dict() -> dict:
    d = {"token_id": 3, "text": "", "q": 0.5, "p": 0.25, "alpha": 0.5, "u": None, "accepted": True,
         "target_token": 3, "coupled_alpha": 0.4, "tv": 0.3}
    r = {"token_id": 2, "text": "", "q": 0.4, "p": 0.2, "alpha": 0.5, "u": None, "accepted": False,
         "target_token": 1, "coupled_alpha": 0.3, "tv": 0.3}
    it = {"index": 0, "start_len": 2, "k": 2, "drafts": [d, r],
          "resampled": {"token_id": 1, "text": "", "p": 0.3, "position": 1, "q": 0.05, "residual_top": []},
          "bonus": None, "emitted": [3, 1], "draft_ms": [1.0, 1.0], "verify_ms": 2.0, "other_ms": 0.1}
    return {"schema": "specdec-trace/1", "config": {"k": 2, "temperature": 0.8, "max_new_tokens": 2,
                                                    "sampler": "coupled"},
            "prompt": "", "prompt_ids": [0, 1], "iterations": [it], "new_token_ids": [3, 1], "text": "",
            "stats": {"new_tokens": 2, "iterations": 1, "drafted": 2, "accepted": 1, "acceptance_rate": 0.5,
                      "mean_tokens_per_iteration": 2.0, "target_forwards": 2, "draft_forwards": 2,
                      "wall_ms": 5.0, "tokens_per_s": 400.0}}


def test_a_coupled_trace_round_trips_and_its_contract_is_checked():
    good = _coupled_trace_dict()
    tr = Trace.from_dict(good)
    assert sampler_of(tr.config) == "coupled" and tr.iterations[0].drafts[1].target_token == 1
    assert tr.iterations[0].drafts[0].accept_prob == 0.4 and tr.iterations[0].resampled.q == 0.05
    assert Trace.from_dict(json.loads(json.dumps(tr.to_dict()))).to_dict() == tr.to_dict()

    def broken(edit, message):
        d = _coupled_trace_dict()
        edit(d)
        with pytest.raises(ValueError, match=message):
            Trace.from_dict(d)
    it = lambda d: d["iterations"][0]   # noqa: E731
    broken(lambda d: d["config"].update(sampler="gumbel"), "config.sampler")
    broken(lambda d: it(d)["drafts"][0].update(target_token=4), "contradicts the target token")
    broken(lambda d: it(d)["drafts"][0].update(u=0.1), "u must be null")
    broken(lambda d: it(d)["drafts"][1].update(target_token=0), "emits the target token 0")
    broken(lambda d: d["config"].pop("sampler"), "belong to coupled runs")


def test_standard_traces_are_written_and_read_as_before():
    d = _coupled_trace_dict()
    del d["config"]["sampler"]
    for draft in d["iterations"][0]["drafts"]:
        for key in ("target_token", "coupled_alpha", "tv"):
            del draft[key]
        draft["u"] = 0.1 if draft["accepted"] else 0.9
    del d["iterations"][0]["resampled"]["q"]
    tr = Trace.from_dict(d)
    assert sampler_of(tr.config) == "standard" and tr.iterations[0].drafts[0].accept_prob == 0.5
    out = tr.to_dict()
    assert "target_token" not in out["iterations"][0]["drafts"][0] and "q" not in out["iterations"][0]["resampled"]
