"""Coupled sampling through the whole engine, on tiny models and the toy pair.

Invariance: for a fixed seed the coupled speculative output equals the coupled target-only baseline token for
token, whatever the drafter (a model draft, prompt lookup, the target drafting for itself, tree drafters), K,
K policy (fixed, heuristic, cost-aware), the confidence stop, and when runs go concurrently in threads; the
injected bug that keys the noise by iteration breaks exactly this. Exactness: chi-square of the first two
tokens against the target's exact distribution; fast on the toy pair through the exactness lab (chain and
tree, warped), over 2,500 seeds on the tiny models in the slow suite (chain and tree, plain and warped, prompt
lookup, the bug: exact; a broken keying: caught). The pieces, with hand-built tables: test_coupling.py."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from specdec_core import InjectedBugs, NGramDrafter, SpecConfig, Trace, baseline_generate, speculative_generate
from specdec_core.sampling.coupled import CoupledSampler, noise_key
from specdec_core.drafters.model import ModelDrafter
from specdec_core.policy.closed_form import estimate_alpha
from specdec_core.policy.costmodel import iterations_profile
from specdec_core.teaching.lab import LabSettings, run_exactness
from specdec_core.teaching.toy import make_toy_pair
from tests.conftest import make_tiny_lm
from tests.test_exactness import (N_RUNS, PROMPT, SETTINGS, VOCAB, chi_square_p, empirical_first_tokens,
                                  exact_first_tokens)
from tests.tree_helpers import TreeTestDrafter

pytestmark = pytest.mark.usefixtures("one_thread")

IDS = [1, 2, 3, 1, 2, 5, 7, 1, 2]      # prompt lookup finds "1 2" and proposes "3 1 2 ..."
SAMPLING = {"warped": dict(temperature=0.8, top_k=8, top_p=0.95), "plain": dict(temperature=1.0)}
BUG = InjectedBugs(coupled_noise_by_iteration=True)


@pytest.fixture(scope="module")
def pair():
    """A 16-token target and a draft that agrees with it often enough for long accepted runs and rejections."""
    return (make_tiny_lm(vocab_size=16, seed=1, scale=6.0, layers=2),
            make_tiny_lm(vocab_size=16, seed=2, scale=6.0, layers=1))


def _drafter(name: str, pair):
    target, draft = pair
    return {"model": lambda: ModelDrafter(draft), "ngram": NGramDrafter, "self": lambda: ModelDrafter(target),
            "independent-tree": lambda: TreeTestDrafter(draft, "independent")}[name]()


CASES = [("model", dict(k=1)), ("model", dict(k=4)), ("model", dict(k=6, k_policy="heuristic")),
         ("model", dict(k=5, k_policy="cost")), ("model", dict(k=4, confidence_stop=0.4)),
         ("ngram", dict(k=3)), ("ngram", dict(k=8, k_policy="cost")), ("self", dict(k=3)),
         ("model", dict(k=3, tree_nodes=6, tree_top_k=3)), ("ngram", dict(k=4, tree_nodes=6, tree_top_k=2)),
         ("independent-tree", dict(k=3, tree_nodes=5, tree_top_k=2))]


def _cfg(seed: int, sampling: str, **extra) -> SpecConfig:
    return SpecConfig(max_new_tokens=16, seed=seed, sampler="coupled", **SAMPLING[sampling], **extra)


@pytest.mark.parametrize("sampling", ["warped", "plain"])
def test_coupled_output_is_the_coupled_baseline_whatever_the_drafter_k_policy_or_tree(pair, sampling):
    target = pair[0]
    accepted = rejected = trees = 0
    ks = set()
    for seed in range(2):
        base = baseline_generate(target, IDS, _cfg(seed, sampling)).new_token_ids
        for name, extra in CASES:
            tr = speculative_generate(target, _drafter(name, pair), IDS, _cfg(seed, sampling, **extra))
            assert tr.new_token_ids == base, (seed, name, extra)
            assert Trace.from_dict(tr.to_dict()).new_token_ids == base
            accepted += tr.stats.accepted
            rejected += sum(it.resampled is not None for it in tr.iterations)
            trees += sum(it.tree is not None for it in tr.iterations)
            ks |= {it.k for it in tr.iterations if it.tree is None}
    assert accepted > 30 and rejected > 30 and trees > 10 and len(ks) >= 5   # the runs really differ in shape


def test_greedy_is_the_same_under_both_samplers(pair):
    target = pair[0]
    for name, extra in CASES[:2] + CASES[8:10]:
        runs = [speculative_generate(target, _drafter(name, pair), IDS,
                                     SpecConfig(max_new_tokens=16, sampler=s, **extra)).to_dict()
                for s in ("standard", "coupled")]
        assert runs[1]["config"].pop("sampler") == "coupled" and "sampler" not in runs[0]["config"]
        assert [it["emitted"] for it in runs[0]["iterations"]] == [it["emitted"] for it in runs[1]["iterations"]]


def test_a_coupled_trace_records_the_coupled_rule(pair):
    target = pair[0]
    tr = speculative_generate(target, _drafter("model", pair), IDS, _cfg(0, "warped", k=4))
    assert tr.config["sampler"] == "coupled"
    tested = [d for it in tr.iterations for d in it.drafts if d.tested]
    assert tested and all(d.u is None and d.target_token is not None and 0 <= d.tv <= 1 for d in tested)
    assert all(d.accepted == (d.target_token == d.token_id) for d in tested)
    assert all(d.coupled_alpha <= d.alpha + 1e-5 for d in tested)
    mismatches = [it for it in tr.iterations if it.resampled is not None]
    assert mismatches
    for it in mismatches:
        rs = it.resampled
        assert rs.token_id == it.drafts[rs.position].target_token and rs.q is not None and rs.residual_top == []
        assert rs.residual_prob is None and rs.p_top and rs.q_top
    # the K policy's and the closed form's acceptance estimates read the coupled rule's probability
    assert estimate_alpha(tr) == pytest.approx(sum(d.coupled_alpha for d in tested) / len(tested))
    first = [it.drafts[0].coupled_alpha for it in tr.iterations if it.drafts]
    assert iterations_profile(tr.iterations).a(1) == pytest.approx(sum(first) / len(first))


def test_invariance_holds_for_concurrent_runs_in_threads(pair):
    """Each run owns its noise (a generator per position): runs in threads do not disturb each other."""
    target = pair[0]
    jobs = [(seed, CASES[i]) for seed in range(2) for i in (1, 3, 5, 8)]

    def run(job):
        seed, (name, extra) = job
        return speculative_generate(target, _drafter(name, pair), IDS, _cfg(seed, "warped", **extra)).new_token_ids
    with ThreadPoolExecutor(4) as pool:
        out = list(pool.map(run, jobs))
    bases = {seed: baseline_generate(target, IDS, _cfg(seed, "warped")).new_token_ids for seed in range(2)}
    assert out == [bases[seed] for seed, _ in jobs]


def test_noise_keyed_by_iteration_breaks_invariance(pair):
    """The bug: each run is still a valid sample (exactness: the slow chi-square and the lab test below), but
    the text of a seed depends on how the iterations were cut."""
    target = pair[0]
    differ = 0
    for seed in range(4):
        base = baseline_generate(target, IDS, _cfg(seed, "warped")).new_token_ids
        runs = [speculative_generate(target, _drafter("model", pair), IDS, _cfg(seed, "warped", k=k),
                                     bugs=BUG).new_token_ids for k in (1, 4)]
        differ += (runs[0] != base) + (runs[1] != base) + (runs[0] != runs[1])
    assert differ >= 6


# --- exactness: fast, on the toy pair through the lab ---------------------------------------------------------

@pytest.fixture(scope="module")
def toy():
    return make_toy_pair(0.5)


def _lab(toy, n_runs: int, bugs=InjectedBugs(), **kw):
    s = LabSettings(n_tokens=2, k=2, temperature=0.7, top_k=6, top_p=0.9, n_runs=n_runs, seed=0, sampler="coupled",
                    **kw)
    return run_exactness(toy.target, toy.draft, toy.tokenizer.encode("the cat"), s, "toy", toy.tokenizer, bugs)


@pytest.mark.parametrize("tree", [0, 4])
def test_the_coupled_engine_is_exact_on_the_toy_pair(toy, tree):
    r = _lab(toy, 400, tree_nodes=tree, tree_top_k=2)
    o = r.outcomes
    assert o.n_runs == o.drafted_runs == 400 and 0 < o.accepted < o.tested and o.resampled > 0
    assert o.tree_runs == (400 if tree else 0)
    assert r.comparison.p_value > 1e-3, r.comparison.message


def test_the_lab_takes_the_coupled_rule_and_explains_the_bugs(toy):
    r = _lab(toy, 300, InjectedBugs(coupled_noise_by_iteration=True, resample_from_p=True))
    assert r.comparison.p_value > 1e-3, r.comparison.message          # still exact
    assert any("breaks is invariance" in n for n in r.notes) and any("no residual" in n for n in r.notes)
    with pytest.raises(ValueError, match="sampler must be one of"):
        LabSettings(sampler="gumbel")


# --- exactness: the tiny models over 2,500 seeds (slow) -------------------------------------------------------

@pytest.fixture(scope="module")
def models():
    """The chain exactness tests' pair (tests/test_exactness.py)."""
    return make_tiny_lm(vocab_size=VOCAB, seed=1, scale=10.0), make_tiny_lm(vocab_size=VOCAB, seed=2, scale=10.0)


def _chi_square(models, setting, drafter=None, bugs=InjectedBugs(), **extra):
    target, draft = models
    s = SETTINGS[setting]
    counts = empirical_first_tokens(target, drafter or (lambda: ModelDrafter(draft)), k=2, bugs=bugs,
                                    sampler="coupled", **s, **extra)
    return chi_square_p(counts, exact_first_tokens(target, PROMPT, **s), N_RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["plain", "warped"])
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_coupled_is_exact(models, setting, tree):
    p, tv = _chi_square(models, setting, **(dict(tree_nodes=4, tree_top_k=2) if tree else {}))
    assert p > 1e-3, f"coupled {'tree' if tree else 'chain'}, {setting}: chi-square p={p:.2e}, TV={tv:.3f}"


@pytest.mark.slow
def test_coupled_prompt_lookup_and_the_iteration_keyed_bug_are_exact(models):
    p, tv = _chi_square(models, "warped", drafter=NGramDrafter)
    assert p > 1e-3, f"coupled prompt lookup: chi-square p={p:.2e}, TV={tv:.3f}"
    p, tv = _chi_square(models, "warped", bugs=BUG)
    assert p > 1e-3, f"noise keyed by iteration: chi-square p={p:.2e}, TV={tv:.3f}"


@pytest.mark.slow
def test_a_broken_keying_is_caught(models, monkeypatch):
    """Power control: the same noise at every position (keyed by the seed alone) correlates the tokens."""
    monkeypatch.setattr(CoupledSampler, "key", lambda self, position: noise_key(self.seed))
    p, tv = _chi_square(models, "plain")
    assert p < 1e-6, f"one noise for every position went undetected: p={p:.2e}, TV={tv:.3f}"
