"""Measured sweeps: acceptance vs agreement (toy), the speedup table's cost model, the K sweep, and
draft comparison / automatic selection with an incompatible candidate listed by its failed check."""
import math

import pytest

from conftest import make_tiny_lm
from specdec_core import ModelDrafter, NGramDrafter, SpecConfig
from specdec_core.teaching.sweeps import (Candidate, acceptance_vs_agreement, check_candidate, evaluate_drafts,
    k_sweep, simulated_speedup, speedup_table)
from specdec_core.policy.closed_form import speedup
from specdec_core.teaching.toy import ToyTokenizer, make_toy_pair


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def points():
    return acceptance_vs_agreement([0.0, 0.5, 1.0], k=4, temperature=1.0, n_tokens=600, seed=0)


def test_measured_acceptance_tracks_the_exact_overlap(points):
    for pt in points:
        se = math.sqrt(max(pt.exact_alpha * (1 - pt.exact_alpha), 1e-12) / pt.tested)
        assert abs(pt.measured_alpha - pt.exact_alpha) < 4 * se + 1e-9, pt
    assert points[0].exact_alpha < points[1].exact_alpha < points[2].exact_alpha == pytest.approx(1.0)
    assert points[2].measured_alpha == 1.0


def test_simulated_speedup_prices_the_forwards_the_engine_ran(points):
    full = points[2]                                      # q = p: every iteration emits K + 1 tokens
    assert full.iterations == pytest.approx(full.new_tokens / 5, abs=1)
    assert simulated_speedup(full, 0.0) == pytest.approx(5.0, rel=0.02)
    assert simulated_speedup(full, 1.0) == pytest.approx(1.0, rel=0.02)   # c = 1: no gain at all
    mid = points[1]
    # the measured cost model agrees with the closed form at the measured alpha (within sampling noise)
    assert simulated_speedup(mid, 0.1) == pytest.approx(speedup(mid.exact_alpha, 4, 0.1), rel=0.1)
    assert simulated_speedup(mid, 0.5) < simulated_speedup(mid, 0.1)


def test_speedup_table_layout(points):
    headers, rows = speedup_table(points, [0.0, 0.5], k=4)
    assert headers == ["agreement", "α measured", "α exact", "c = 0", "c = 0.5"]
    assert len(rows) == 3 and all(len(r) == 5 for r in rows)
    assert rows[2][3] == "×5.00 (×5.00)"


def test_sweep_rejects_bad_input():
    with pytest.raises(ValueError, match="agreement levels"):
        acceptance_vs_agreement([])
    with pytest.raises(ValueError, match="temperature > 0"):
        acceptance_vs_agreement([0.5], temperature=0.0)
    with pytest.raises(ValueError, match="agreement must be between"):
        acceptance_vs_agreement([1.5])


def test_k_sweep_on_tiny_models(tiny_pair):
    target, draft = tiny_pair
    cfg = SpecConfig(k=1, temperature=0.0, max_new_tokens=24, seed=0)
    seen = []
    sw = k_sweep(target, draft, [1, 2, 3, 4], cfg, [1, 2, 3], on_progress=lambda d, t: seen.append((d, t)))
    assert [r.k for r in sw.runs] == [1, 2, 3]
    assert seen[-1] == (4 * 24, 4 * 24)                   # tokens of the baseline and the three runs
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) > 4
    assert all(r.same_as_baseline for r in sw.runs)       # greedy, float32: identical to target-only
    assert all(r.new_tokens == 24 for r in sw.runs)
    assert sw.best_k == max(sw.runs, key=lambda r: r.tokens_per_s).k
    assert sw.alpha is not None and 0 <= sw.alpha <= 1 and sw.c is not None and sw.c > 0
    assert len(sw.theory_tokens_per_s) == 3 and sw.theory_k() in (1, 2, 3)
    assert sw.theory_tokens_per_s[0] == pytest.approx(sw.baseline_tokens_per_s * speedup(sw.alpha, 1, sw.c))
    assert sw.hindsight_tokens_per_s is None and sw.hindsight_ks == []    # a draft model: no replay


def test_k_sweep_runs_a_tree_of_n_equal_k_nodes_next_to_each_chain(tiny_pair):
    target, draft = tiny_pair
    cfg = SpecConfig(k=1, temperature=0.0, max_new_tokens=12, seed=0)
    seen = []
    sw = k_sweep(target, draft, [1, 2, 3, 4], cfg, [2, 3], on_progress=lambda d, t: seen.append((d, t)),
                 tree_top_k=2)
    assert [r.k for r in sw.tree_runs] == [2, 3] and seen[-1] == (5 * 12, 5 * 12)
    assert all(r.same_as_baseline for r in sw.runs + sw.tree_runs)   # greedy trees: target-only output exactly
    assert all(0 < r.drafts_per_iteration <= r.k for r in sw.tree_runs)   # nodes per iteration within the budget
    assert not k_sweep(target, draft, [1, 2, 3, 4], cfg, [2]).tree_runs


def test_k_sweep_with_prompt_lookup_gets_the_hindsight_ceiling(tiny_pair):
    target, _ = tiny_pair
    cfg = SpecConfig(k=1, temperature=0.0, max_new_tokens=16, seed=0)
    prompt = [3, 7, 1, 5, 3, 7, 1, 4, 3, 7, 1, 5]            # the 8-token vocabulary of the tiny pair
    sw = k_sweep(target, NGramDrafter(), prompt, cfg, [1, 2, 3])
    assert sw.hindsight_tokens_per_s is not None and sw.hindsight_tokens_per_s > 0
    assert sw.hindsight_ks and max(sw.hindsight_ks) <= 3
    assert len(sw.hindsight_ks) <= min(r.new_tokens for r in sw.runs)     # one K per iteration it plans
    sampled = k_sweep(target, NGramDrafter(), prompt, SpecConfig(k=1, temperature=1.0, max_new_tokens=8, seed=0), [1])
    assert sampled.hindsight_tokens_per_s is None                       # sampled: the output depends on K


class Logged(NGramDrafter):
    """Prompt lookup that logs which instance proposes; ``fresh`` ones share the log (``fresh=False``: none)."""

    def __init__(self, log: list, fresh: bool = True) -> None:
        super().__init__()
        self.log = log
        if not fresh:
            self.fresh = None

    def fresh(self):
        return Logged(self.log)

    def propose(self, ids, k, policy):
        self.log.append(self)
        return super().propose(ids, k, policy)


def test_k_sweep_runs_side_by_side_with_fresh_drafters_and_in_turn_without(tiny_pair):
    target, _ = tiny_pair
    cfg = SpecConfig(k=1, temperature=0.0, max_new_tokens=12, seed=0)
    prompt = [3, 7, 1, 5, 3, 7, 1, 4, 3, 7, 1, 5]
    results = []
    for fresh in (True, False):
        log: list = []
        original = Logged(log, fresh)
        sw = k_sweep(target, original, prompt, cfg, [1, 2, 3])
        runs = [d for d in log if d is not original]         # the original proposes only in the hindsight pass
        order = [d for n, d in enumerate(runs) if n == 0 or runs[n - 1] is not d]   # runs of one merged
        assert len({id(d) for d in runs}) == (3 if fresh else 0)            # a state per run, or the one shared
        if fresh:
            assert len(order) > 3                                            # interleaved, not one after another
        results.append([(r.k, r.new_tokens, r.tokens_per_iteration, r.same_as_baseline) for r in sw.runs])
    assert results[0] == results[1]                                          # the same runs either way
    assert all(same for *_, same in results[0])


def test_fresh_drafters_share_the_weights_and_not_the_state(tiny_pair):
    target, draft = tiny_pair
    a = ModelDrafter(draft, name="d")
    b = a.fresh()
    a.start([1, 2, 3])
    assert b.model is a.model and b.name == "d" and b.cache is None and a.cache is not None
    n = NGramDrafter(max_ngram=4, min_ngram=2).fresh()
    assert (n.max_ngram, n.min_ngram, n._prompt_len) == (4, 2, None)


def test_k_sweep_rejects_bad_k(tiny_pair):
    target, draft = tiny_pair
    cfg = SpecConfig(k=1, temperature=0.0, max_new_tokens=4)
    for ks in ([], [0], [1.5], list(range(1, 40))):
        with pytest.raises(ValueError):
            k_sweep(target, draft, [1, 2], cfg, ks)


def test_incompatible_candidates_name_the_failed_check(tiny_pair):
    target, _ = tiny_pair
    other_vocab = make_tiny_lm(vocab_size=12, seed=5)
    r = check_candidate(target, None, Candidate("12-token model", other_vocab))
    assert r is not None and r.check == "vocab size" and "12" in r.message
    toy = make_toy_pair(0.5)
    r = check_candidate(toy.target, ToyTokenizer(), Candidate("short vocabulary", toy.draft,
                                                               ToyTokenizer(("a", "b", "c"))))
    assert r is not None and r.check == "vocab size" and "tokenizer check 'vocab size' failed" in r.message
    r = check_candidate(target, None, Candidate("hub model", error="could not load 'x/y': no network"))
    assert r.check == "load" and "no network" in r.message
    assert check_candidate(target, None, Candidate("ngram", NGramDrafter())) is None


def test_evaluate_ranks_by_measured_speedup(tiny_pair):
    target, draft = tiny_pair
    cands = [Candidate("tiny draft", ModelDrafter(draft)), Candidate("self", ModelDrafter(target)),
             Candidate("ngram", NGramDrafter()), Candidate("12-token model", make_tiny_lm(vocab_size=12, seed=5))]
    prompts = ["a", "b"]
    ids = [[1, 2, 3, 1, 2], [4, 5, 6]]
    seen = []
    sel = evaluate_drafts(target, None, cands, prompts, ids, SpecConfig(k=3, temperature=0.0, max_new_tokens=16),
                          on_progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (8, 8)                             # 2 prompts x (baseline + 3 compatible drafts)
    assert [r.name for r in sel.rejected] == ["12-token model"]
    assert {r.name for r in sel.ranking} == {"tiny draft", "self", "ngram"}
    speeds = [r.mean_speedup for r in sel.ranking]
    assert speeds == sorted(speeds, reverse=True) and sel.best == sel.ranking[0].name
    for r in sel.ranking:
        assert len(r.runs) == 2 and all(x.same_as_baseline for x in r.runs)
        assert r.mean_speedup == pytest.approx(sum(x.speedup for x in r.runs) / 2)
    self_run = next(r for r in sel.ranking if r.name == "self")
    assert self_run.mean_acceptance == 1.0                # the target drafting for itself: q = p
    assert len(sel.baseline_tokens_per_s) == 2 and all(t > 0 for t in sel.baseline_tokens_per_s)
    with pytest.raises(ValueError, match="at least one prompt"):
        evaluate_drafts(target, None, cands, [], [], SpecConfig())
