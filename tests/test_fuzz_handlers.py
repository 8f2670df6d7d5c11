"""Fuzz the app's handlers with ≥ 1,000 generated bad inputs (tools/fuzz.py, seeded): Live run
settings, prompts and pairs; slider values; trace uploads (garbage, broken and deeply nested JSON,
oversized files, traces with one field broken); example names; pair changes. For each case: either it
is accepted (only if none of its values must be refused) or it is refused with a gr.Error whose message
names the field, carries no traceback and is short. Afterwards: the app is healthy (a normal run gives
the same tokens as before, no model lock held) and another session's earlier result is untouched.

Runs on a tiny random model with the bundled tokenizer (real chat template, real limits), so accepted
cases generate a couple of tokens in milliseconds."""
from __future__ import annotations

import copy
import json
import os
import time

import gradio as gr
import pytest

from components.pages.live import change_pair, new_control, run_live, step_live
from components.pages.replay import replay_example, replay_upload
from components.pages.viewer import step_view
from conftest import make_tiny_lm
from specdec_core import LoadedModel, Trace
from tools.fuzz import file_payloads, names_field, run_cases, step_cases
from specdec_core.models.pool import FairLock

# Refused cases cost microseconds; an accepted run or step renders every figure (most of this test's time), so
# the bad values are many and the odd-but-valid ones that render are capped.
N_RUN, N_STEP, N_UPLOAD, N_PAIR, N_EXAMPLE = 780, 60, 240, 40, 20
MAX_ACCEPTED_RUNS = 12     # of the generated run cases that must not be refused, only this many are run


class TinyPool:
    """"bundled" is a tiny random Llama over the bundled tokenizer's 49,152 ids; anything else fails to
    load like a hub id without network."""

    def __init__(self, tokenizer):
        model = make_tiny_lm(vocab_size=len(tokenizer), seed=3, hidden=16)
        self.bundled = LoadedModel("bundled", "tiny test model", model, tokenizer, FairLock())

    def get(self, key: str) -> LoadedModel:
        if key == "bundled":
            return self.bundled
        raise RuntimeError(f"could not load {key!r}: the Hugging Face Hub cannot be reached (test pool)")


@pytest.fixture(scope="module")
def pool(bundled, one_thread):
    return TinyPool(bundled[1])


def _frames(pool, args: dict, control=None) -> list[tuple]:
    return list(run_live(pool, args["pair"], args["prompt"], args["k"], args["k_policy"], args["temperature"],
                         args["top_k"], args["top_p"], args["max_new_tokens"], args["seed"], args["with_baseline"],
                         args["chat"], control, confidence_stop=args["confidence_stop"],
                         batch_size=args.get("batch_size", 1)))


PROBLEMS: list[str] = []


def _check_refusal(e: gr.Error, fields: list[str], note: str) -> None:
    """Collects (in PROBLEMS) a refusal with a traceback, an overlong message or one not naming a field."""
    msg = str(e.message if hasattr(e, "message") else e)
    if "Traceback" in msg or 'File "' in msg:
        PROBLEMS.append(f"{note}: traceback in {msg[:300]!r}")
    elif not 0 < len(msg) < 600:
        PROBLEMS.append(f"{note}: message of {len(msg)} characters: {msg[:200]!r}")
    elif not names_field(msg, fields):
        PROBLEMS.append(f"{note}: the message does not name {fields}: {msg[:300]!r}")


@pytest.fixture(scope="module")
def session_a(pool):
    """Another viewer's finished run: its trace state and its export, compared after the fuzzing."""
    args = {"pair": "bundled|ngram", "prompt": "Count: one two three one two three", "k": 3, "k_policy": "fixed",
            "temperature": 0.7, "top_k": 0, "top_p": 0.9, "max_new_tokens": 8, "seed": 5, "with_baseline": True,
            "chat": True, "confidence_stop": 0.0}
    last = _frames(pool, args, new_control())[-1]
    state, export = last[-3], last[-2].value
    export = export["path"] if isinstance(export, dict) else export
    with open(export, encoding="utf-8") as f:
        exported = f.read()
    return args, state, copy.deepcopy(state), export, exported


@pytest.mark.filterwarnings("ignore::UserWarning:gradio.helpers")   # the fuzzed values' toasts (gr.Warning outside
@pytest.mark.slow
def test_fuzz_handlers(pool, session_a, tmp_path):                     # a request is a UserWarning): expected
    args_a, state_a, snapshot_a, export_a, exported_a = session_a
    counts = {"run": 0, "step": 0, "upload": 0, "pair": 0, "example": 0}
    refused = accepted = 0
    t0 = time.monotonic()

    unhandled: list[str] = []
    accepted_runs = 0
    for case in run_cases(N_RUN, seed=11):
        if not case.must_refuse and accepted_runs >= MAX_ACCEPTED_RUNS:
            continue          # enough odd-but-valid runs (each generates and renders): not run, not counted
        counts["run"] += 1
        try:
            frames = _frames(pool, case.args, new_control())
        except gr.Error as e:
            refused += 1
            _check_refusal(e, case.fields, case.note)
            continue
        except Exception as e:  # noqa: BLE001 - collected, reported together below
            unhandled.append(f"run {case.note}: {type(e).__name__}: {e}")
            continue
        accepted += 1
        accepted_runs += 1
        if case.must_refuse:
            PROBLEMS.append(f"accepted a bad value: {case.note}")
        Trace.from_dict(frames[-1][-3])
        assert not pool.bundled.lock.locked()

    t_run = time.monotonic() - t0
    valid_trace = state_a
    for case in step_cases(N_STEP, seed=12):
        counts["step"] += 1
        for handler in (lambda: step_view(valid_trace, case.args["value"], case.args["delta"]),
                        lambda: step_live(valid_trace, case.args["value"], case.args["delta"], new_control())):
            try:
                handler()
                accepted += 1
                if case.must_refuse:
                    PROBLEMS.append(f"accepted a bad slider value: {case.note}")
            except gr.Error as e:
                refused += 1
                _check_refusal(e, case.fields, case.note)
            except Exception as e:  # noqa: BLE001
                unhandled.append(f"step {case.note}: {type(e).__name__}: {e}")

    t_step = time.monotonic() - t0 - t_run
    oversized = tmp_path / "oversized.json"
    with open(oversized, "wb") as f:
        f.truncate(6 * 1024 * 1024)                       # sparse: no 6 MB written to disk
    for i, (content, name, must_refuse, note) in enumerate(file_payloads(valid_trace, N_UPLOAD, seed=13)):
        counts["upload"] += 1
        if content is None:
            path = str(oversized)
        else:
            path = str(tmp_path / f"upload-{i}.json")
            with open(path, "wb") as f:
                f.write(content)
        try:
            out = replay_upload(path)
            accepted += 1
            if must_refuse:
                PROBLEMS.append(f"accepted a bad file: {note}")
            Trace.from_dict(out[-2])
        except gr.Error as e:
            refused += 1
            _check_refusal(e, ["file"], note)
            if not must_refuse:                            # one field broken: the message must name it
                _check_refusal(e, [name], note)
        except Exception as e:  # noqa: BLE001
            unhandled.append(f"upload {note}: {type(e).__name__}: {str(e)[:200]}")
        finally:
            if content is not None:
                os.remove(path)
    for bad_path in (None, "", str(tmp_path / "missing.json"), str(tmp_path)):
        counts["upload"] += 1
        try:
            replay_upload(bad_path)
            PROBLEMS.append(f"accepted the path {bad_path!r}")
        except gr.Error as e:
            _check_refusal(e, ["file"], f"path {bad_path!r}")
        except Exception as e:  # noqa: BLE001
            unhandled.append(f"upload path {bad_path!r}: {type(e).__name__}: {e}")

    pair_values = [None, 5, "", "preset:99", "preset:0", "nonsense", ["bundled|ngram"], {"a": 1}, "x" * 10_000,
                   "bundled|ngram\x00", "preset:-1", "bundled|self", "bundled|ngram", float("nan")]
    for i in range(N_PAIR):
        counts["pair"] += 1
        new = pair_values[i % len(pair_values)]
        try:
            dropdown, current, status = change_pair(pool, new, "bundled|ngram")
        except Exception as e:  # noqa: BLE001
            unhandled.append(f"pair {new!r:.60}: {type(e).__name__}: {e}")
            continue
        if new in ("bundled|self", "bundled|ngram"):
            assert current == new and "Ready" in status
        else:
            assert current == "bundled|ngram" and "Could not use" in status and "Keeping" in status

    for i in range(N_EXAMPLE):
        counts["example"] += 1
        name = [None, "", "../README.md", "/etc/passwd", "missing.json", 7, "x" * 5000, "ngram_extractive.json"][i % 8]
        try:
            replay_example(name)
            accepted += 1
            assert name == "ngram_extractive.json"
        except gr.Error as e:
            refused += 1
            _check_refusal(e, ["example"], f"example {name!r}")
        except Exception as e:  # noqa: BLE001
            unhandled.append(f"example {name!r:.60}: {type(e).__name__}: {e}")

    assert not unhandled, f"{len(unhandled)} unhandled:\n" + "\n".join(unhandled[:40])
    assert not PROBLEMS, f"{len(PROBLEMS)} unclear refusals:\n" + "\n".join(PROBLEMS[:40])
    total = sum(counts.values())
    print(f"\nfuzz: {total} handler cases {counts}, {refused} refused with a message naming the field, "
          f"{accepted} accepted, 0 unhandled, {time.monotonic() - t0:.1f} s (runs {t_run:.1f} s, steps {t_step:.1f} s)")
    assert total >= 1000

    # the app is healthy: no lock held, a normal run gives the same tokens as before the fuzzing
    assert not pool.bundled.lock.locked() and pool.bundled.lock.waiting() == 0
    again = _frames(pool, args_a, new_control())[-1][-3]
    assert again["new_token_ids"] == snapshot_a["new_token_ids"]
    # another session's earlier result is untouched: its state and its exported file
    assert state_a == snapshot_a
    with open(export_a, encoding="utf-8") as f:
        assert f.read() == exported_a
    assert json.loads(exported_a)["new_token_ids"] == snapshot_a["new_token_ids"]
