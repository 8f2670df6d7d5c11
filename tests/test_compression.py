"""The page and the API's JSON answers are gzip-compressed (``components/serving/compression.py``), the event
streams never are, and gradio's own compression of its assets is left as it was: a small Blocks launched with the
app's own ``launch_options()`` (no model), asked over plain HTTP and through ``gradio_client``. The app itself is
asked once in tests/test_api.py."""
from __future__ import annotations

import gzip
import json
import time
import urllib.request

import gradio as gr
import pytest

import app
from components.serving.compression import gradio_compresses
from tools.procs import free_port

PADDING = "speculative decoding " * 4000          # the page well above the minimum size either way


def _count(n: float):
    for i in range(int(n)):
        time.sleep(0.05)
        yield f"step {i + 1}"


@pytest.fixture(scope="module")
def small_app():
    with gr.Blocks() as demo:
        gr.Markdown(PADDING)
        n = gr.Number(3)
        out = gr.Textbox()
        gr.Button("go").click(_count, n, out, api_name="count")
    demo.queue()
    port = free_port()
    options = {**app.launch_options(), "js": None}
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **options)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def _get(url: str, encoding: str | None, data: bytes | None = None, stream: bool = False):
    headers = {"Accept-Encoding": encoding} if encoding else {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers)
    return urllib.request.urlopen(req, timeout=30)


def test_the_page_is_gzipped_when_the_browser_asks(small_app):
    with _get(small_app, "gzip, deflate, br") as r:
        body = r.read()
        assert r.headers["Content-Encoding"] == "gzip"
        assert "Accept-Encoding" in r.headers.get("Vary", "")
    page = gzip.decompress(body).decode("utf-8")
    assert "speculative decoding speculative" in page and len(body) < len(page) / 5
    with _get(small_app, None) as r:                   # a client that does not ask gets the plain page
        assert r.headers.get("Content-Encoding") is None and "speculative decoding" in r.read().decode("utf-8")
    with _get(small_app + "config", "gzip") as r:      # the API's JSON answers too
        assert r.headers["Content-Encoding"] == "gzip" and json.loads(gzip.decompress(r.read()))["components"]


def test_event_streams_are_not_compressed_and_still_stream(small_app):
    """The queue's event stream is read as it comes: never buffered into a gzip member."""
    call = small_app + "gradio_api/call/count"
    with _get(call, "gzip", json.dumps({"data": [4]}).encode()) as r:
        event_id = json.loads(r.read())["event_id"]
    with _get(f"{call}/{event_id}", "gzip") as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        assert r.headers.get("Content-Encoding") is None
        text = r.read().decode("utf-8")
    assert text.count("event: generating") >= 3 and '"step 4"' in text


def test_gradio_client_reads_the_compressed_app(small_app):
    from gradio_client import Client
    client = Client(small_app, verbose=False, download_files=False)
    job = client.submit(3, api_name="/count")
    assert job.result(timeout=30) == "step 3"
    assert [o for o in job.outputs()][-1] == "step 3" and len(job.outputs()) >= 2


def test_gradio_keeps_compressing_its_own_assets():
    assert gradio_compresses("/assets/index-abc.js") and gradio_compresses("/theme.css")
    assert not gradio_compresses("/") and not gradio_compresses("/config")
    assert not gradio_compresses("/gradio_api/queue/data") and not gradio_compresses("/gradio_api/info")
