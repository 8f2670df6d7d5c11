"""The app's handlers called directly (no browser): Live runs on the bundled model, stop, step-through,
pair selection, settings validation, Replay's refusal of malformed uploads, the shipped examples."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import gradio as gr
import pytest

from components.pages import live
from components.render.base import instructive_index
from components.pages.live import change_pair, new_control, run_live, step_live
from components.serving.pairs import DEFAULT_PAIR, PAIR_NGRAM, PAIR_SELF, pair_choices, resolve_pair
from components.serving.inputs import make_config
from specdec_core.limits import MAX_TRACE_BYTES
from components.pages.replay import (EXAMPLES_DIR, list_examples, load_example, read_trace_file,
                               replay_example, replay_upload)
from components.pages.export import export_trace
from components.pages.viewer import target_index
from specdec_core import PRESETS, LoadedModel, ModelPool, SpecConfig, Trace, stream_baseline, stream_speculative
from specdec_core.config import recommended_config

ROOT = Path(__file__).resolve().parent.parent
N_OUT = 21   # viewer (tokens, 7 plots, summary, slider, anatomy, tree hint, tree, mask) + the batch's 4 views + state
             # + download + status
STATE, DOWNLOAD, STATUS = 18, 19, 20   # indices of the trace state, the download and the status in a Live frame


class BundledPool:
    """The ModelPool protocol over the session's bundled model (loaded once by the fixture); any other key
    goes to a real ModelPool (hub loading, which fails offline)."""

    def __init__(self, model, tokenizer):
        self.bundled = LoadedModel("bundled", "SmolLM2-135M-Instruct (bundled)", model, tokenizer, threading.Lock())
        self.hub = ModelPool(allow_local=False)

    def get(self, key: str) -> LoadedModel:
        return self.bundled if key == "bundled" else self.hub.get(key)


@pytest.fixture(scope="module")
def pool(bundled):
    return BundledPool(*bundled)


def _run(pool, pair=PAIR_NGRAM, prompt="Repeat exactly: red green blue, red green blue, red green blue.",
         k=4, temperature=0.0, max_new=12, seed=0, baseline=True, control=None, **kw):
    args = dict(k=k, k_policy="fixed", temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new,
                seed=seed, with_baseline=baseline, chat=True, control=control)
    args.update(kw)
    return run_live(pool, pair, prompt, **args)


# --- settings -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, message", [
    ({"k": 0}, "K must be between 1 and 16"), ({"k": 17}, "K must be between 1 and 16"),
    ({"k": 2.5}, "K must be a whole number"), ({"k": "4"}, "K must be a whole number, got '4'"),
    ({"k": float("inf")}, "K must be a whole number, got inf"), ({"seed": float("-inf")}, "seed must be a whole"),
    ({"temperature": -0.5}, "temperature must be between 0 (greedy) and 2"),
    ({"temperature": float("nan")}, "temperature must be a number, got nan"),
    ({"temperature": float("inf")}, "temperature must be a number, got inf"),
    ({"top_p": 0.0}, "top-p must be in (0, 1] (1 = off), got 0"), ({"top_p": float("nan")}, "top-p must be a number"),
    ({"top_k": -1}, "top-k must be between 0 (off) and 1000000, got -1"), ({"seed": -1}, "seed must be between 0 and 9007199254740991, got -1"),
    ({"max_new_tokens": 0}, "max new tokens must be between 1 and 512"),
    ({"seed": None}, "seed must be a whole number"), ({"temperature": None}, "temperature must be a number"),
    ({"k_policy": "auto"}, "K policy must be one of fixed, heuristic, cost, got 'auto'"),
    ({"confidence_stop": 1.0}, "the confidence stop must be between 0 (off) and 0.95, got 1"),
    ({"confidence_stop": -0.1}, "the confidence stop must be between 0 (off) and 0.95"),
    ({"confidence_stop": None}, "the confidence stop must be a number"),
    ({"confidence_stop": float("nan")}, "the confidence stop must be a number"),
])
def test_make_config_refuses_bad_settings(kw, message):
    args = dict(k=4, temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=16, seed=0, k_policy="fixed")
    args.update(kw)
    with pytest.raises(gr.Error, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        make_config(**args)


def test_make_config_accepts_gradio_floats():
    cfg = make_config(4.0, 0.7, 50.0, 0.9, 32.0, 7.0, True)
    assert cfg == SpecConfig(k=4, temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=32, seed=7, adaptive_k=True)
    assert make_config(4, 0.0, 0, 1.0, 8, 0, "cost").k_policy == "cost"
    assert make_config(4, 0.0, 0, 1.0, 8, 0, "fixed", 0.3).confidence_stop == 0.3


# --- a Live run -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ngram_frames(pool) -> list[tuple]:
    """Every page update of one greedy n-gram run with a same-run baseline, unpaced: an update after every
    iteration and every baseline token (shared by several tests)."""
    return list(_run(pool, max_new=14, frame_s=0.0, figure_s=0.0))


def test_live_run_streams_every_iteration_then_the_baseline(ngram_frames):
    frames = ngram_frames
    assert all(len(f) == N_OUT for f in frames)
    final = frames[-1]
    trace = Trace.from_dict(final[STATE])
    n = len(trace.iterations)
    # one update per iteration (the last one drawn by the "now the baseline" update), then per baseline token
    spec_frames = [f for f in frames[:-1] if not isinstance(f[0], dict)]   # gr.skip() is a dict update
    assert len(spec_frames) == n
    assert [len(Trace.from_dict(f[STATE]).iterations) for f in spec_frames] == list(range(1, n + 1))
    base_frames = frames[n:-1]
    assert len(base_frames) == len(trace.baseline.new_token_ids)          # then one per baseline token
    # greedy + fp32: identical to the baseline, and the page says so
    assert trace.baseline.new_token_ids == trace.new_token_ids
    assert "identical to baseline</th><td>yes" in final[8]
    assert "Done." in final[STATUS]
    # the final frame has all seven figures, the token stream and the download
    assert all(hasattr(f, "to_json") for f in final[1:8])
    stream = final[0].split('class="sd-stream"', 1)[1]
    # while streaming the newest iteration is shown; the finished run opens on its first rejection
    assert 'class="sd-it sd-sel" data-it="1"' in spec_frames[1][0]
    first = instructive_index(trace)
    assert any(d.tested and not d.accepted for d in trace.iterations[first].drafts)
    assert stream.count('class="sd-it') == n and f'class="sd-it sd-sel" data-it="{first}"' in stream
    assert final[9].value == first + 1                      # the step-through slider
    path = final[DOWNLOAD].value if hasattr(final[DOWNLOAD], "value") else final[DOWNLOAD]["value"]
    path = path if isinstance(path, str) else path.get("path", path)
    with open(path, encoding="utf-8") as f:
        assert Trace.from_dict(json.load(f)).to_dict() == trace.to_dict()
    assert trace.config["target"].startswith("SmolLM2") and trace.config["draft"] == "n-gram prompt lookup"


def test_pacer_bounds_the_update_rate():
    pace = live.Pacer(frame_s=10.0, figure_s=100.0)
    assert [pace(), pace(), pace()] == ["full", "", ""]
    pace = live.Pacer(frame_s=0.0, figure_s=100.0)
    assert [pace(), pace(), pace()] == ["full", "light", "light"]
    pace = live.Pacer(frame_s=0.0, figure_s=0.0)
    assert [pace(), pace()] == ["full", "full"]


def test_paced_run_sends_light_updates_between_figure_updates(pool):
    frames = list(_run(pool, max_new=8, baseline=False, frame_s=0.0, figure_s=3600.0))
    final = Trace.from_dict(frames[-1][STATE])
    middle = frames[1:-1]
    assert hasattr(frames[0][1], "to_json")                                 # the first update draws figures
    assert all(isinstance(f[1], dict) and isinstance(f[0], str) for f in middle)   # then tokens only
    assert len(frames) <= len(final.iterations) + 1
    assert all(hasattr(f, "to_json") for f in frames[-1][1:8])               # the last update draws them all


def test_stop_ends_the_run_cleanly_and_keeps_what_was_produced(pool):
    control = new_control()
    gen = _run(pool, max_new=40, control=control)
    first = next(gen)
    assert len(Trace.from_dict(first[STATE]).iterations) == 1
    live.stop_live(control)
    rest = list(gen)
    trace = Trace.from_dict(rest[-1][STATE])
    assert trace.finish_reason == "stopped"
    assert 1 <= len(trace.iterations) <= 2 and trace.baseline is None    # no baseline after a stop
    assert "Stopped" in rest[-1][STATUS]
    assert not pool.bundled.lock.locked()


@pytest.mark.slow
def test_stop_during_the_baseline_keeps_the_speculative_run_and_drops_the_partial_baseline(pool):
    control = new_control()
    frames = []
    for frame in _run(pool, max_new=8, control=control):
        frames.append(frame)
        if isinstance(frame[0], dict) and hasattr(frame[1], "to_json"):   # the first baseline frame
            live.stop_live(control)
    trace = Trace.from_dict(frames[-1][STATE])
    assert trace.finish_reason in ("eos", "length") and trace.baseline is None
    assert "Stopped during the baseline" in frames[-1][STATUS]
    assert "no baseline" in frames[-1][8] or "Tick" in frames[-1][8]


@pytest.mark.slow
def test_self_draft_accepts_what_it_drafts(pool):
    frames = list(_run(pool, pair=PAIR_SELF, max_new=5, k=2))
    trace = Trace.from_dict(frames[-1][STATE])
    assert trace.config["drafter"] == "self" and trace.stats.draft_forwards > 0
    assert trace.stats.acceptance_rate >= 0.75       # same model, greedy: the draft is the target's argmax
    assert trace.baseline.new_token_ids == trace.new_token_ids


@pytest.mark.slow
def test_default_pair_with_the_confidence_stop_drafts_less_and_keeps_the_greedy_output(pool):
    """The Live tab's default pair and confidence stop (what a visitor's first Run uses), at fixed K."""
    prompt = "Tell me something about lighthouses."
    stop = recommended_config().confidence_stop
    stopped = Trace.from_dict(list(_run(pool, pair=DEFAULT_PAIR, prompt=prompt, max_new=24,
                                        confidence_stop=stop))[-1][STATE])
    full = Trace.from_dict(list(_run(pool, pair=DEFAULT_PAIR, prompt=prompt, max_new=24, baseline=False))[-1][STATE])
    assert stopped.config["confidence_stop"] == stop > 0 and full.config["confidence_stop"] == 0
    assert stopped.new_token_ids == stopped.baseline.new_token_ids == full.new_token_ids
    assert stopped.stats.drafted < full.stats.drafted
    assert stopped.stats.acceptance_rate > full.stats.acceptance_rate


def test_sampling_run_records_the_uniform_draws(pool):
    trace = Trace.from_dict(list(_run(pool, temperature=0.9, top_p=0.95, seed=1, baseline=False, max_new=8))[-1][STATE])
    assert trace.config["temperature"] == 0.9 and trace.config["top_p"] == 0.95
    tested = [d for it in trace.iterations for d in it.drafts if d.tested]
    assert tested and all(d.u is not None and d.accepted == (d.u < d.alpha) for d in tested)


@pytest.mark.parametrize("prompt, kw, message", [
    ("   ", {}, "prompt is empty"),
    ("x" * 20_001, {}, "the limit is 20000"),
    ("hi", {"k": 99}, "K must be between"),
])
def test_live_run_refuses_bad_input_with_a_clear_message(pool, prompt, kw, message):
    with pytest.raises(gr.Error, match=message):
        next(_run(pool, prompt=prompt, **kw))


def test_unknown_pair_is_refused(pool):
    with pytest.raises(gr.Error, match="unknown model pair"):
        next(run_live(pool, "nope", "hi", 4, False, 0.0, 0, 1.0, 8, 0, False, True, None))


@pytest.mark.slow
def test_a_busy_model_makes_the_run_wait_and_say_so(pool):
    gen = _run(pool, max_new=2, baseline=False)
    pool.bundled.lock.acquire()
    try:
        first = next(gen)
        assert "Waiting" in first[STATUS] and all(isinstance(x, dict) for x in first[:STATUS])
    finally:
        pool.bundled.lock.release()
    assert Trace.from_dict(list(gen)[-1][STATE]).stats.new_tokens >= 1


# --- pairs ----------------------------------------------------------------------------------------------

def test_pairs(pool):
    ng = resolve_pair(pool, PAIR_NGRAM)
    assert ng.draft_model is None and type(ng.drafter()).__name__ == "NGramDrafter"
    me = resolve_pair(pool, PAIR_SELF)
    assert me.draft_model is me.target and me.locks() == [me.target]
    labels = [label for label, _ in pair_choices()]
    assert any("n-gram" in x for x in labels) and any("itself" in x for x in labels)
    assert sum("Hugging Face Hub" in x for x in labels) == len(PRESETS)


def test_a_hub_preset_that_cannot_download_warns_and_keeps_the_pair(pool, monkeypatch):
    import huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.warns(UserWarning):
        dropdown, current, status = change_pair(pool, "preset:0", PAIR_NGRAM)
    assert current == PAIR_NGRAM and dropdown.value == PAIR_NGRAM
    assert "Could not use" in status and "Keeping" in status and "distilgpt2" in status
    dropdown, current, status = change_pair(pool, PAIR_SELF, PAIR_NGRAM)
    assert current == PAIR_SELF and "Ready" in status


# --- step-through -----------------------------------------------------------------------------------------

def test_step_through_moves_the_selection_and_pins_it(ngram_frames):
    state = ngram_frames[-1][STATE]
    n = len(state["iterations"])
    assert n >= 2
    control = new_control()
    slider, tokens, pq, residual, anatomy, *_tree = step_live(state, n, -1, control)
    assert slider.value == n - 1 and f'class="sd-it sd-sel" data-it="{n - 2}"' in tokens
    assert pq.layout.title.text.startswith(f"Iteration {n - 1}:")
    assert residual.layout.title.text.startswith(f"Iteration {n - 1}:")
    assert control == {"stop": False, "follow": False, "selected": n - 2}
    step_live(state, n - 1, 1, control)                 # back on the newest: follow it again
    assert control["follow"] is True
    assert step_live(state, 1, -1, control)[0].value == 1   # clamped at the first iteration
    with pytest.raises(gr.Error, match="Nothing to step through"):
        step_live(None, 1, 1, control)


def test_target_index():
    assert target_index(3, -1, 5) == 1 and target_index(5, 1, 5) == 4 and target_index(None, 0, 5) == 4
    assert target_index(2, 0, 0) is None


def test_export_writes_a_replayable_file(tmp_path):
    d = load_example(list_examples()[0].name).to_dict()
    path = export_trace(d, str(tmp_path))
    assert path.endswith(".json") and read_trace_file(path).to_dict() == d
    with pytest.raises(gr.Error, match="Nothing to export"):
        export_trace(None)


# --- engine timing under a streaming consumer -------------------------------------------------------------

def test_time_spent_rendering_between_iterations_is_not_counted(tiny_pair):
    """The page renders between iterations; that pause must not be billed to either run."""
    target, draft = tiny_pair
    cfg = SpecConfig(k=3, max_new_tokens=8)
    t0 = time.perf_counter()
    for trace in stream_speculative(target, draft, [1, 2, 3], cfg):  # noqa: B007 (the last one is kept)
        time.sleep(0.03)
    for base in stream_baseline(target, [1, 2, 3], cfg):  # noqa: B007
        time.sleep(0.03)
    total_ms = (time.perf_counter() - t0) * 1000
    slept_ms = 30 * (len(trace.iterations) + len(base.token_ms))
    assert trace.stats.wall_ms + base.wall_ms <= total_ms - 0.99 * slept_ms
    assert sum(base.token_ms) == pytest.approx(base.wall_ms)
    assert trace.iterations[-1].t_start_ms < trace.stats.wall_ms <= total_ms - 0.99 * slept_ms


# --- Replay: untrusted uploads ----------------------------------------------------------------------------

def _write(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def _example_dict() -> dict:
    return json.loads((EXAMPLES_DIR / list_examples()[0].name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name, make, message", [
    ("empty.json", lambda: b"", "the file is empty"),
    ("notjson.json", lambda: b"speculative decoding!", "not valid JSON"),
    ("latin1.json", lambda: "{\"prompt\": \"caf\xe9\"}".encode("latin-1"), "not UTF-8"),
    ("list.json", lambda: b"[1, 2, 3]", "expected an object"),
    ("schema.json", lambda: json.dumps({**_example_dict(), "schema": "other/2"}).encode(), "schema"),
    ("missing.json", lambda: json.dumps({k: v for k, v in _example_dict().items() if k != "stats"}).encode(),
     "missing field 'stats'"),
    ("emitted.json", lambda: json.dumps({**_example_dict(), "new_token_ids": _example_dict()["new_token_ids"][:-1]})
     .encode(), "do not concatenate"),
    ("deep.json", lambda: b"[" * 100_000 + b"]" * 100_000, "not"),
])
def test_replay_refuses_malformed_files(tmp_path, name, make, message):
    path = _write(tmp_path, name, make())
    with pytest.raises(ValueError, match=message):
        read_trace_file(path)
    with pytest.raises(gr.Error, match="cannot be replayed"):
        replay_upload(path)


def test_replay_refuses_an_oversized_file_before_parsing(tmp_path):
    d = _example_dict()
    d["prompt"] = "x" * (MAX_TRACE_BYTES + 10)          # valid JSON, valid-looking trace, but too big
    path = _write(tmp_path, "big.json", json.dumps(d).encode())
    assert os.path.getsize(path) > MAX_TRACE_BYTES
    with pytest.raises(ValueError, match="up to 5 MB"):
        read_trace_file(path)
    with pytest.raises(gr.Error, match="5 MB"):
        replay_upload(path)


def test_replay_shows_a_valid_upload(tmp_path):
    path = _write(tmp_path, "ok.json", json.dumps(_example_dict()).encode())
    out = replay_upload(path)
    assert len(out) == 20 and "Loaded" in out[19]
    assert Trace.from_dict(out[STATE]).to_dict() == Trace.from_dict(_example_dict()).to_dict()
    with pytest.raises(gr.Error, match="No file"):
        replay_upload(None)


@pytest.mark.slow
def test_examples_ship_and_load():
    examples = list_examples()
    assert len(examples) >= 3
    traces = {ex.name: load_example(ex.name) for ex in examples}
    for name, t in traces.items():
        assert t.baseline is not None and t.baseline.new_token_ids, name
        assert t.iterations and t.config["device"] and t.config["dtype"], name
        out = replay_example(name)
        assert len(out) == 20 and "example" in out[19]
    drafters = {t.config["drafter"] for t in traces.values()}
    assert {"ngram", "self", "trained"} <= drafters
    assert any(t.config["temperature"] > 0 for t in traces.values())
    assert any(t.config["drafter"] == "ngram" and t.config["temperature"] == 0 for t in traces.values())


def test_example_names_cannot_escape_the_folder():
    with pytest.raises(gr.Error, match="unknown example"):
        replay_example("../app.py")


# --- the app ----------------------------------------------------------------------------------------------

def test_build_demo_loads_nothing_and_has_the_test_hooks():
    import app
    pool = ModelPool(allow_local=False)
    demo = app.build_demo(pool)
    assert pool.loaded() == []
    ids = {c.get("props", {}).get("elem_id") for c in demo.config["components"]}
    for hook in ("prompt", "run", "stop", "export", "tokens", "summary", "plot-timeline", "plot-race",
                 "plot-outcomes", "plot-pq", "plot-residual", "plot-positions", "plot-theory", "replay-upload",
                 "example-0"):
        assert hook in ids, hook


def test_bundled_model_is_installed_at_start_up_only_on_a_space():
    import app
    assert app.needs_bundled_install({"SPACE_ID": "user/space"}, installed=False)
    assert not app.needs_bundled_install({"SPACE_ID": "user/space"}, installed=True)
    assert not app.needs_bundled_install({}, installed=False)


def test_server_port_honours_the_environment(monkeypatch):
    import app
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    assert app.server_port() == 7999
    monkeypatch.delenv("GRADIO_SERVER_PORT")
    assert app.server_port() == 7860
    monkeypatch.setenv("GRADIO_SERVER_PORT", "http")
    with pytest.raises(SystemExit, match="port number"):
        app.server_port()


# --- deployment: the Dockerfile repeats the Makefile's set-up -------------------------------------------

def _makefile_setup(venv: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$(VENV)/.installed:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        cmd = line.strip()
        if cmd != "touch $@":
            recipe.append(cmd.replace("$(PYTHON)", "python3").replace("$(PY)", f"{venv}/bin/python")
                          .replace("$(VENV)", venv))
    return recipe


def _dockerfile_setup(venv: str) -> list[str]:
    text = (ROOT / "Dockerfile").read_text()
    block = text.split("# --- set-up (= make setup) ---", 1)[1].split("# --- end of set-up ---", 1)[0]
    return [line[len("RUN "):].replace("/opt/venv", venv) for line in block.strip().splitlines()]


def test_dockerfile_setup_is_the_makefile_setup():
    assert _dockerfile_setup("/v") == _makefile_setup("/v")
    assert len(_makefile_setup("/v")) >= 3
    text = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["/opt/venv/bin/python", "app.py"]' in text
    assert "$(PY) app.py" in (ROOT / "Makefile").read_text()
    assert "GRADIO_SERVER_NAME=0.0.0.0" in text and "GRADIO_SERVER_PORT=7860" in text and "EXPOSE 7860" in text
    assert "ARG BASE_IMAGE=" in text and "FROM ${BASE_IMAGE}" in text


@pytest.mark.long          # a fresh virtualenv from the package registry: about four minutes
def test_dockerfile_setup_installs_a_working_app(tmp_path):
    """Replays the Dockerfile's set-up in a fresh virtualenv (no Docker engine here), then its CMD."""
    import socket
    import subprocess
    import sys
    import urllib.request
    venv = str(tmp_path / "venv")
    for cmd in _dockerfile_setup(venv):
        cmd = cmd.replace("python3 -m venv", f"{sys.executable} -m venv", 1)
        subprocess.run(cmd, shell=True, cwd=ROOT, check=True, timeout=1800)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
    proc = subprocess.Popen([f"{venv}/bin/python", "app.py"], cwd=ROOT, env=env)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    assert r.status == 200
                    return
            except OSError:
                time.sleep(1)
        pytest.fail(f"the app from the Dockerfile's set-up did not serve (exit code {proc.poll()})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
