"""The app under load and under bad input, over HTTP: the session's ``app.py`` on 127.0.0.1 (bundled model,
``app_server`` in conftest.py), then (1) the small load-test configuration — 6 simultaneous gradio_client
sessions through /generate and /validate_trace with a failing preset and cancelled jobs — must end with 0
unexpected errors, 0 cross-talk, every session served and no new file in the export folder; (2) ≥ 100
generated bad values through the HTTP API must each be refused with a message naming the field and no
traceback, and the app must still serve the same trace afterwards."""
from __future__ import annotations

import json

import pytest

from tools.fuzz import file_payloads, names_field, run_cases
from tools.loadtest import SETTINGS, ApiError, HttpApi, client, fingerprint, generate_args, run_load

pytestmark = pytest.mark.slow          # the app over HTTP: the full run (make test-slow, CI)

API_FIELDS = {"with_baseline": "baseline"}      # run_cases field -> /generate parameter


@pytest.fixture(scope="module")
def app(app_server):
    """The session's app (conftest.py); its scripting API must name both endpoints."""
    c = client(app_server.url)
    names = set(c.view_api(print_info=False, return_format="dict")["named_endpoints"])
    c.close()
    assert {"/generate", "/validate_trace"} <= names, f"the app lacks /generate or /validate_trace: {sorted(names)}"
    return app_server


def test_small_load(app):
    report = run_load(app, sessions=6, runs=1, tokens=4, warm_up=False)     # no timing is checked here
    print("\n" + report.summary())
    assert report.errors == [] and report.mismatches == []
    assert report.sessions_served == 6 and report.generate_requests == 6 and report.cancelled >= 1
    assert report.refusals >= 6 + 2                      # broken traces and failing presets, refused clearly
    assert report.export_files == 0                      # /generate leaves no files behind (new ones counted)


def _json_safe(value) -> bool:
    """What gradio_client can send: strict JSON (no NaN/inf, no bytes) encodable as UTF-8."""
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
        return True
    except (TypeError, ValueError):
        return False


def test_api_fuzz_over_http(app):
    """Plain HTTP calls (``HttpApi``: Gradio's REST API, as curl would send them); test_api.py checks that
    gradio_client gets the same messages."""
    api = HttpApi(app.url)
    before = fingerprint(api.call("/generate", **generate_args(SETTINGS[0], 6))[0])
    sent = refused = 0
    problems: list[str] = []
    for case in run_cases(400, seed=21):
        if not case.must_refuse or sent >= 90:
            continue
        args = {API_FIELDS.get(k, k): v for k, v in case.args.items()}
        if not all(_json_safe(v) for v in args.values()):
            continue                                     # bytes, NaN and inf cannot be sent as JSON
        sent += 1
        try:
            api.call("/generate", **args)
            problems.append(f"accepted: {case.note}")
        except ApiError as e:
            refused += 1
            msg = str(e)
            if "Traceback" in msg or not names_field(msg, [API_FIELDS.get(f, f) for f in case.fields] + case.fields):
                problems.append(f"{case.note}: {msg[:200]}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"{case.note}: {type(e).__name__}: {str(e)[:200]}")
    trace = api.call("/generate", **generate_args(SETTINGS[0], 6))[0]
    for content, name, must_refuse, note in file_payloads(trace, 60, seed=22):
        if content is None or len(content) > 1_000_000:
            continue
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            continue
        sent += 1
        try:
            api.call("/validate_trace", trace=text)
            if must_refuse:
                problems.append(f"accepted trace: {note}")
        except ApiError as e:
            refused += 1
            if "Traceback" in str(e) or not names_field(str(e), ["file", name]):
                problems.append(f"trace {note}: {str(e)[:200]}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"trace {note}: {type(e).__name__}: {str(e)[:200]}")
    print(f"\nHTTP API fuzz: {sent} requests, {refused} refused with a message naming the field")
    assert sent >= 100 and not problems, "\n".join(problems[:30])
    after = fingerprint(api.call("/generate", **generate_args(SETTINGS[0], 6))[0])
    assert after == before                                # healthy, and the same trace as before
