"""A batch at every entrance, on the bundled model (greedy, prompt lookup, fixed K, 16 new tokens, batch of 3):
the Live tab streams every row and then the batched baseline, its views show each row and the pooled figures
under both acceptance names, every row equals its baseline row; the viewer steps through row 1; the /2 trace
goes through export and Replay and a malformed one is refused in one line; /generate and the command line
return and print the same figures."""
from __future__ import annotations

import json
import threading

import gradio as gr
import pytest

from components.pages.export import export_replay_html, export_trace
from components.pages.live import run_live, step_live
from components.pages.replay import replay_upload
from components.serving.api import generate, validate_trace
from components.serving.pairs import PAIR_NGRAM
from specdec_core import LoadedModel, NGramDrafter, Trace

PROMPT = "Repeat exactly: red green blue, red green blue, red green blue."
ROWS, TOKENS = 3, 16
TRACE, STATUS = -3, -1                  # a Live frame's trace state and status
BATCH_ROWS, BATCH_SUMMARY, BATCH_TIMELINE, BATCH_ACCEPTANCE = 14, 15, 16, 17   # the batch's views in a frame
BOTH_NAMES = ("per-draft acceptance rate", "mean acceptance length")


class BundledPool:
    def __init__(self, model, tokenizer):
        self.bundled = LoadedModel("bundled", "SmolLM2-135M-Instruct (bundled)", model, tokenizer, threading.Lock())

    def get(self, key: str) -> LoadedModel:
        if key != "bundled":
            raise ValueError(f"no model {key!r} here")
        return self.bundled


@pytest.fixture(scope="module")
def pool(bundled):
    return BundledPool(*bundled)


@pytest.fixture(scope="module")
def frames(pool) -> list[tuple]:
    """Every page update of a Live batch run: a light one after each batch iteration, figures once a second."""
    return list(run_live(pool, PAIR_NGRAM, PROMPT, 3, "fixed", 0.0, 0, 1.0, TOKENS, 0, True, True, None,
                         batch_size=ROWS, frame_s=0.0, figure_s=1.0))


def test_a_live_batch_streams_every_row_then_the_batched_baseline(frames):
    final = Trace.from_dict(frames[-1][TRACE])
    assert final.to_dict()["schema"] == "specdec-trace/2" and final.batch.size == ROWS
    spec = [f for f in frames if "Batched speculative decoding (3 rows): iteration" in f[STATUS]]
    assert len(spec) == len(final.batch.forwards) - 1                 # every batch iteration but the last, drawn
    assert all(f[BATCH_ROWS].value.count('<section class="sd-row') == ROWS for f in spec)      # every row shown
    shown = [f[BATCH_ROWS].value.count("sd-tok sd-") for f in spec]    # the rows' tokens, as they grow
    assert shown == sorted(shown) and shown[0] < shown[-1]
    full = [f for f in spec if "schema" in f[TRACE]]                    # a light update leaves the state
    assert full and all(Trace.from_dict(f[TRACE]).batch is not None for f in full)
    assert any("Batched baseline (target only):" in f[STATUS] for f in frames)
    assert "Done." in frames[-1][STATUS] and "48 tokens in 3 rows" in frames[-1][STATUS]


def test_the_finished_batch_shows_each_row_and_the_pool_and_equals_its_baseline(frames):
    last = frames[-1]
    trace = Trace.from_dict(last[TRACE])
    assert all(row.new_token_ids == row.baseline.new_token_ids for row in trace.rows())    # greedy, float32
    rows, summary = last[BATCH_ROWS], last[BATCH_SUMMARY]
    assert rows.visible and summary.visible and "row 3 · another user&#x27;s request" in rows.value
    for name in BOTH_NAMES:
        assert name in summary.value
    assert "every row's text equals its baseline row</strong>: yes (3 of 3 rows)" in summary.value
    assert f"×{trace.batch.stats.speedup:.2f} (" in summary.value and trace.batch.stats.speedup > 0
    for b, row in enumerate(trace.rows()):
        assert f"<td>{row.stats.mean_tokens_per_iteration:.2f}</td>" in summary.value, b
    timeline, acceptance = (json.loads(last[i].value["plot"])["data"] for i in (BATCH_TIMELINE, BATCH_ACCEPTANCE))
    assert {"verify forward", "baseline step", "rows in the batch"} <= {d["name"] for d in timeline}
    assert [d["name"] for d in acceptance] == ["each row", "all rows (pooled)"] * 2
    assert "identical to baseline</th><td>yes" in last[8] and "row 1 (your request) of a batch of 3" in last[8]


def test_the_viewer_steps_through_row_1_of_a_batch(frames):
    state = frames[-1][TRACE]
    trace = Trace.from_dict(state)
    slider, tokens, *_ = step_live(state, 2, 0, None)         # the slider at 2: the second iteration
    assert tokens.count('data-it=') == len(trace.iterations) and 'class="sd-it sd-sel" data-it="1"' in tokens


def test_a_batch_trace_goes_through_export_and_replay(frames, tmp_path):
    state = frames[-1][TRACE]
    path = export_trace(state, str(tmp_path))
    with open(path, encoding="utf-8") as f:
        assert json.load(f)["schema"] == "specdec-trace/2"
    out = replay_upload(path)
    assert Trace.from_dict(out[-2]).to_dict() == Trace.from_dict(state).to_dict()
    assert out[BATCH_ROWS].visible and out[BATCH_ROWS].value.count('<section class="sd-row') == ROWS
    assert "row 1 of a batch of 3" in out[-1]
    page = export_replay_html(state, str(tmp_path)).value          # the standalone replay: row 1, the /2 trace in it
    with open(page if isinstance(page, str) else page["path"], encoding="utf-8") as f:
        assert '"specdec-trace/2"' in f.read()


@pytest.mark.parametrize("break_it, words", [
    (lambda d: d["batch"]["rows"].pop(), "batch.rows: a batch of 3 holds 2 rows besides the first, got 1"),
    (lambda d: d.pop("batch"), "trace: missing field 'batch'"),
    (lambda d: d["batch"]["forwards"][0].update(rows=[0, 7]), "expected distinct row indices below 3"),
])
def test_a_malformed_batch_upload_is_refused_in_one_line(frames, tmp_path, break_it, words):
    data = json.loads(json.dumps(frames[-1][TRACE]))
    break_it(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(gr.Error) as refused:
        replay_upload(str(path))
    message = refused.value.message
    assert message.startswith("This file cannot be replayed: ") and words in message and "\n" not in message


def test_generate_runs_a_batch_and_sums_it_up(pool):
    trace_dict, summary = generate(pool, PROMPT, PAIR_NGRAM, k=3, k_policy="fixed", max_new_tokens=TOKENS,
                                   baseline=True, batch_size=ROWS)
    trace = Trace.from_dict(trace_dict)
    assert trace_dict["schema"] == "specdec-trace/2" and len(trace.rows()) == ROWS
    assert trace.batch.baseline is not None and trace.batch.stats.speedup > 0
    assert summary.startswith(f"batch of {ROWS}: ") and "\n" not in summary
    assert "every row identical to its baseline row: yes (3 of 3 rows)" in summary
    assert all(f"pooled {name}" in summary for name in BOTH_NAMES)
    assert validate_trace(trace_dict) == summary


def test_the_command_line_runs_a_batch(pool, monkeypatch, capsys, tmp_path):
    from specdec_core.cli import command
    monkeypatch.setattr(command, "load_pair", lambda *a: (pool.bundled, NGramDrafter()))
    out = tmp_path / "batch.json"
    assert command.main(["--prompt", PROMPT, "--draft", "ngram", "--batch", str(ROWS), "--k-policy", "fixed",
                         "--k", "3", "--max-new-tokens", str(TOKENS), "--baseline", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[row 1 · your prompt]" in printed and "[row 3 · another user's request: " in printed
    for who in ("row 1 (yours): ", "row 2: ", "row 3: ", "pooled: "):
        line = next(x for x in printed.splitlines() if x.startswith(who))
        assert all(name in line for name in BOTH_NAMES), line
    assert "every row identical to its baseline row: yes (3 of 3)" in printed and "pooled speedup: ×" in printed
    trace = Trace.from_dict(json.loads(out.read_text(encoding="utf-8")))
    assert trace.batch.size == ROWS and json.loads(out.read_text())["schema"] == "specdec-trace/2"


# --- the session's other paths, on a tiny random target over the bundled tokenizer (fast) ---------------------

class TinyPool(BundledPool):
    def __init__(self, tokenizer):
        from conftest import make_tiny_lm
        super().__init__(make_tiny_lm(vocab_size=len(tokenizer), seed=3, hidden=16), tokenizer)


@pytest.fixture(scope="module")
def tiny(bundled, one_thread):
    return TinyPool(bundled[1])


def test_a_cost_aware_batch_measures_its_prices_first_and_says_so(tiny):
    frames = list(run_live(tiny, PAIR_NGRAM, "Repeat: one two three, one two three.", 2, "cost", 0.0, 0, 1.0, 6, 0,
                           False, True, None, batch_size=2, frame_s=0.0, figure_s=0.0))
    waits = [f[STATUS] for f in frames if "Measuring this machine&#x27;s batch prices" in f[STATUS]]
    assert len(waits) == 1 and all(isinstance(x, dict) for x in frames[0][:STATUS])     # a wait changes nothing else
    trace = Trace.from_dict(frames[-1][TRACE])
    assert trace.batch.prices is not None and trace.config["k_policy"] == "cost"
    assert all(f.k_reason.startswith("batch of ") for f in trace.batch.forwards)


def test_stop_ends_every_row_still_running(tiny):
    control = {"stop": False}
    gen = run_live(tiny, PAIR_NGRAM, "Count: one two three four five six.", 2, "fixed", 0.0, 0, 1.0, 40, 0, True, True,
                   control, batch_size=4, frame_s=0.0, figure_s=0.0)
    next(gen)                                    # the first iteration is on the page
    control["stop"] = True                       # (run_live reset the flag it was given when it started)
    last = list(gen)[-1]
    trace = Trace.from_dict(last[TRACE])
    assert "Stopped: kept what was produced." in last[STATUS]
    assert {row.finish_reason for row in trace.rows()} <= {"stopped", "eos", "length"}
    assert "stopped" in {row.finish_reason for row in trace.rows()}
    assert trace.batch.baseline is None and all(row.baseline is None for row in trace.rows())   # no baseline
