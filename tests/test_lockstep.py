"""Lockstep: streams advanced least-used-time first, each run timing only its own steps."""
import time
from types import SimpleNamespace

import pytest

from conftest import make_tiny_lm
from specdec_core.config import SpecConfig
from specdec_core.drafters.model import ModelDrafter
from specdec_core.drafters.ngram import NGramDrafter
from specdec_core.decoding.baseline import baseline_generate, stream_baseline
from specdec_core.decoding.engine import speculative_generate, stream_speculative
from specdec_core.decoding.lockstep import elapsed_ms, run_lockstep


def fake(name: str, step_ms: float, steps: int, log: list):
    """A stream whose every step costs ``step_ms`` of its own time."""
    used = 0.0
    for i in range(steps):
        used += step_ms
        log.append(name)
        yield SimpleNamespace(wall_ms=used, i=i)


def test_the_stream_that_used_least_time_goes_next():
    log: list = []
    out = run_lockstep({"slow": fake("slow", 30.0, 2, log), "fast": fake("fast", 10.0, 6, log)})
    assert out["slow"].i == 1 and out["fast"].i == 5
    # both start at 0 (name order), then whoever has used less: they move through the same 60 ms together
    assert log == ["fast", "slow", "fast", "fast", "fast", "slow", "fast", "fast"]


def test_every_step_is_reported_with_the_latest_results():
    seen: list = []
    run_lockstep({"a": fake("a", 10.0, 2, []), "b": fake("b", 10.0, 1, [])},
                 lambda last: seen.append({n: r.i for n, r in last.items()}))
    assert seen == [{"a": 0}, {"a": 0, "b": 0}, {"a": 1, "b": 0}]


def test_elapsed_reads_traces_and_baselines():
    assert elapsed_ms(SimpleNamespace(stats=SimpleNamespace(wall_ms=5.0))) == 5.0
    assert elapsed_ms(SimpleNamespace(wall_ms=7.0)) == 7.0


def test_an_error_closes_the_other_streams_and_goes_on():
    closed = []

    def other():
        try:
            for i in range(10):
                yield SimpleNamespace(wall_ms=float(i))
        finally:
            closed.append(True)

    def broken():
        yield SimpleNamespace(wall_ms=1.0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_lockstep({"a": broken(), "b": other()})
    assert closed == [True]
    with pytest.raises(RuntimeError, match="ended without a result"):
        run_lockstep({"empty": iter(())})


def test_real_runs_in_lockstep_give_their_solo_results_and_time_only_their_own_steps(one_thread):
    target, draft = make_tiny_lm(vocab_size=32, seed=3, layers=2), make_tiny_lm(vocab_size=32, seed=4)
    ids = [3, 7, 1, 9, 3, 7, 1, 4, 3, 7, 1, 9]
    cfg = SpecConfig(k=3, max_new_tokens=24, full_trace=False)
    solo = {"ngram": speculative_generate(target, NGramDrafter(), ids, cfg).new_token_ids,
            "model": speculative_generate(target, ModelDrafter(draft), ids, cfg).new_token_ids,
            "baseline": baseline_generate(target, ids, cfg).new_token_ids}
    t0 = time.perf_counter()
    out = run_lockstep({"ngram": stream_speculative(target, NGramDrafter(), ids, cfg),
                        "model": stream_speculative(target, ModelDrafter(draft), ids, cfg),
                        "baseline": stream_baseline(target, ids, cfg)})
    total_ms = 1000 * (time.perf_counter() - t0)
    assert {n: r.new_token_ids for n, r in out.items()} == solo
    own = [elapsed_ms(r) for r in out.values()]
    assert all(ms > 0 for ms in own)
    assert sum(own) <= total_ms                     # no run counted another's steps
