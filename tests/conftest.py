"""Shared fixtures: tiny in-process models (random weights, no downloads), the bundled model and the app
served once per session."""
from __future__ import annotations

import contextlib
import os

# One intra-op thread for the tests, and passive waiting for any code that asks for more. Measured on this
# project's 2-core machine: with 2 threads and OpenMP's default spinning, a bundled-model forward cost 0.5-1 s of
# wall time and 250-550 ms of CPU while other work ran (about 85 ms and 45 ms with passive waiting, 77 ms and
# 38 ms with one thread); the model tests (greedy decoding, a few tokens per forward) took 20 % less CPU and
# no more wall time with one thread than with two on a lightly loaded machine. Set before torch is first
# imported (pytest loads this file before any test module) and inherited by the apps and CLIs the tests
# start; values set outside are kept. Tests of the thread-dependent paths set their thread count themselves.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

# The bundled model loads through its persistent, per-machine cache (``specdec_core.models.bundled_cache``:
# $SPECDEC_CACHE_DIR, else ~/.cache/speculative-decoding-explorer, keyed by the GGUF file's hash and the
# transformers version): only the first session on a machine reads the GGUF file, and the apps and CLIs the
# tests start read the same converted copy. tests/test_bundled_cache.py tests the cache in folders of its own.


def make_tiny_lm(vocab_size: int = 8, seed: int = 0, scale: float = 4.0, layers: int = 1, hidden: int = 16):
    """A tiny Llama causal LM with random weights. ``scale`` multiplies the output head so that the
    distributions are peaked enough to differ between seeds (target vs draft disagree)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


@pytest.fixture(scope="session")
def tiny_pair():
    """(target, draft): two different tiny models over the same 8-token vocabulary."""
    return make_tiny_lm(seed=1), make_tiny_lm(seed=2)


# The bundled model's verify curve: ms of one forward over 1..17 new tokens after 128 cached ones, one thread,
# measured on this project's 2-core machine (``calibration.measure_verify_curve``, the mean of two runs), and its
# shipped drafters' costs at that curve's level (``prices.measure_draft_costs``, one thread, the same machine).
# The ``bundled`` fixture puts them in the process's caches, so the cost-aware runs of the session use them
# instead of measuring (about 35 s of forwards in the default run). Measuring is tested on a tiny model in
# test_costmodel.py and test_reproducible.py, and the app the tests start calibrates for real, at its start-up.
BUNDLED_VERIFY_MS = (31.5, 32.4, 38.0, 38.4, 57.4, 58.8, 65.9, 59.8, 68.0, 68.8, 76.4, 69.9, 78.1, 78.7, 86.2, 79.4,
                     87.9)
BUNDLED_DRAFT_COSTS = {   # drafter -> DraftCosts' values (ms)
    "feature": dict(draft_ms=3.57, draft_per_token=True, catchup_ms=0.098, overhead_ms=0.48, overhead_sampled_ms=1.09,
                    tree_draft_ms=3.72, tree_overhead_ms=1.35),
    "trained": dict(draft_ms=4.06, draft_per_token=True, catchup_ms=0.124, overhead_ms=0.34, overhead_sampled_ms=0.99,
                    tree_draft_ms=5.66, tree_overhead_ms=1.64),
    "ngram": dict(draft_ms=0.0019, draft_per_token=False, overhead_ms=0.20, overhead_sampled_ms=0.37,
                  tree_draft_ms=0.0095, tree_overhead_ms=0.44)}


@pytest.fixture(scope="session")
def bundled():
    """(model, tokenizer) of the bundled SmolLM2-135M-Instruct, loaded once per test session, its verify curve
    and its shipped drafters' costs in the process's caches (``BUNDLED_VERIFY_MS``, ``BUNDLED_DRAFT_COSTS``)."""
    from specdec_core import NGramDrafter, load_bundled_model
    from specdec_core.decoding import prices
    from specdec_core.drafters.model import model_drafter
    from specdec_core.drafters.registry import shipped_draft_for
    from specdec_core.policy import calibration
    model, tok = load_bundled_model("cpu")
    calibration.default_cache().put(calibration.VerifyCurve(calibration.model_key(model), BUNDLED_VERIFY_MS,
                                                            calibration.DEFAULT_CONTEXT, calibration.DEFAULT_REPEATS))
    for name, costs in BUNDLED_DRAFT_COSTS.items():
        drafter = NGramDrafter() if name == "ngram" else model_drafter(shipped_draft_for(name, model), name=name)
        prices.draft_cost_cache().put(model, drafter, calibration.DraftCosts(prices.drafter_key(drafter), **costs))
    return model, tok


@pytest.hookimpl(tryfirst=True)          # before ``-m`` selects: a long test is a slow test too
def pytest_collection_modifyitems(config, items):
    """The tests that need the running app (``app_server``) run last: the app then serves them in one stretch
    rather than idling (at about 3 % of a core) through the rest of the session. The browser's come first among
    them (the app's start-up calibration, which their first run may wait for, covers every later run).
    Otherwise the usual order. A test marked ``long`` is marked ``slow`` as well."""
    for item in items:
        if item.get_closest_marker("long") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)

    def rank(item: pytest.Item) -> int:
        if "app_server" not in getattr(item, "fixturenames", ()):
            return 0
        return 1 if item.get_closest_marker("browser") else 2
    items.sort(key=rank)          # stable: the usual order within each rank


@pytest.fixture(scope="session")
def app_server():
    """``python app.py`` (the bundled model, offline) on 127.0.0.1 and a free port, started once per session
    for every test that needs a running app (the HTTP API, the load test, the browser), with a temporary
    folder of its own (``tools.loadtest.AppProcess``: its export and Gradio cache folders live there)."""
    from tools.loadtest import start_app
    with start_app({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}) as app:
        yield app


@pytest.fixture(scope="session")
def redis_url():
    """A real ``redis-server`` (Debian's package; ``tools.redisproc``) on a free loopback port, started once per
    session and stopped after it; its URL. Skipped, saying why, where the binary is missing."""
    from tools.redisproc import redis_missing, redis_server
    if redis_missing() is not None:
        pytest.skip(redis_missing())
    with redis_server() as server:
        yield server.url


@pytest.fixture
def redis_db(redis_url):
    """The session's Redis, emptied before the test: its URL."""
    import redis
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    return redis_url


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: a second intra-op thread only adds overhead (and stalls badly on a busy CPU). One thread
    for the module even where the session was given more (OMP_NUM_THREADS set outside); restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@contextlib.contextmanager
def fault_on_forward(module: torch.nn.Module, n: int, exc: Exception):
    """Within the block, ``module``'s n-th forward call raises ``exc`` (a fault injected for a test)."""
    calls = {"n": 0}

    def fault(mod, args, kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
    handle = module.register_forward_pre_hook(fault, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
