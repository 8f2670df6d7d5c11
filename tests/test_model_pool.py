"""ModelPool under concurrency, with fake loaders (no network, no real weights): per-key loading (one
model's load never blocks another's), a second request waits for the load in progress, a failed load
leaves nothing registered, the memory budget refuses before loading and evicts idle models; FairLock."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from specdec_core.models.pool import (PARAMS_M, FairLock, ModelPool, estimate_params, max_model_bytes, model_nbytes)
from specdec_core.models.loading import PRESETS

MB = 1_000_000


class FakeLoader:
    """Loads a Linear of ``n_params`` floats per key; a key in ``gates`` blocks until its event is set;
    a key in ``fail`` raises. Counts calls per key."""

    def __init__(self, n_params: int = 1000, fail: tuple[str, ...] = ()) -> None:
        self.n_params = n_params
        self.fail = set(fail)
        self.gates: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, key: str):
        with self._lock:
            self.calls[key] = self.calls.get(key, 0) + 1
        self.started.setdefault(key, threading.Event()).set()
        if key in self.gates:
            assert self.gates[key].wait(10), "test gate never opened"
        if key in self.fail:
            raise RuntimeError(f"could not load '{key}': download failed (fake)")
        return torch.nn.Linear(self.n_params, 1, bias=False), object(), f"label {key}"


def _pool(loader: FakeLoader, max_bytes: int = 10**9, size_of=lambda key: None, **kw) -> ModelPool:
    return ModelPool(loader=loader, size_of=size_of, max_bytes=max_bytes, device="cpu", **kw)


def _in_thread(fn, *args, **kw):
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_loading_one_model_does_not_block_another():
    loader = FakeLoader()
    loader.gates["slow/hub-model"] = threading.Event()
    pool = _pool(loader)
    t, box = _in_thread(pool.get, "slow/hub-model")
    assert loader.started.setdefault("slow/hub-model", threading.Event()).wait(5)
    t0 = time.monotonic()
    fast = pool.get("bundled")                       # while the slow one is still downloading
    assert time.monotonic() - t0 < 1.0
    assert fast.key == "bundled" and pool.loaded() == ["bundled"] and pool.loading() == ["slow/hub-model"]
    loader.gates["slow/hub-model"].set()
    t.join(5)
    assert box["value"].key == "slow/hub-model" and sorted(pool.loaded()) == ["bundled", "slow/hub-model"]


def test_second_request_waits_for_the_load_in_progress_with_a_message():
    loader = FakeLoader()
    loader.gates["org/m"] = threading.Event()
    messages: list[str] = []
    pool = _pool(loader)
    t1, box1 = _in_thread(pool.get, "org/m")
    assert loader.started.setdefault("org/m", threading.Event()).wait(5)
    t2, box2 = _in_thread(pool.get, "org/m", on_wait=messages.append)
    deadline = time.monotonic() + 5
    while not messages and time.monotonic() < deadline:
        time.sleep(0.01)
    assert messages and "being loaded for another viewer" in messages[0] and "org/m" in messages[0]
    assert t2.is_alive()                             # waiting, not loading a second copy
    loader.gates["org/m"].set()
    t1.join(5), t2.join(5)
    assert box1["value"] is box2["value"]
    assert loader.calls["org/m"] == 1


def test_a_failed_load_leaves_nothing_registered_and_waiters_get_the_error():
    loader = FakeLoader(fail=("org/broken",))
    loader.gates["org/broken"] = threading.Event()
    pool = _pool(loader)
    t1, box1 = _in_thread(pool.get, "org/broken")
    assert loader.started.setdefault("org/broken", threading.Event()).wait(5)
    t2, box2 = _in_thread(pool.get, "org/broken")
    time.sleep(0.05)
    loader.gates["org/broken"].set()
    t1.join(5), t2.join(5)
    assert "download failed" in str(box1["error"])
    assert isinstance(box2["error"], RuntimeError) and "loading 'org/broken' failed" in str(box2["error"])
    assert pool.loaded() == [] and pool.loading() == [] and pool._reserved == {}
    with pytest.raises(RuntimeError, match="download failed"):
        pool.get("org/broken")                       # a later request tries again
    assert loader.calls["org/broken"] == 2
    assert pool.get("bundled").key == "bundled"      # the pool still works


def test_memory_guard_refuses_before_loading():
    loader = FakeLoader()
    pool = _pool(loader, max_bytes=1 * 10**9, size_of=lambda key: 2_000 * MB)   # 2G params = 8 GB in fp32
    with pytest.raises(RuntimeError) as e:
        pool.get("org/huge")
    msg = str(e.value)
    assert "org/huge" in msg and "8.0 GB" in msg and "1.0 GB" in msg and "SPECDEC_MAX_MODEL_GB" in msg
    assert loader.calls == {} and pool.loaded() == [] and pool.loading() == []


def test_memory_guard_checks_the_measured_size_when_no_estimate_exists():
    loader = FakeLoader(n_params=1000)                # 4,000 bytes once loaded
    pool = _pool(loader, max_bytes=3000)
    with pytest.raises(RuntimeError, match="budget"):
        pool.get("org/unknown-size")
    assert pool.loaded() == []


def test_idle_models_are_evicted_least_recently_used_first_but_busy_ones_are_not():
    loader = FakeLoader(n_params=1000)                # 4,000 bytes each
    pool = _pool(loader, max_bytes=9000)              # two fit, three do not
    a, b = pool.get("org/a"), pool.get("org/b")
    pool.get("org/a")                                 # b is now the least recently used
    pool.get("org/c")
    assert sorted(pool.loaded()) == ["org/a", "org/c"]
    pool.get("org/a").lock.acquire()
    pool.get("org/c").lock.acquire()                  # both busy: nothing can make room
    with pytest.raises(RuntimeError, match="models in use"):
        pool.get("org/d")
    assert sorted(pool.loaded()) == ["org/a", "org/c"]
    a.lock.release()
    pool.get("org/d")
    assert sorted(pool.loaded()) == ["org/c", "org/d"]
    assert b.model is not None                        # a holder of an evicted model keeps a working object


def test_the_bundled_model_is_never_evicted():
    loader = FakeLoader(n_params=1000)
    pool = _pool(loader, max_bytes=9000)
    pool.get("bundled")
    pool.get("org/a")
    pool.get("org/b")
    assert "bundled" in pool.loaded() and sorted(pool.loaded()) == ["bundled", "org/b"]


def test_budget_from_the_environment():
    assert max_model_bytes({}) == 10 * 10**9
    assert max_model_bytes({"SPECDEC_MAX_MODEL_GB": "2.5"}) == 2_500_000_000
    for bad in ("lots", "-1", "0", "nan", "inf"):
        with pytest.raises(ValueError, match="SPECDEC_MAX_MODEL_GB"):
            max_model_bytes({"SPECDEC_MAX_MODEL_GB": bad})


def test_presets_state_their_size_and_fit_the_default_budget():
    for p in PRESETS:
        assert p.draft in PARAMS_M and p.target in PARAMS_M
        gb = sum(PARAMS_M[k] for k in (p.draft, p.target)) * 4e6 / 1e9       # fp32 on the CPU
        assert 0.1 < gb < max_model_bytes({}) / 1e9, p.label


def test_estimate_from_a_local_folders_safetensors_header(tmp_path):
    from safetensors.torch import save_file
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(tmp_path / "model.safetensors"))
    assert estimate_params(str(tmp_path), allow_local=True) == 17
    assert estimate_params("bundled") == int(134.5e6)


def test_model_nbytes_counts_parameters_and_buffers():
    m = torch.nn.BatchNorm1d(4)                       # 8 params + 2×4 running stats + 1 counter (int64)
    assert model_nbytes(m) == 8 * 4 + 8 * 4 + 8


def test_fair_lock_serves_waiters_first_come_first_served():
    lock = FairLock()
    assert lock.acquire()
    order: list[int] = []
    threads = []
    for i in range(5):
        def work(i=i):
            assert lock.acquire(timeout=5)
            order.append(i)
            lock.release()
        t = threading.Thread(target=work, daemon=True)
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 2
        while lock.waiting() < i + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert lock.waiting() == 5 and lock.locked()
    lock.release()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3, 4] and not lock.locked() and lock.waiting() == 0


def test_fair_lock_timeout_gives_up_and_leaves_the_queue():
    lock = FairLock()
    lock.acquire()
    t0 = time.monotonic()
    assert lock.acquire(timeout=0.1) is False
    assert 0.09 < time.monotonic() - t0 < 2 and lock.waiting() == 0
    lock.release()
    assert lock.acquire(timeout=0.1)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
