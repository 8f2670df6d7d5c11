"""Run limits (a run cut at the limit keeps its trace), waiting for a model in turn (first come first
served, place shown, a cancelled wait leaves the line), the bounded export folder, and a fault inside a
Live run (the run ends with a message, the model lock is free, the next run is unchanged)."""
from __future__ import annotations

import os
import threading
import time

import gradio as gr
import pytest

from components.serving.run_limits import (RunClock, RunLimits, acquire_in_turn, prune_exports)
from components.pages.live import new_control, run_live
from components.serving.pairs import PAIR_NGRAM
from conftest import fault_on_forward
from specdec_core import LoadedModel, Trace
from specdec_core.models.pool import FairLock

PROMPT = "Repeat exactly: red green blue, red green blue, red green blue, red green blue."


class OneModelPool:
    def __init__(self, model, tokenizer):
        self.bundled = LoadedModel("bundled", "SmolLM2-135M-Instruct (bundled)", model, tokenizer, FairLock())

    def get(self, key: str) -> LoadedModel:
        if key != "bundled":
            raise RuntimeError(f"could not load {key!r}: no network here (test pool)")
        return self.bundled


@pytest.fixture(scope="module")
def pool(bundled):
    return OneModelPool(*bundled)


def _run(pool, max_new=12, baseline=False, control=None):
    return list(run_live(pool, PAIR_NGRAM, PROMPT, 4, False, 0.0, 0, 1.0, max_new, 0, baseline, True,
                         control, frame_s=0.0, figure_s=0.0))


# --- settings -------------------------------------------------------------------------------------------

def test_limits_from_the_environment():
    assert RunLimits.from_env({}) == RunLimits(120.0, 512)
    assert RunLimits.from_env({"SPECDEC_MAX_RUN_S": "30", "SPECDEC_MAX_RUN_TOKENS": "64"}) == RunLimits(30.0, 64)
    for env, name in [({"SPECDEC_MAX_RUN_S": "soon"}, "SPECDEC_MAX_RUN_S"),
                      ({"SPECDEC_MAX_RUN_S": "-5"}, "SPECDEC_MAX_RUN_S"),
                      ({"SPECDEC_MAX_RUN_TOKENS": "1.5"}, "SPECDEC_MAX_RUN_TOKENS"),
                      ({"SPECDEC_MAX_RUN_TOKENS": "0"}, "SPECDEC_MAX_RUN_TOKENS")]:
        with pytest.raises(ValueError, match=name):
            RunLimits.from_env(env)


def test_run_clock_names_the_limit_reached():
    t = [100.0]
    clock = RunClock(RunLimits(10.0, 50), now=lambda: t[0])
    assert clock.exceeded(49) == ""
    assert "50 tokens" in clock.exceeded(50)
    t[0] = 110.0
    assert "10 s per run" in clock.exceeded(0)


# --- the export folder ----------------------------------------------------------------------------------

def _write(folder, name, size, age_s=0.0):
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def _exports(folder):
    """The sizes of the exported traces left in ``folder``."""
    return sorted(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.startswith("specdec-trace-"))


def test_export_folder_is_bounded_by_age_size_and_count(tmp_path):
    d = str(tmp_path)
    _write(d, "specdec-trace-old.json", 10, age_s=7200)
    for i in range(6):
        _write(d, f"specdec-trace-{i}.json", 1000, age_s=600 - i)       # 0 is the oldest
    _write(d, "unrelated.txt", 10, age_s=7200)                         # not ours: never touched
    assert prune_exports(d, max_age_s=3600, max_bytes=3500, max_files=100) == 4
    assert sorted(os.listdir(d)) == ["specdec-trace-3.json", "specdec-trace-4.json", "specdec-trace-5.json",
                                     "unrelated.txt"]
    assert prune_exports(d, max_age_s=3600, max_bytes=10**9, max_files=1) == 2
    assert _exports(d) == [1000]


def test_export_size_limit_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_EXPORT_MAX_MB", "0.002")                # 2,000 bytes
    for i in range(4):
        _write(str(tmp_path), f"specdec-trace-{i}.json", 1000, age_s=10 - i)
    prune_exports(str(tmp_path))
    assert _exports(str(tmp_path)) == [1000, 1000]


# --- waiting in turn ------------------------------------------------------------------------------------

class _M:
    def __init__(self, label="model", lock=None):
        self.label, self.lock = label, lock or FairLock()


def test_waiting_for_a_model_shows_the_place_in_line_and_is_first_come_first_served():
    m = _M()
    m.lock.acquire()
    frames: dict[str, list] = {"a": [], "b": []}
    order: list[str] = []

    def waiter(name):
        gen = acquire_in_turn([m], 10, lambda msg: msg, poll_s=0.02)
        try:
            while True:
                frames[name].append(next(gen))
        except StopIteration as stop:
            held = stop.value
        order.append(name)
        time.sleep(0.05)
        for h in held:
            h.lock.release()

    ta = threading.Thread(target=waiter, args=("a",), daemon=True)
    ta.start()
    while not frames["a"]:
        time.sleep(0.01)
    tb = threading.Thread(target=waiter, args=("b",), daemon=True)
    tb.start()
    while not frames["b"]:
        time.sleep(0.01)
    assert "1 run ahead of yours" in frames["a"][-1] and "2 runs ahead of yours" in frames["b"][-1]
    m.lock.release()
    ta.join(5), tb.join(5)
    assert order == ["a", "b"] and not m.lock.locked()


def test_a_cancelled_wait_leaves_the_line_and_releases_what_it_held():
    a, b = _M("a"), _M("b")
    b.lock.acquire()                                      # someone else runs on b
    gen = acquire_in_turn([a, b], 10, lambda msg: msg, poll_s=0.02)
    assert "Waiting for b" in next(gen)
    assert a.lock.locked() and b.lock.waiting() == 1
    t0 = time.monotonic()
    gen.close()                                           # what Gradio does on cancel / a closed tab
    assert time.monotonic() - t0 < 1.0
    assert not a.lock.locked() and b.lock.waiting() == 0
    b.lock.release()


def test_waiting_too_long_is_refused_with_a_message():
    m = _M("the model")
    m.lock.acquire()
    gen = acquire_in_turn([m], 0.05, lambda msg: msg, poll_s=0.02)
    with pytest.raises(gr.Error, match="the model is busy"):
        for _ in gen:
            pass
    assert m.lock.waiting() == 0
    m.lock.release()


# --- Live runs on the bundled model -----------------------------------------------------------------------

def test_a_run_over_the_token_limit_is_cut_and_keeps_its_trace(pool, monkeypatch):
    monkeypatch.setenv("SPECDEC_MAX_RUN_TOKENS", "5")
    frames = _run(pool, max_new=40, baseline=True)
    status = frames[-1][-1]
    assert "Stopped at the limit" in status and "5 tokens per run" in status
    trace = Trace.from_dict(frames[-1][-3])
    assert trace.finish_reason == "limit" and 5 <= trace.stats.new_tokens < 40
    assert trace.baseline is None                         # the limit leaves no time for the baseline
    assert not pool.bundled.lock.locked()


def test_a_run_over_the_time_limit_is_cut_and_keeps_its_trace(pool, monkeypatch):
    monkeypatch.setenv("SPECDEC_MAX_RUN_S", "0.001")
    frames = _run(pool, max_new=40)
    assert "Stopped at the limit" in frames[-1][-1] and "0.001 s per run" in frames[-1][-1]
    trace = Trace.from_dict(frames[-1][-3])
    assert trace.finish_reason == "limit" and len(trace.iterations) == 1
    assert frames[-1][-2].value                          # the export is offered


@pytest.mark.slow
def test_a_fault_in_the_target_forward_ends_the_run_with_a_message_and_frees_the_model(pool):
    before = Trace.from_dict(_run(pool)[-1][-3]).new_token_ids
    with fault_on_forward(pool.bundled.model, 3, IndexError("injected fault")):
        with pytest.raises(gr.Error, match="Generation failed: IndexError: injected fault"):
            _run(pool)
    assert not pool.bundled.lock.locked()
    assert Trace.from_dict(_run(pool)[-1][-3]).new_token_ids == before


def test_closing_a_run_mid_stream_frees_the_model_at_once(pool):
    control = new_control()
    gen = run_live(pool, PAIR_NGRAM, PROMPT, 4, False, 0.0, 0, 1.0, 200, 0, True, True, control,
                   frame_s=0.0, figure_s=10.0)
    next(gen), next(gen)
    assert pool.bundled.lock.locked()
    t0 = time.monotonic()
    gen.close()
    assert time.monotonic() - t0 < 1.0 and not pool.bundled.lock.locked()


def test_generate_over_the_limit_is_cut_and_keeps_its_trace(pool, monkeypatch):
    from components.serving.api import generate
    monkeypatch.setenv("SPECDEC_MAX_RUN_TOKENS", "5")
    trace_dict, summary = generate(pool, PROMPT, PAIR_NGRAM, k=4, max_new_tokens=40, baseline=True)
    trace = Trace.from_dict(trace_dict)
    assert trace.finish_reason == "limit" and 5 <= trace.stats.new_tokens < 40 and trace.baseline is None
    assert "stopped at the run limit" in summary and not pool.bundled.lock.locked()


def test_generate_reports_a_fault_and_frees_the_model(pool):
    from components.serving.api import generate
    model = pool.bundled.model
    handle = model.register_forward_pre_hook(lambda m, a, k: (_ for _ in ()).throw(KeyError("boom")), with_kwargs=True)
    try:
        with pytest.raises(gr.Error, match="Generation failed: KeyError"):
            generate(pool, PROMPT, PAIR_NGRAM, k=4, max_new_tokens=8)
    finally:
        handle.remove()
    assert not pool.bundled.lock.locked()
    assert Trace.from_dict(generate(pool, PROMPT, PAIR_NGRAM, k=4, max_new_tokens=8)[0]).stats.new_tokens > 0
