"""The batch section of the bench: its settings from the command line, and a short run on the bundled model
(slow): every side's rows equal the baseline's, a speedup per batch size, the cost-aware K beside the fixed ones,
the crossovers, the markdown."""
import pytest

from specdec_core.bench import command as bench
from specdec_core.bench.batch import FIXED_KS, BatchSettings, render_batch, run_batch_bench, validate_batch


def test_batch_settings_from_the_command_line():
    s = bench.settings_from_args(bench.build_parser().parse_args(["--only", "batch", "--batch-sizes", "1,2,8"]))
    assert s.batch == BatchSettings(sizes=(1, 2, 8)) and s.coupling is None and not s.theory
    assert bench.settings_from_args(bench.build_parser().parse_args(["--only", "tree"])).batch is None
    for bad in (["--batch-sizes", "1,99"], ["--batch-sizes", "4,2"], ["--batch-sizes", "x"],
                ["--batch-drafts", "self"], ["--batch-rounds", "1"]):
        with pytest.raises(ValueError):
            bench.settings_from_args(bench.build_parser().parse_args(["--only", "batch", *bad]))
    validate_batch(BatchSettings())


@pytest.mark.slow
def test_a_short_batch_bench_on_the_bundled_model(bundled):
    model, tok = bundled
    report = run_batch_bench(model, tok, BatchSettings(sizes=(1, 2), drafts=("ngram",), max_new_tokens=8,
                                                       repeats=2), log=lambda msg: None)
    for b in (1, 2):
        entry = report["sizes"][b]
        assert entry["baseline_tokens_per_s"] > 0
        for k in FIXED_KS:
            side = entry["sides"][f"ngram K={k}"]
            assert side["identical"] and side["speedup"] > 0 and side["low"] <= side["speedup"] <= side["high"]
        best = entry["best"]["ngram"]
        assert best["speedup"] >= 1.0 and best["cost"] > 0 and 0 <= best["cost_mean_k"] <= max(FIXED_KS)
    assert "this machine (measured prices)" in report["predicted"]["ngram"]["crossover"]
    text = render_batch(report)
    assert "| ngram | 2 |" in text and "where speculation stops paying" in text
