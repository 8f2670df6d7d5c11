"""Same settings and seed, same trace — tokens and iterations (K, drafts, verdicts) — whatever the machine's load,
for the recommended settings too (the cost-aware K policy): its prices are fixed before a run
(``decoding/prices.py``) and it learns only from what the run emitted. Checked here: a run whose clock is made
to jump gives the trace of an undisturbed one; a recorded run's prices (its trace's ``calibration``) replay its K
choices; a calibration extended later keeps the prices already given; 12 simultaneous /generate calls give what
the same calls give alone (in-process here, over HTTP in the slow suite); a copied Live link opened twice gives
the same trace and says whether this server reproduces the link's run; the app's start-up calibration
(``components/serving/calibrate.py``) is not repeated by the first run, and a run asked for while it goes waits
and says so."""
from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import replace
from types import SimpleNamespace
from urllib.parse import parse_qs

import pytest

from components.pages import live
from components.pages.live import copy_link, page_defaults, run_live, settings_from_url
from components.serving import calibrate
from components.serving.api import generate
from components.serving.calibrate import Job, StartupCalibration, set_current, wait_for_calibration
from components.serving.pairs import PAIR_FEATURE, PAIR_NGRAM
from components.serving.session import run_session
from conftest import make_tiny_lm
from specdec_core import LoadedModel, ModelDrafter, NGramDrafter, SpecConfig, Trace, speculative_generate
from specdec_core.config import recommended_config
from specdec_core.decoding import prices
from specdec_core.models.pool import FairLock
from specdec_core.policy import calibration
from specdec_core.policy.calibration import CalibrationCache, DraftCosts, prices_id

PROMPT = "Write a short poem about the sea at night."


def iterations(trace: Trace | dict) -> list:
    """Every decision of a run, no timings: K, each draft's token and verdict (and its u), what was emitted."""
    t = trace if isinstance(trace, Trace) else Trace.from_dict(trace)
    return [(it.k, it.k_reason, [(d.token_id, d.accepted, d.u) for d in it.drafts], it.emitted)
            for it in t.iterations]


class Pool:
    """The pool protocol over the session's bundled model, with a fair lock as the app's pool has."""

    def __init__(self, model, tokenizer):
        self.lm = LoadedModel("bundled", "SmolLM2-135M-Instruct (bundled)", model, tokenizer, FairLock())

    def get(self, key: str) -> LoadedModel:
        if key != "bundled":
            raise ValueError(f"no model {key!r} here")
        return self.lm


@pytest.fixture(scope="module")
def pool(bundled):
    return Pool(*bundled)


# --- the engine: no clock in the K policy's choices ------------------------------------------------------------

@pytest.mark.slow
def test_a_run_whose_clock_jumps_makes_the_same_choices(bundled, monkeypatch):
    """The cost policy on the bundled model and prompt lookup at T 0.8: once its prices are measured, a run in
    which every clock reading jumps by up to half a second (a machine under any load) gives the same tokens,
    K, reasons, drafts and verdicts as an undisturbed one; its timings are what differ."""
    model, tok = bundled
    ids = tok.apply_chat_template([{"role": "user", "content": "Repeat exactly: one two three, one two three."}],
                                  add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    cfg = recommended_config(temperature=0.8, seed=5, max_new_tokens=12)
    quiet = speculative_generate(model, NGramDrafter(), ids, cfg, tok)
    from specdec_core import timing
    rng, real = random.Random(1), timing.time.perf_counter
    jumps = [0.0]

    def jumpy() -> float:
        jumps[0] += rng.uniform(0.0, 0.5)
        return real() + jumps[0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=jumpy))
    busy = speculative_generate(model, NGramDrafter(), ids, cfg, tok)
    assert busy.new_token_ids == quiet.new_token_ids and iterations(busy) == iterations(quiet)
    assert busy.calibration == quiet.calibration and busy.calibration["prices"] == prices_id(busy.calibration)
    assert busy.stats.wall_ms > quiet.stats.wall_ms + 1000          # the clock did jump
    assert len({it.k for it in quiet.iterations}) > 1               # the policy did choose


@pytest.mark.slow
def test_a_traces_prices_replay_its_k_choices(bundled):
    """``calibration`` recorded in a trace (the verify curve, the drafter's costs, the host time) given back as
    ``prices=`` prices a new run the same: the same K choices, on any machine; other prices choose otherwise."""
    model, tok = bundled
    ids = list(range(300, 340)) * 2
    cfg = recommended_config(max_new_tokens=24)
    first = speculative_generate(model, NGramDrafter(), ids, cfg, tok)
    back = Trace.from_dict(json.loads(json.dumps(first.to_dict())))
    assert prices_id(back.calibration) == first.calibration["prices"]           # JSON keeps the prices exactly
    again = speculative_generate(model, NGramDrafter(), ids, cfg, tok, prices=back.calibration)
    assert iterations(again) == iterations(first) and again.calibration == back.calibration
    dear = {**back.calibration, "verify_ms": [v * (1 + 0.5 * i) for i, v in enumerate(back.calibration["verify_ms"])]}
    other = speculative_generate(model, NGramDrafter(), ids, cfg, tok, prices=dear)
    assert other.new_token_ids == first.new_token_ids                         # greedy: the target's text
    assert [it.k for it in other.iterations] != [it.k for it in first.iterations]   # dear verifies: smaller K


def test_an_extended_calibration_keeps_the_prices_it_gave(one_thread, monkeypatch):
    """A run that needs more sizes than measured (a larger K, a tree) appends them at the stored level; the
    stored sizes keep their prices, so a run priced before the extension is priced the same after it."""
    model = make_tiny_lm(vocab_size=32, seed=4, layers=1)
    cache = CalibrationCache()
    short = calibration.calibrate(model, 4, context=16, repeats=2, cache=cache)
    asked = []
    real = calibration.measure_sizes
    monkeypatch.setattr(calibration, "measure_sizes", lambda m, sizes, *a, **kw: asked.append(sizes) or real(
        m, sizes, *a, **kw))
    longer = calibration.calibrate(model, 7, cache=cache)
    assert longer.verify_ms[:4] == short.verify_ms and len(longer.verify_ms) == 7
    assert asked == [[1, 2, 3, 4, 5, 6, 7]]        # n = 1 and the last stored sizes again: the stored level
    assert calibration.calibrate(model, 7, cache=cache) is longer and len(asked) == 1


def test_tiny_models_get_prices_once_and_keep_them(tiny_pair, one_thread):
    """Prices are measured once per (target, drafter) and recorded: the second run measures nothing and is
    priced alike; a drafter that cannot be timed is priced at zero, and says so (``draft_measured``)."""
    target, draft = tiny_pair
    cfg = SpecConfig(k=3, k_policy="cost", max_new_tokens=12, temperature=1.0, seed=2)
    a = speculative_generate(target, draft, [1, 2, 3, 4], cfg)
    cal = a.calibration
    assert cal["draft_measured"] is True and len(cal["verify_ms"]) == 4 and cal["drafter"].startswith("ModelDrafter")
    assert prices.cached_prices(cfg, target, ModelDrafter(draft)).to_dict() == cal
    b = speculative_generate(target, draft, [1, 2, 3, 4], cfg)
    assert iterations(a) == iterations(b) and b.calibration == cal

    class Broken:
        def start(self, ids):
            return 0

        def propose(self, ids, k, policy):
            raise RuntimeError("cannot draft")
    costs = prices.drafter_costs(target, Broken(), calibration.cached(target), speculative_generate)
    assert costs.measured is False and costs.draft_ms == 0.0


# --- the app: /generate under load ----------------------------------------------------------------------------

def _alone_then_together(call, seeds) -> tuple[dict[int, dict], dict[int, dict]]:
    """``call(seed)`` for each seed one at a time, then for all of them at once from as many threads."""
    alone = {s: call(s) for s in seeds}
    together: dict[int, dict] = {}
    start = threading.Barrier(len(alone))

    def worker(seed: int) -> None:
        start.wait()
        together[seed] = call(seed)
    threads = [threading.Thread(target=worker, args=(s,)) for s in alone]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return alone, together


@pytest.mark.slow
def test_twelve_simultaneous_generate_calls_match_the_same_calls_alone(pool):
    """12 /generate calls at once from 12 threads (prompt, seed and temperature 0.8; every other value the
    default but the length: 8 tokens, to keep it short; make test-long sends the defaults over HTTP) return the same tokens and iterations as each call alone."""
    def call(seed: int) -> dict:
        return generate(pool, PROMPT, temperature=0.8, seed=seed, max_new_tokens=8)[0]
    alone, together = _alone_then_together(call, range(50, 62))
    assert all(together[s]["new_token_ids"] == alone[s]["new_token_ids"] for s in alone)
    assert all(iterations(together[s]) == iterations(alone[s]) for s in alone)
    assert all(alone[s]["config"]["k_policy"] == "cost" and alone[s]["config"]["pair"] == PAIR_FEATURE for s in alone)
    assert len({json.dumps(t["calibration"]) for t in alone.values()}) == 1       # one set of prices for all


@pytest.mark.long          # about three minutes; the in-process twin above runs in make test-slow
def test_twelve_simultaneous_http_generate_calls_match_the_same_calls_alone(app_server):
    """Through the real app over HTTP (its start-up calibration, the queue, gradio's threads): 12 simultaneous
    /generate calls with only a prompt, a seed and temperature 0.8 (the recommended settings otherwise: 64
    tokens, the cost-aware policy) give the tokens and iterations of the same calls alone."""
    from tools.loadtest import HttpApi
    api = HttpApi(app_server.url)

    def call(seed: int) -> dict:
        return api.call("/generate", prompt=PROMPT, seed=seed, temperature=0.8)[0]
    alone, together = _alone_then_together(call, range(50, 62))
    same_tokens = sum(together[s]["new_token_ids"] == alone[s]["new_token_ids"] for s in alone)
    same_iterations = sum(iterations(together[s]) == iterations(alone[s]) for s in alone)
    assert (same_tokens, same_iterations) == (12, 12)


# --- a copied Live link ----------------------------------------------------------------------------------------

def _values(s) -> tuple:
    return (s.pair, s.prompt, s.k, s.k_policy, s.temperature, s.top_k, s.top_p, s.max_new_tokens, s.seed, s.chat,
            s.confidence_stop, s.tree_nodes, s.tree_top_k, s.sampler)


def _open(pool, query: str) -> tuple[Trace, str]:
    """A fresh page opening ``query``: the settings it sets, then the run it asks for (``live._link_runner``,
    as the page wires it); the final trace and status."""
    values = settings_from_url(SimpleNamespace(query_params=parse_qs(query[1:], keep_blank_values=True)))
    assert values[16] is True
    pair, _, prompt, k, policy, temperature, top_k, top_p, max_new, seed, chat, stop, nodes, top, rule, batch = \
        values[:16]
    runner = live._link_runner(lambda *a: run_live(pool, *a), pool)
    frames = list(runner(True, values[18], pair, prompt, k, policy, temperature, top_k, top_p, max_new, seed, False,
                         chat, None, False, None, stop, nodes, top, rule, batch))
    return Trace.from_dict(frames[-1][-3]), frames[-1][-1]


@pytest.mark.slow
def test_a_copied_link_opened_twice_gives_the_same_trace_and_says_so(pool):
    """The recommended settings (the feature draft, the cost-aware policy) at T 0.8: "copy link" names what the
    run depends on here (``repro``); opened twice, the link gives the same tokens and iterations, and the run
    ends saying this server reproduces it; a link made where the prices or numerics differ says what may not."""
    s = replace(page_defaults(), temperature=0.8, seed=11, max_new_tokens=12)
    generate(pool, s.prompt, temperature=0.8, seed=11, max_new_tokens=2)          # this process's prices
    query = copy_link(*_values(s), pool=pool)
    repro = parse_qs(query[1:])["repro"][0]
    assert len(repro) == 8 and copy_link(*_values(s)) == query.replace(f"&repro={repro}", "")
    one, status_one = _open(pool, query)
    two, status_two = _open(pool, query)
    assert one.new_token_ids == two.new_token_ids and iterations(one) == iterations(two)
    assert one.config == two.config and one.calibration == two.calibration
    same, differ = "Same models, numerics and prices as where this link was made", "This link was made where"
    assert same in status_one and same in status_two and differ not in status_one
    elsewhere, status = _open(pool, query.replace(repro, "0badc0de"))
    assert differ in status and same not in status and iterations(elsewhere) == iterations(one)
    _, status = _open(pool, query.replace(f"&repro={repro}", ""))                 # an older link: no note
    assert "Same models" not in status and "This link was made" not in status


# --- the start-up calibration ----------------------------------------------------------------------------------

@pytest.fixture
def fresh_prices(monkeypatch):
    """An empty calibration for this test (the session's measured prices are kept aside), fake measurements
    that count their calls and can be held until ``release`` is set."""
    monkeypatch.setattr(calibration, "default_cache", lambda cache=CalibrationCache(): cache)
    monkeypatch.setattr(prices, "_DRAFT_COSTS", prices.DraftCostCache())
    counts = {"verify": 0, "drafts": 0}
    release = threading.Event()
    release.set()

    def sizes(model, sizes, *a, **kw):
        counts["verify"] += 1
        release.wait(60)
        return {n: 30.0 + 3.0 * n for n in sizes}

    def drafts(target, drafter, curve, generate, pause=None):
        counts["drafts"] += 1
        return DraftCosts(prices.drafter_key(drafter), 0.02, False, overhead_ms=1.0, overhead_sampled_ms=2.0)
    monkeypatch.setattr(calibration, "measure_sizes", sizes)
    monkeypatch.setattr(prices, "measure_draft_costs", drafts)
    yield counts, release
    set_current(None)


JOBS = [Job("the target's verify curve", PAIR_NGRAM, 11, 100, True), Job("prompt lookup's costs", PAIR_NGRAM, 0, 30, True)]


def _run(pool, cfg: SpecConfig) -> tuple[list, Trace]:
    events = list(run_session(pool, PAIR_NGRAM, PROMPT, cfg, chat=True, with_baseline=False))
    return events, events[-1].trace


def test_the_first_run_after_start_up_calibration_measures_nothing(pool, fresh_prices):
    counts, _ = fresh_prices
    cal = StartupCalibration(pool, JOBS)
    set_current(cal)
    cal.run()                                          # as app.main's thread does, here in this one
    assert counts == {"verify": 1, "drafts": 1} and not cal.running and not cal.errors
    events, trace = _run(pool, recommended_config(max_new_tokens=8, temperature=0.8))
    assert counts == {"verify": 1, "drafts": 1}       # nothing measured again
    assert not [e for e in events if e.kind == "wait"]
    assert trace.calibration["verify_ms"] == [33.0 + 3.0 * i for i in range(11)]
    assert trace.calibration["overhead_ms"] == 2.0 and trace.calibration["sampled"] is True


def test_a_run_asked_for_during_start_up_calibration_waits_and_says_so(pool, fresh_prices):
    counts, release = fresh_prices
    release.clear()                                    # the verify curve's measurement takes until released
    cal = calibrate.start_calibration(pool, JOBS)
    session = run_session(pool, PAIR_NGRAM, PROMPT, recommended_config(max_new_tokens=6), chat=True,
                          with_baseline=False)
    first = next(session)
    assert first.kind == "wait" and first.message.startswith("Calibrating this machine's costs (one-time, ~")
    assert first.message.endswith(" s)…") and cal.running
    release.set()
    rest = list(session)
    assert rest[-1].kind == "done" and not cal.running and counts == {"verify": 1, "drafts": 1}
    assert rest[-1].trace.calibration["verify_ms"][:2] == [33.0, 36.0]    # priced by the finished calibration
    # a fixed-K run also waits for start-up proper (the model is being timed), not after it
    assert list(wait_for_calibration(None, SpecConfig(), lambda m: m)) == []


def test_the_later_jobs_give_way_to_runs(pool, fresh_prices, monkeypatch):
    """After start-up proper the later jobs wait until no run has been going for IDLE_S: a run that comes during
    the idle window runs at once, and the job measures only after it (and the window after it) has passed."""
    counts, _ = fresh_prices
    monkeypatch.setattr(calibrate, "IDLE_S", 0.5)
    later = [JOBS[0], Job("prompt lookup's costs", PAIR_NGRAM, 0, 30, False)]
    cal = calibrate.start_calibration(pool, later)
    cal.wait_first()
    assert counts == {"verify": 1, "drafts": 0}
    with calibrate.run_going():
        time.sleep(1.0)                                # a run longer than the window: the job waits for it
        assert counts["drafts"] == 0 and cal.running, cal.errors
    ended = time.monotonic()
    assert cal.finished.wait(30) and counts == {"verify": 1, "drafts": 1}
    assert time.monotonic() - ended >= 0.4
