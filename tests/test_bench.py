"""The benchmark's pieces on tiny in-process models (seconds, never the full bench): interleaving,
the output-identity check that refuses a ratio, medians and min-max, aggregates and targets, the
transformers side-by-side runners, the in-process drafts, the report and its JSON."""
import json

import pytest
import torch

from conftest import make_tiny_lm
from specdec_core import ModelDrafter, NGramDrafter, SpecConfig
from specdec_core.bench import command as bench, report as bench_report
from specdec_core.bench.measure import (ASSISTANT_FIELDS, BenchPrompt, RunResult, Spread, aggregate, first_difference, hf_generate,
    interleave, ours_baseline, ours_speculative, output_mismatch)
from specdec_core.bench.settings import BenchSettings
from specdec_core.bench.measure import Comparison, compare
from specdec_core.bench.runner import Group, run_group
from specdec_core.bench.models import early_exit_draft
from specdec_core.bench.report import render_report, side_rows

PROMPT = [3, 7, 1, 9, 3, 7, 1, 4, 3, 7, 1, 9]
EXTRACTIVE = BenchPrompt("p", "extractive", "unused")


@pytest.fixture(scope="module")
def lms():
    torch.set_num_threads(1)
    target = make_tiny_lm(vocab_size=32, seed=11, scale=6.0, layers=3)
    return target, early_exit_draft(target, 1)


def fake(tokens, seconds):
    return RunResult(tokens=list(tokens), seconds=seconds)


def test_interleave_warms_up_then_alternates_order():
    calls = []

    def runner(name):
        def run():
            calls.append(name)
            return fake([1], 1.0)
        return run
    results = interleave({n: runner(n) for n in "ABC"}, repeats=3)
    assert calls == list("ABC" + "ABC" + "CBA" + "ABC")       # warm-up round, then A B C / C B A / ...
    assert {n: len(r) for n, r in results.items()} == {"A": 3, "B": 3, "C": 3}
    calls.clear()
    interleave({n: runner(n) for n in "AB"}, repeats=2, warmup=False)
    assert calls == list("ABBA")
    with pytest.raises(ValueError, match="repeats"):
        interleave({"A": runner("A")}, repeats=0)


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_ratio_is_median_of_paired_rounds_with_min_max():
    results = {"a": [fake(range(10), s) for s in (1.0, 2.0, 1.0)],
               "b": [fake(range(10), s) for s in (2.0, 2.0, 4.0)]}
    c = compare("job", "a vs b", "a", "b", EXTRACTIVE, results)
    assert c.refused is None
    assert (c.ratio.median, c.ratio.min, c.ratio.max, c.ratio.n) == (2.0, 1.0, 4.0, 3)


def test_ratio_refused_when_outputs_differ():
    results = {"a": [fake([1, 2, 3], 1.0)] * 2, "b": [fake([1, 2, 4], 2.0)] * 2}
    c = compare("job", "a vs b", "a", "b", EXTRACTIVE, results)
    assert c.ratio is None and "new token 2" in c.refused and "(4 vs 3" in c.refused
    # one side not even agreeing with itself across rounds is refused as well
    results = {"a": [fake([1, 2, 3], 1.0), fake([1, 2], 1.0)], "b": [fake([1, 2, 3], 2.0)] * 2}
    c = compare("job", "a vs b", "a", "b", EXTRACTIVE, results)
    assert c.ratio is None and "round 2" in c.refused and "lengths 2 vs 3" in c.refused
    assert output_mismatch({"x": [fake([5], 1.0)], "y": [fake([5], 9.0)]}) is None


def test_aggregate_geometric_mean_refusals_and_targets():
    comps = [Comparison("j", "l", "a", "b", "p1", "extractive", Spread(4.0, 3.0, 5.0, 3), None),
             Comparison("j", "l", "a", "b", "p2", "extractive", Spread(1.0, 0.5, 1.5, 3), None),
             Comparison("j", "l", "a", "b", "p3", "open-ended", None, "outputs differ: ...")]
    agg = aggregate(comps, "j", "l", "extractive", at_least=1.5)
    assert agg.ratio == pytest.approx(2.0) and (agg.lo, agg.hi) == (0.5, 5.0) and agg.met
    assert (agg.prompts, agg.refused, agg.goal) == (2, 0, ">= 1.50")
    everything = aggregate(comps, "j", "l", "all", at_least=2.5)
    assert (everything.prompts, everything.refused, everything.met) == (3, 1, False)
    none = aggregate(comps, "j", "l", "open-ended", at_least=1.0)
    assert none.ratio is None and none.met is None


def test_real_runs_side_by_side_identical_and_reported(lms, tmp_path):
    """Ours (n-gram, model draft, target-only) against transformers' prompt lookup, assisted and
    plain generate, on tiny models: greedy outputs match token for token, so ratios are reported;
    a side asked for a different length is refused. The report and its JSON carry medians and ranges."""
    target, draft = lms
    n = 24
    roles = {"target": target, "draft": draft}
    t = {"target": target}
    group = Group("tiny", {
        "ours target-only": ours_baseline(target, PROMPT, SpecConfig(max_new_tokens=n), None),
        "hf generate": hf_generate(target, PROMPT, n, None, t),
        "ours ngram": ours_speculative(target, NGramDrafter, PROMPT, SpecConfig(k=4, max_new_tokens=n), None, t),
        "hf prompt-lookup": hf_generate(target, PROMPT, n, None, t, prompt_lookup_num_tokens=4),
        "ours draft": ours_speculative(target, lambda: ModelDrafter(draft), PROMPT, SpecConfig(k=3, max_new_tokens=n),
                                       None, roles),
        "hf assisted": hf_generate(target, PROMPT, n, None, roles, assistant_model=draft, num_assistant_tokens=3,
                                   num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0),
        "ours shorter": ours_baseline(target, PROMPT, SpecConfig(max_new_tokens=n - 1), None),
    }, [("ngram", "vs hf", "ours ngram", "hf prompt-lookup"), ("draft", "vs hf", "ours draft", "hf assisted"),
        ("base", "vs hf", "ours target-only", "hf generate"), ("bad", "vs short", "ours target-only", "ours shorter")])
    results, comps = run_group(group, EXTRACTIVE, repeats=2, warmup=False)
    by_job = {c.job: c for c in comps}
    for job in ("ngram", "draft", "base"):
        assert by_job[job].refused is None and by_job[job].ratio.n == 2 and by_job[job].ratio.median > 0
        assert by_job[job].cpu_ratio is not None and by_job[job].cpu_ratio.median > 0
    assert by_job["bad"].ratio is None and "lengths 23 vs 24" in by_job["bad"].refused
    assert results["ours draft"][0].forwards == {"target": 1 + results["ours draft"][0].iterations,
                                                 "draft": results["ours draft"][0].forwards["draft"]}
    assert results["hf assisted"][0].forwards["draft"] > 0 and results["hf generate"][0].forwards == {"target": n}
    assert all(0 < r.forward_s < r.seconds and r.cpu_seconds > 0 for runs in results.values() for r in runs)
    assert all(r.others_cores is None or r.others_cores >= 0 for runs in results.values() for r in runs)

    s = BenchSettings(prompts=("p",), repeats=2, max_new_tokens=n)
    report = bench_report.make_report(s, {"cpu": "test", "cores": 1, "torch_threads": 1, "torch": "t", "transformers": "t",
                                   "python": "3", "cuda": None}, "now", side_rows(EXTRACTIVE, "tiny", len(PROMPT), results),
                               comps)
    text = render_report(report)
    ngram_tps = Spread.of([r.tokens_per_s for r in results["ours ngram"]])
    assert f"{ngram_tps.median:.1f} [{ngram_tps.min:.1f}–{ngram_tps.max:.1f}]" in text
    assert "REFUSED" in text and "| ngram | vs hf |" in text and "Other processes" in text
    path = tmp_path / "out" / "bench.json"
    bench_report.write_json(report, str(path))
    again = json.loads(path.read_text())
    assert again["comparisons"] == json.loads(json.dumps(report["comparisons"]))
    assert {row["name"] for row in again["sides"]} == set(group.runners)
    assert all(len(row["runs"]) == 2 for row in again["sides"])


def test_assistant_settings_reach_transformers_and_are_restored(lms):
    """transformers reads K / schedule / threshold from the assistant's generation_config: the runner sets
    them there for the call (K drafts per round, no early stop) and restores them afterwards."""
    target, draft = lms
    before = {f: getattr(draft.generation_config, f, None) for f in ASSISTANT_FIELDS}
    seen = []
    handle = draft.register_forward_pre_hook(
        lambda m, a: seen.append((draft.generation_config.num_assistant_tokens,
                                  draft.generation_config.assistant_confidence_threshold)))
    try:
        run = hf_generate(target, PROMPT, 12, None, {"target": target, "draft": draft}, assistant_model=draft,
                          num_assistant_tokens=5, num_assistant_tokens_schedule="constant",
                          assistant_confidence_threshold=0.0)
        res = run()
    finally:
        handle.remove()
    assert seen and set(seen) == {(5, 0.0)}
    assert {f: getattr(draft.generation_config, f, None) for f in ASSISTANT_FIELDS} == before
    assert len(res.tokens) == 12


def test_early_exit_draft_shares_the_targets_weights(lms):
    target, draft = lms
    assert len(draft.model.layers) == 1 and draft.model.layers[0] is target.model.layers[0]
    assert draft.lm_head is target.lm_head and draft.model.embed_tokens is target.model.embed_tokens
    assert not any(p.is_meta for p in draft.parameters())
    with torch.no_grad():
        assert draft(input_ids=torch.tensor([PROMPT])).logits.shape == (1, len(PROMPT), 32)
    with pytest.raises(ValueError, match="n_layers"):
        early_exit_draft(target, 3)
    with pytest.raises(ValueError, match="Llama-style"):
        early_exit_draft(torch.nn.Linear(2, 2), 1)


def test_cli_settings_and_bad_arguments(capsys):
    args = bench.build_parser().parse_args(["--quick"])
    s = bench.settings_from_args(args)
    assert (s.prompts, s.repeats, s.max_new_tokens) == (bench.QUICK_PROMPTS, 2, 32)
    full = bench.settings_from_args(bench.build_parser().parse_args([]))
    kinds = {p.kind for p in bench.PROMPTS if p.name in full.prompts}
    assert kinds == {"extractive", "open-ended"} and full.pairs == ("self", "trained", "feature", "tiny")
    for argv, message in ((["--repeats", "0"], "repeats must be >= 1"), (["--prompts", "nope"], "unknown"),
                          (["--pairs", "self,huge"], "unknown pair"), (["--ngram-k", "0"], "ngram_k"),
                          (["--max-new-tokens", "0"], "max_new_tokens")):
        assert bench.main(argv) == 2               # refused before any model is loaded
        assert message in capsys.readouterr().err


def test_draft_figures_pool_acceptance_and_take_c_against_the_same_prompts_baseline():
    def side(prompt, kind, name, ms, runs, tpi=None):
        return {"prompt": prompt, "kind": kind, "group": "bundled", "name": name, "ms_per_forward": ms,
                "tokens_per_iteration": tpi, "runs": runs}
    sides = [side("a", "open-ended", "ours target-only", {"target": 40.0}, [{}]),
             side("a", "open-ended", "ours draft[feature]", {"target": 60.0, "draft": 4.0},
                  [{"drafted": 8, "accepted": 2}, {"drafted": 8, "accepted": 4}], 1.5),
             side("b", "extractive", "ours target-only", {"target": 50.0}, [{}]),
             side("b", "extractive", "ours draft[feature]", {"target": 60.0, "draft": 10.0},
                  [{"drafted": 4, "accepted": 4}], 3.0),
             side("b", "extractive", "ours draft[feature] min-trace", {"draft": 1.0}, [{"drafted": 9, "accepted": 0}]),
             side("a", "open-ended", "ours default draft[feature]", {"target": 60.0, "draft": 4.0},
                  [{"drafted": 3, "accepted": 2}], 1.8)]
    all_figs = bench_report.draft_figures(sides)
    defaults = [f for f in all_figs if f["settings"] == "defaults"]
    assert [(f["kind"], f["acceptance"]) for f in defaults] == [("open-ended", 2 / 3), ("all", 2 / 3)]
    figs = {(f["pair"], f["kind"]): f for f in all_figs if f["settings"] == "fixed K"}
    assert set(figs) == {("feature", "open-ended"), ("feature", "extractive"), ("feature", "all")}
    assert figs[("feature", "open-ended")]["acceptance"] == 6 / 16 and figs[("feature", "open-ended")]["c"] == 0.1
    assert figs[("feature", "all")]["acceptance"] == 10 / 20
    assert abs(figs[("feature", "all")]["c"] - 0.15) < 1e-12 and figs[("feature", "all")]["tokens_per_iteration"] == 2.25


def test_growing_kv_cache_is_bitwise_dynamic_cache(lms):
    """The engine's in-place KV cache (a performance change) gives bitwise the same logits as
    transformers' DynamicCache through prefill, multi-token forwards and rollbacks."""
    from transformers import DynamicCache
    from specdec_core.models.kv_cache import new_kv_cache
    target, _ = lms
    ours, theirs = new_kv_cache(target.config), DynamicCache(config=target.config)
    assert type(ours.layers[0]).__name__ == "GrowingLayer"
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for step, n in enumerate([9, 1, 5, 11, 1, 1, 4] * 12):
            x = torch.randint(0, 32, (1, n), generator=gen)
            a = target(input_ids=x, past_key_values=theirs, use_cache=True, logits_to_keep=n).logits
            b = target(input_ids=x, past_key_values=ours, use_cache=True, logits_to_keep=n).logits
            assert torch.equal(a, b), f"step {step}"
            if step % 3 == 1:
                theirs.crop(-(n // 2 + 1))
                ours.crop(-(n // 2 + 1))
            assert ours.get_seq_length() == theirs.get_seq_length()
    with pytest.raises(ValueError, match="negative"):
        ours.crop(2)
