"""The exactness lab: exact distributions, the statistics, and the end-to-end verdicts. The same
experiment must pass the correct engine and flag each classic bug that can bias the setup, while
the "drop the bonus" control honestly shows no bias."""
from collections import Counter

import numpy as np
import pytest
import torch

from conftest import make_tiny_lm
from specdec_core import InjectedBugs, NGramDrafter
from specdec_core.teaching.lab import (ExactDistribution, LabSettings, Outcomes, bug_notes, compare,
    exact_distribution, expected_tv_noise, next_token_probs, outcome_labeler, run_exactness,
    sample_outcomes)
from specdec_core.teaching.toy import make_toy_pair


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def toy():
    return make_toy_pair(0.0)


# --- settings and the exact distribution ------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(n_tokens=3), "1 or 2 tokens"),
    (dict(n_runs=0), "number of runs"),
    (dict(n_runs=True), "number of runs"),
    (dict(k=0), "k must be between"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(support_cap=0), "support_cap"),
])
def test_settings_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LabSettings(**kwargs)


def test_runs_ask_for_k_extra_tokens_so_the_first_iteration_drafts():
    s = LabSettings(n_tokens=2, k=3, n_runs=5, seed=10)
    cfg = s.spec_config(4)
    assert cfg.max_new_tokens == 5 and cfg.seed == 14 and cfg.k == 3


def test_exact_one_token_matches_the_model(toy):
    ids = toy.tokenizer.encode("the cat")
    ex = exact_distribution(toy.target, ids, 1, 0.7, top_k=3)
    assert ex.probs.shape == (10,) and ex.other_prob == 0.0
    assert ex.probs.sum() == pytest.approx(1.0)
    assert (ex.probs > 0).sum() == 3                                    # top-k support: sat, ran, "."
    direct = torch.softmax(toy.target.table[ids[-1]] / 0.7, -1)
    top = torch.topk(direct, 3).indices
    assert np.allclose(ex.probs[top.numpy()], (direct[top] / direct[top].sum()).numpy(), atol=1e-6)


def test_exact_two_tokens_is_the_joint(toy):
    ids = toy.tokenizer.encode("the")
    ex = exact_distribution(toy.target, ids, 2, 1.0)
    assert ex.probs.sum() + ex.other_prob == pytest.approx(1.0)
    cat, sat = toy.tokenizer.encode("cat sat")
    p1 = next_token_probs(toy.target, [ids], 1.0)[0]
    p2 = next_token_probs(toy.target, [ids + [cat]], 1.0)[0]
    assert ex.probs[ex.index((cat, sat))] == pytest.approx(float(p1[cat] * p2[sat]), rel=1e-5)
    assert ex.outcome(ex.index((cat, sat))) == (cat, sat)


def test_two_token_cap_pools_the_rest_with_its_exact_mass(toy):
    ids = toy.tokenizer.encode("the")
    ex = exact_distribution(toy.target, ids, 2, 1.0, support_cap=3)
    p1 = next_token_probs(toy.target, [ids], 1.0)[0].double()
    assert len(ex.first) == 3
    assert ex.other_prob == pytest.approx(1.0 - float(torch.topk(p1, 3).values.sum()), abs=1e-9)
    assert ex.probs.sum() + ex.other_prob == pytest.approx(1.0)
    assert "3 most likely of 10" in ex.note
    outside = [t for t in range(10) if t not in ex.first][0]
    assert ex.index((outside, 0)) == -1


def test_eos_first_token_is_one_terminal_outcome():
    model = make_tiny_lm(vocab_size=6, seed=3, scale=3.0)
    ex = exact_distribution(model, [1, 2, 3], 2, 1.0, eos_token_id=4)
    p1 = next_token_probs(model, [[1, 2, 3]], 1.0)[0]
    assert ex.probs[ex.index((4,))] == pytest.approx(float(p1[4]), rel=1e-5)   # (EOS,) carries all of p(EOS)
    assert ex.probs.sum() + ex.other_prob == pytest.approx(1.0)


# --- statistics -----------------------------------------------------------------------------------------

def test_tv_noise_shrinks_like_one_over_root_n():
    probs = np.array([0.5, 0.3, 0.2])
    assert expected_tv_noise(probs, 400) == pytest.approx(expected_tv_noise(probs, 100) / 2, rel=1e-6)


def _outcomes(counts: dict) -> Outcomes:
    c = Counter(counts)
    n = sum(c.values())
    return Outcomes(c, n, n, 0.0)


def test_compare_verdicts_on_hand_made_counts():
    ex = ExactDistribution(1, 3, np.array([0.5, 0.3, 0.2]), [], 0.0)
    label = outcome_labeler(None)
    good = compare(ex, _outcomes({(0,): 502, (1,): 297, (2,): 201}), label)
    assert good.verdict == "exact" and good.p_value > 0.5 and good.tv < 0.01
    bad = compare(ex, _outcomes({(0,): 600, (1,): 250, (2,): 150}), label)
    assert bad.verdict == "biased" and bad.p_value < 1e-6 and bad.tv == pytest.approx(0.1)
    assert [b.texts for b in good.bins][:3] == [["#0"], ["#1"], ["#2"]]
    point = ExactDistribution(1, 3, np.array([0.0, 1.0, 0.0]), [], 0.0)
    assert compare(point, _outcomes({(1,): 40}), label).verdict == "exact"
    impossible = compare(point, _outcomes({(1,): 39, (2,): 1}), label)
    assert impossible.verdict == "biased" and impossible.impossible == 1


# --- end to end through the engine: the correct engine passes, the bugs are caught ---------------------

N = 2000


def _lab(toy, bugs=InjectedBugs(), n_tokens=2, k=2, n_runs=N):
    s = LabSettings(n_tokens=n_tokens, k=k, temperature=1.0, n_runs=n_runs, seed=0)
    return run_exactness(toy.target, toy.draft, toy.tokenizer.encode("the cat"), s, "toy", toy.tokenizer, bugs)


def test_a_short_lab_run_counts_every_run_and_names_its_bugs(toy):
    """The lab's plumbing on 200 runs; the verdicts' power (2000 runs each) is checked in the slow suite."""
    r = _lab(toy, InjectedBugs(resample_from_p=True), n_runs=200)
    o, c = r.outcomes, r.comparison
    assert o.n_runs == o.drafted_runs == 200 and 0 < o.accepted < o.tested
    assert o.resampled > 0 and o.bonus > 0 and sum(o.counts.values()) == 200
    assert c.n == 200 and sum(b.observed for b in c.bins) <= 200 and c.p_value is not None
    assert r.bugs == ["resample_from_p"] and any("Expect a bias" in n for n in r.notes)


@pytest.mark.slow
def test_correct_engine_passes(toy):
    r = _lab(toy)
    c = r.comparison
    assert c.verdict == "exact", c.message
    assert c.p_value > 0.01 and c.tv < 2 * c.tv_noise
    o = r.outcomes
    assert o.n_runs == N and o.drafted_runs == N and 0 < o.accepted < o.tested   # drafts really were tested
    assert o.resampled > 100 and o.bonus > 50                                     # both endings exercised
    assert sum(b.observed for b in c.bins) == N


@pytest.mark.slow
@pytest.mark.parametrize("bugs", [InjectedBugs(resample_from_p=True), InjectedBugs(greedy_draft_ratio_rule=True),
                                  InjectedBugs(draft_temperature=2.0)], ids=lambda b: b.names()[0])
def test_each_biasing_bug_is_flagged(toy, bugs):
    r = _lab(toy, bugs)
    assert r.comparison.verdict == "biased", r.comparison.message
    assert r.comparison.p_value < 1e-6
    assert r.bugs == bugs.names()
    assert any("Expect a bias" in n for n in r.notes)


@pytest.mark.slow
def test_dropping_the_bonus_is_honestly_not_a_bias(toy):
    """K = 1, two tokens: after an accepted draft the bonus is thrown away and the second token comes
    from the next iteration, so the switch is exercised, and the distribution stays exact."""
    correct = _lab(toy, k=1)
    dropped = _lab(toy, InjectedBugs(drop_bonus=True), k=1)
    assert dropped.outcomes.bonus == 0 and correct.outcomes.bonus > 0
    assert dropped.outcomes.counts != correct.outcomes.counts                    # a different code path ran
    assert dropped.comparison.verdict == "exact", dropped.comparison.message
    assert any("costs speed, not correctness" in n for n in dropped.notes)


def test_progress_and_time_budget(toy):
    seen = []
    s = LabSettings(n_tokens=1, k=2, n_runs=300, seed=0)
    out = sample_outcomes(toy.target, toy.draft, toy.tokenizer.encode("the"), s, toy.tokenizer,
                          on_progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (300, 300) and len(seen) >= 100
    assert out.n_runs == 300 and not out.stopped_early
    cut = sample_outcomes(toy.target, toy.draft, toy.tokenizer.encode("the"), s, toy.tokenizer, time_budget_s=0.0)
    assert cut.n_runs == 1 and cut.stopped_early


def test_ngram_drafting_nothing_is_reported(toy):
    """A prompt without a repeat: prompt lookup proposes nothing, and the lab says so."""
    s = LabSettings(n_tokens=1, k=2, n_runs=20, seed=0)
    r = run_exactness(toy.target, NGramDrafter(), toy.tokenizer.encode("the cat"), s, "ngram", toy.tokenizer)
    assert r.outcomes.drafted_runs == 0
    assert "proposed nothing" in r.notes[0]


def test_bug_notes_are_honest_about_switches_that_cannot_bias():
    notes = bug_notes(InjectedBugs(greedy_draft_ratio_rule=True, draft_temperature=2.0), "ngram", 1.0)
    assert all("does not apply" in n for n in notes) and len(notes) == 2
    assert "no effect" in bug_notes(InjectedBugs(resample_from_p=True), "self", 1.0)[0]
    assert "no effect in greedy mode" in bug_notes(InjectedBugs(greedy_draft_ratio_rule=True), "toy", 0.0)[0]
    assert bug_notes(InjectedBugs(), "toy", 1.0) == []
    with pytest.raises(ValueError, match="unknown setup"):
        bug_notes(InjectedBugs(), "other", 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("setup, bugs, verdict", [
    ("ngram", InjectedBugs(), "exact"),
    ("ngram", InjectedBugs(resample_from_p=True), "biased"),
    # the self-draft's two bugs take about two minutes each: make test-long
    pytest.param("self", InjectedBugs(greedy_draft_ratio_rule=True), "biased", marks=pytest.mark.long),
    pytest.param("self", InjectedBugs(draft_temperature=0.5), "biased", marks=pytest.mark.long),
])
def test_bundled_model_lab(bundled, setup, bugs, verdict):
    """The lab on SmolLM2 with its default prompt (prompt lookup finds " four, five")."""
    model, tok = bundled
    ids = tok.encode("one, two, three, four, five. one, two, three,")
    s = LabSettings(n_tokens=1, k=3, temperature=1.0, n_runs=120, seed=0)
    r = run_exactness(model, NGramDrafter() if setup == "ngram" else model, ids, s, setup, tok, bugs)
    assert r.outcomes.drafted_runs == 120
    assert r.comparison.verdict == verdict, r.comparison.message
