"""The Learn tab without a browser: the chapters' shape (count, length, guesses), navigation and links, and
the reveal answers as pure functions of a recorded run (each answer follows the data, never a fixed value).
The chapters' real runs are walked in the browser (tests/test_browser_learn.py)."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import gradio as gr
import pytest

from components.render.cost import baseline_forwards_figure, forward_cost_figure
from components.render.lab import acceptance_by_temperature_figure
from components.pages.learn import CHAPTERS
from components.pages.learn import reveal as rv
from components.pages.learn.book import words
from components.pages.learn.nav import chapter_link, read_query, step, title_html
from components.pages.learn.runs import BUGS, NeedsRun, need
from components.pages.learn.tab import (NO_GUESS, NOT_RUN, N, go_step, go_to, open_from_url, reveal_chapter,
                                       run_chapter)
from specdec_core import Trace

TABS = ("learn", "live", "replay")


def _draft(tok: int, text: str, p: float, q: float, u: float | None, tested: bool = True) -> dict:
    alpha = min(1.0, p / q)
    return {"token_id": tok, "text": text, "q": q, "p": p, "alpha": alpha, "u": u if tested else None,
            "accepted": tested and u is not None and u < alpha, "tested": tested}


def _trace(temperature: float = 1.0, same_baseline: bool = True) -> Trace:
    """Two iterations of K = 3: a rejection at draft 3 (resampled), then a clean sweep (bonus); a baseline."""
    it0 = {"index": 0, "start_len": 5, "k": 3,
           "drafts": [_draft(11, " the", 0.9, 0.8, 0.5), _draft(12, " cat", 0.6, 0.5, 0.2),
                      _draft(13, " sat", 0.1, 0.5, 0.7)],
           "resampled": {"token_id": 21, "text": " ran", "p": 0.5, "position": 2, "residual_prob": 0.6,
                         "residual_top": [[21, " ran", 0.6]]},
           "bonus": None, "emitted": [11, 12, 21], "draft_ms": [2.0, 2.0, 2.0], "verify_ms": 10.0, "other_ms": 1.0,
           "t_start_ms": 20.0}
    it1 = {"index": 1, "start_len": 8, "k": 3,
           "drafts": [_draft(31, " a", 0.7, 0.7, 0.9), _draft(32, " mat", 0.8, 0.4, 0.99), _draft(33, ".", 0.5, 0.6, 0.1)],
           "resampled": None, "bonus": {"token_id": 34, "text": "\n", "p": 0.4},
           "emitted": [31, 32, 33, 34], "draft_ms": [2.0, 2.0, 2.0], "verify_ms": 10.0, "other_ms": 1.0,
           "t_start_ms": 39.0}
    new = [11, 12, 21, 31, 32, 33, 34]
    base_ids = new if same_baseline else [11, 12, 22, 31, 32, 33, 34]
    stats = {"new_tokens": 7, "iterations": 2, "drafted": 6, "accepted": 5, "acceptance_rate": 5 / 6,
             "mean_tokens_per_iteration": 3.5, "target_forwards": 3, "draft_forwards": 6, "wall_ms": 60.0,
             "tokens_per_s": 7 / 0.06, "prefill_ms": 20.0}
    baseline = {"new_token_ids": base_ids, "text": "b", "token_ms": [30.0] + [10.0] * 6, "wall_ms": 90.0,
                "tokens_per_s": 7 / 0.09, "target_forwards": 7}
    return Trace.from_dict({
        "schema": "specdec-trace/1", "config": {"k": 3, "temperature": temperature, "top_k": 0, "top_p": 1.0,
                                                "max_new_tokens": 7, "seed": 0, "drafter": "model"},
        "prompt": "p", "prompt_ids": [1, 2, 3, 4, 5], "iterations": [it0, it1], "new_token_ids": new,
        "text": "the cat ran", "stats": stats, "baseline": baseline, "finish_reason": "length"})


# --- the chapters -----------------------------------------------------------------------------------------

def test_thirteen_short_chapters_each_with_a_guess_that_starts_nowhere():
    """No guess carries a preset value (the control starts empty or at its minimum, and Reveal waits for the
    learner to move it)."""
    assert N == len(CHAPTERS) == 13
    assert [c.slug for c in CHAPTERS].index("trees") == [c.slug for c in CHAPTERS].index("k") + 1
    assert len({c.slug for c in CHAPTERS}) == N
    for c in CHAPTERS:
        assert words(c.text) <= 150, c.slug
        g = c.guess
        assert not hasattr(g, "value")
        assert g.choices or (g.minimum < g.maximum and g.step > 0)
        if c.setting is not None:
            assert c.setting.value in [v for _, v in c.setting.choices]


def test_chapter_five_offers_every_bug_and_a_control():
    exact = next(c for c in CHAPTERS if c.slug == "exact")
    offered = [v for _, v in exact.setting.choices]
    assert set(offered) == set(BUGS) - {next(iter(BUGS))}      # every switch but "none"


# --- navigation and links -----------------------------------------------------------------------------------

def test_steps_stay_within_the_chapters():
    assert step(1, -1, N) == 1 and step(N, 1, N) == N and step(3, 1, N) == 4


def test_go_to_shows_one_chapter_and_its_title():
    out = go_to(4)
    assert out[0].value == 4
    assert f"Chapter 4 / {N}" in out[1] and CHAPTERS[3].title.split(":")[0] in out[1]
    assert [u.visible for u in out[2:]] == [i == 4 for i in range(1, N + 1)]
    assert go_step(N, 1)[0].value == N and go_step(None, -1)[0].value == 1


def test_title_escapes():
    assert "<b>" not in title_html(1, 2, "<b>x</b>")


@pytest.mark.parametrize("params, tab, chapter", [
    ({"tab": "learn", "chapter": "4"}, "learn", 4),
    ({"chapter": "2"}, "learn", 2),
    ({"tab": "live"}, "live", None),
    ({}, None, None),
])
def test_read_query(params, tab, chapter):
    req = read_query(params, TABS, N)
    assert (req.tab, req.chapter, req.problems) == (tab, chapter, ())


@pytest.mark.parametrize("params", [{"chapter": "0"}, {"chapter": str(N + 1)}, {"chapter": "-1"}, {"chapter": "2.0"},
                                    {"chapter": "٣"}, {"chapter": "<img src=x>"}, {"tab": "<b>nope</b>"},
                                    {"chapter": "9" * 5000}])
def test_bad_links_are_refused_and_change_nothing(params):
    req = read_query(params, TABS, N)
    assert req.chapter is None and req.tab is None and len(req.problems) == 1
    assert len(req.problems[0]) < 200


def test_page_load_opens_the_linked_chapter_and_escapes_a_refusal(monkeypatch):
    out = open_from_url(SimpleNamespace(query_params={"tab": "learn", "chapter": "3"}), TABS)
    assert out[0].selected == "learn" and out[1].value == 3
    shown = []
    monkeypatch.setattr(gr, "Warning", lambda m, *a, **k: shown.append(m))
    open_from_url(SimpleNamespace(query_params={"chapter": "<img src=x>"}), TABS)
    assert shown and "<img" not in shown[0] and "&lt;img" in shown[0]
    assert chapter_link(4) == "?tab=learn&chapter=4"


@pytest.mark.parametrize("number, guess, setting", [
    (1, 9.5, None), (1, float("nan"), None), (1, "3", None), (1, True, None),      # the slider's range, numbers only
    (3, "maybe", 0.0),                                                                # not one of the choices
])
def test_a_guess_off_the_control_is_refused(number, guess, setting):
    with pytest.raises(gr.Error, match="guess must be"):
        reveal_chapter(None, number, guess, {"verify_ms": [1.0] * 16}, setting)


@pytest.mark.parametrize("number, setting", [(3, 0.5), (3, "<img src=x>"), (5, "no such bug")])
def test_a_setting_off_the_control_is_refused_and_escaped(number, setting):
    with pytest.raises(gr.Error) as e:
        (run_chapter(None, number, setting) if number == 3 else
         reveal_chapter(None, number, "biased", {"checked": True}, setting))
    assert "must be one of" in str(e.value) and "<img" not in str(e.value)


def test_reveal_before_the_run_or_before_a_committed_guess_answers_in_one_friendly_line():
    memo = {"verify_ms": [10.0 + i for i in range(16)]}
    for out, line in ((reveal_chapter(None, 1, 2.0, None), NOT_RUN),                  # no run yet
                      (reveal_chapter(None, 1, None, memo), NO_GUESS),                 # no guess
                      (reveal_chapter(None, 1, 2.0, memo, touched=False), NO_GUESS)):  # the slider never moved
        assert line in out[0] and "Your guess" not in out[0] and "sd-learn-wait" in out[0]
        assert all(isinstance(f, type(gr.skip())) for f in out[1:])               # the figures stay as they are
    assert "Your guess" in reveal_chapter(None, 1, 2.0, memo, touched=True)[0]
    with pytest.raises(gr.Error, match="no chapter"):
        run_chapter(None, N + 1)
    with pytest.raises(NeedsRun):
        need({"other": 1}, "trace")


# --- the answers ---------------------------------------------------------------------------------------------

def test_forward_cost_answer_follows_the_measured_curve():
    curve = [10.0, 11.0, 12.0, 13.0, 15.0, 17.0, 19.0, 30.0]
    assert rv.forward_ratio(curve, 8) == pytest.approx(3.0)
    a = rv.reveal_forward_cost(3.0, curve).html
    assert "3.00 ×" in a and "right" in a
    b = rv.reveal_forward_cost(3.0, [10.0] * 8).html          # a flat curve: another answer
    assert "1.00 ×" in b and "not this time" in b
    with pytest.raises(ValueError):
        rv.forward_ratio(curve[:4], 8)


def test_kept_counts_the_accepted_drafts_of_the_iteration():
    t = _trace()
    a = rv.reveal_kept(2, t, 0).html
    assert "2 of 3 kept" in a and "right" in a and "“ ran”" in a and "α = min(1, p/q) = 0.20" in a
    b = rv.reveal_kept(2, t, 1).html
    assert "3 of 3 kept" in b and "bonus" in b and "not this time" in b


def test_identical_answer_follows_the_baseline():
    assert "identical (7 tokens)" in rv.reveal_identical("identical", _trace(0.0)).html
    diff = rv.reveal_identical("identical", _trace(1.0, same_baseline=False)).html
    assert "This run:</b> different" in diff and "not this time" in diff and "distribution" in diff


def test_the_alpha_question_is_a_real_coin_toss_where_the_residual_shows():
    t = _trace()
    assert rv.alpha_question(t) == (0, 2)         # q 0.5, p 0.1: α 0.2, in the iteration with the rejection
    t.iterations[0].resampled = None
    assert rv.alpha_question(t) == (0, 2)         # no rejection anywhere: still the first coin toss
    assert rv.alpha_question(t, min_q=0.9) == (0, 0)    # no draft reads well: the instructive iteration's first
    t.iterations[0].drafts, t.iterations[1].drafts = [], []
    assert rv.alpha_question(t) is None


def test_alpha_answer_is_the_recorded_alpha():
    a = rv.reveal_alpha(0.9, _trace(), 1).html
    assert "α = 1.000" in a and "not this time" in a and "draft 1 “ a”" in a
    assert "right" in rv.reveal_alpha(1.0, _trace(), 1).html
    b = rv.reveal_alpha(0.2, _trace(), 0, 2).html
    assert "α = 0.200" in b and "right" in b and "draft 3 “ sat”" in b and "rejected" in b


def test_exact_answer_and_an_inconclusive_verdict_is_not_judged():
    a = rv.reveal_exact("biased", "<b>bug</b>", "biased", 0.1, 0.01, 1e-9).html
    assert "right" in a and "<b>bug" not in a and "&lt;b&gt;bug" in a
    assert "not this time" in rv.reveal_exact("stays exact", "x", "biased", 0.1, 0.01, 1e-9).html
    c = rv.reveal_exact("stays exact", "x", "inconclusive", 0.02, 0.02, 0.2).html
    assert "can’t tell from this run" in c and "right" not in c and "Run longer" in c


def test_temperature_answer_is_judged_by_the_interval_of_the_difference():
    assert rv.acceptance_row(_trace()) == (1.0, [1.0, 1.0, 0.2, 1.0, 1.0, 5 / 6])
    cool = [0.6 + 0.01 * (i % 5) for i in range(60)]          # mean 0.62, tight
    lower = (0.3, cool), (1.0, [x - 0.3 for x in cool])         # clearly lower
    a = rv.reveal_temperature("lower", lower).html
    assert "✓ right" in a and "lower: -30%" in a
    assert "not this time" in rv.reveal_temperature("about the same", lower).html
    same = (0.3, cool), (1.0, [x + 0.01 for x in cool])         # a small, clear difference: higher and about the same
    assert "✓ right" in rv.reveal_temperature("about the same", same).html
    assert "✓ right" in rv.reveal_temperature("higher", same).html
    noisy = (0.3, [0.0, 1.0, 0.2, 0.9]), (1.0, [0.1, 0.8, 1.0, 0.0])
    c = rv.reveal_temperature("lower", noisy).html
    assert "can’t tell from this run" in c and "Run longer" in c and "right" not in c
    with pytest.raises(ValueError):
        rv.reveal_temperature("lower", [(0.3, []), (1.0, [0.5, 0.5])]).html


def _long_trace(n: int, iter_ms: float, base_token_ms: float, jitter: float = 0.0) -> Trace:
    """``n`` iterations of K = 3, every draft accepted plus a bonus (4 tokens each, ``iter_ms`` each, alternately
    ± ``jitter``), and a baseline of one ``base_token_ms`` forward per token: a speedup with a real interval."""
    its, new = [], []
    for i in range(n):
        ids = [100 + 4 * i + j for j in range(4)]
        ms = iter_ms + (jitter if i % 2 else -jitter)
        its.append({"index": i, "start_len": 5 + 4 * i, "k": 3,
                    "drafts": [_draft(t, f" w{t}", 0.9, 0.9, 0.5) for t in ids[:3]], "resampled": None,
                    "bonus": {"token_id": ids[3], "text": f" w{ids[3]}", "p": 0.5}, "emitted": ids,
                    "draft_ms": [1.0, 1.0, 1.0], "verify_ms": ms - 4.0, "other_ms": 1.0, "t_start_ms": iter_ms * i})
        new += ids
    wall = iter_ms * n
    stats = {"new_tokens": 4 * n, "iterations": n, "drafted": 3 * n, "accepted": 3 * n, "acceptance_rate": 1.0,
             "mean_tokens_per_iteration": 4.0, "target_forwards": n + 1, "draft_forwards": 3 * n, "wall_ms": wall,
             "tokens_per_s": 4 * n / (wall / 1000), "prefill_ms": 0.0}
    baseline = {"new_token_ids": new, "text": "b", "token_ms": [base_token_ms] * (4 * n),
                "wall_ms": base_token_ms * 4 * n, "tokens_per_s": 1000 / base_token_ms, "target_forwards": 4 * n}
    return Trace.from_dict({
        "schema": "specdec-trace/1", "config": {"k": 3, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                                                "max_new_tokens": 4 * n, "seed": 0, "drafter": "model"},
        "prompt": "p", "prompt_ids": [1, 2, 3, 4, 5], "iterations": its, "new_token_ids": new, "text": "t",
        "stats": stats, "baseline": baseline, "finish_reason": "length"})


def test_speedup_answer_is_judged_by_the_runs_interval():
    t = _long_trace(12, 40.0, 20.0)                     # 4 tokens per 40 ms against 20 ms a token: ×2.00 exactly
    a = rv.reveal_speedup(2.05, t, 2.4).html
    assert "×2.00" in a and "✓ right" in a and "×2.40" in a
    assert "not this time" in rv.reveal_speedup(1.5, t, 2.4).html
    few = _long_trace(4, 40.0, 20.0)                    # too few iterations for the interval to decide
    assert "can’t tell from this run" in rv.reveal_speedup(2.0, few, None).html
    noisy = _long_trace(12, 40.0, 20.0, jitter=15.0)    # the same ×2.00, iterations of 25 and 55 ms
    assert "can’t tell from this run" in rv.reveal_speedup(2.0, noisy, None).html


def test_draft_answer_judges_a_winner_only_when_the_intervals_part():
    from specdec_core.stats.intervals import Interval
    iv = lambda lo, hi: Interval((lo + hi) / 2, lo, hi, "bootstrap over iterations")  # noqa: E731
    rows = [("prompt lookup", 1.3, 0.6, iv(1.2, 1.4)), ("the feature-reading draft", 0.9, 0.4, iv(0.8, 1.0))]
    assert "prompt lookup wins" in rv.reveal_draft("prompt lookup", rows).html and "✓ right" in rv.reveal_draft("prompt lookup", rows).html
    assert "not this time" in rv.reveal_draft("the feature-reading draft", rows).html
    close = [("prompt lookup", 1.3, 0.6, iv(1.0, 1.6)), ("the feature-reading draft", 1.2, 0.4, iv(0.9, 1.5))]
    c = rv.reveal_draft("prompt lookup", close).html
    assert "can’t tell" in c and "within the noise" in c
    assert "neither beat the baseline" in rv.reveal_draft("x", [("a", 0.9, 0.5, iv(0.8, 0.95)), ("b", 0.6, 0.1, iv(0.5, 0.7))]).html


def test_k_answer_counts_a_k_within_the_noise_of_the_best():
    from specdec_core.stats.intervals import Interval
    iv = lambda lo, hi: Interval((lo + hi) / 2, lo, hi, "bootstrap over iterations")  # noqa: E731
    rows = [(1, 10.0, iv(1.1, 1.3)), (2, 12.0, iv(1.4, 1.6)), (3, 11.5, iv(1.35, 1.55)), (4, 8.0, iv(0.9, 1.1))]
    a = rv.reveal_best_k(2, rows, 8.0, [10.0, 10.0, 11.0, 14.0]).html
    assert "best K = 2" in a and "✓ right" in a and "×1.50" in a
    assert "✓ right" in rv.reveal_best_k(3, rows, 8.0, []).html and "K = 3 within its noise" in rv.reveal_best_k(3, rows, 8.0, []).html
    assert "not this time" in rv.reveal_best_k(4, rows, 8.0, []).html
    assert "can’t tell" in rv.reveal_best_k(4, [(2, 12.0, None), (4, 8.0, None)], 8.0, []).html


def test_costly_draft_answer_is_judged_by_the_runs_interval():
    slow = _long_trace(12, 90.0, 20.0, jitter=2.0)      # 4 tokens per 90 ms against 20 ms a token: ×0.89
    a = rv.reveal_costly_draft("slower", slow).html
    assert "×0.89" in a and "✓ right" in a
    assert "not this time" in rv.reveal_costly_draft("faster", slow).html
    even = _long_trace(12, 80.0, 20.0, jitter=30.0)     # ×1.00, and iterations that vary a lot
    b = rv.reveal_costly_draft("slower", even).html
    assert "can’t tell from this run" in b and "right" not in b and "not this time" not in b


def test_tree_answer_compares_tokens_per_iteration_prices_the_verify_and_names_the_rule():
    chain = _trace(0.7)                                   # 3.5 tokens per iteration, verify 10 ms, 7 ms else
    tree = copy.deepcopy(chain)
    tree.config["tree_nodes"] = 8
    tree.iterations[0].emitted = [11, 12, 21, 40, 41]     # 4.5 tokens per iteration, verify 25 ms
    for it in tree.iterations:
        it.verify_ms = 25.0
        it.tree = SimpleNamespace(rule="target_draw")
    curve = [10.0, 10.0, 11.0, 12.0, 12.0, 14.0, 16.0, 18.0, 20.0]     # a forward over 1 … 9 tokens
    assert rv.tokens_per_iteration(tree) == 4.5 and rv.mean_verify_ms(tree) == 25.0
    # flat: the tree's verify is 2 × t(1) (12.5 ms), the chain's 1.2 × (8.33 ms); 7 ms of drafting and overhead
    flat = (4.5 / (1 + 7 / 12.5)) / (3.5 / (1 + 7 / (10 / 1.2)))
    a = rv.reveal_tree_gain(1.0, chain, tree, curve).html
    assert "+1.00 (4.50 vs 3.50; 95 % interval" in a and "can’t tell from this run" in a and "y ~ p" in a  # 2 each
    assert "over 9 tokens, costs 1.67 × the chain&#x27;s over 4" in a and f"×{flat:.2f} as fast" in a
    assert "the chain at 116.7 (×1.00)" in a            # the fixture's tokens/s, the same for both
    tree.iterations[0].emitted = [11]
    tree.config["tree_nodes"] = 3
    for it in tree.iterations:
        it.tree.rule = "greedy"
    b = rv.reveal_tree_gain(1.0, chain, tree, curve).html
    assert "-1.00 (2.50 vs 3.50;" in b and "can’t tell" in b and "did not pay off" in b and "argmax p" in b
    assert "over 4 tokens, as the chain" in b
    with pytest.raises(ValueError, match="measured up to 4"):
        rv.reveal_tree_gain(1.0, chain, tree, curve[:3]).html
    for it in tree.iterations:
        it.tree = None
    with pytest.raises(ValueError, match="no tree"):
        rv.reveal_tree_gain(1.0, chain, tree, curve).html
    long_chain = _long_trace(12, 40.0, 20.0)              # 4 tokens every iteration
    long_tree = copy.deepcopy(long_chain)
    long_tree.config["tree_nodes"] = 4
    for i, it in enumerate(long_tree.iterations):
        it.emitted = it.emitted + [999] * (i % 2)          # 4 or 5 tokens: +0.5 with a narrow interval
        it.tree = SimpleNamespace(rule="target_draw")
    assert "✓ right" in rv.reveal_tree_gain(0.5, long_chain, long_tree, curve).html
    assert "not this time" in rv.reveal_tree_gain(1.5, long_chain, long_tree, curve).html


def test_when_it_pays_reveal_prices_the_run_on_other_devices(monkeypatch):
    from components.pages.learn import practice
    monkeypatch.setattr(practice, "predict_speedup", lambda trace, flat=False: 1.8)
    t = _trace()
    t.config.update(target_weights=134_515_008, target_layers=30, draft_weights=3_000_000, draft_layers=1)
    answer, fig, _ = reveal_chapter(None, [c.slug for c in CHAPTERS].index("pays") + 1, 1.5, {"trace": t})
    assert "×1.80" in answer and "on other hardware" in fig.layout.title.text
    assert fig.data[0].y[0] == pytest.approx((7 / 0.06) / (7 / 0.09))        # the measured bar, then the devices
    priced = fig.data[1]
    assert len(priced.x) >= 3 and len(set(priced.y)) >= 2 and all(y > 0 for y in priced.y)
    no_base = _trace()
    no_base.baseline = None
    with pytest.raises(gr.Error, match="baseline.*press Run again"):
        reveal_chapter(None, [c.slug for c in CHAPTERS].index("pays") + 1, 1.5, {"trace": no_base})


# --- the figures the lesson adds ------------------------------------------------------------------------------

def test_forward_cost_figures():
    fig = forward_cost_figure([10.0, 12.0, 20.0])
    assert len(fig.data) == 3 and list(fig.data[-1].y) == [10.0, 12.0, 20.0]
    assert list(fig.data[0].y) == [10.0, 20.0, 30.0]            # n one-token forwards
    assert len(forward_cost_figure([]).data) == 0
    assert list(baseline_forwards_figure([30.0, 10.0]).data[0].y) == [30.0, 10.0]
    assert len(baseline_forwards_figure([]).data) == 0
    acc = acceptance_by_temperature_figure([(0.3, [0.4, 0.6]), (1.0, [])])
    assert list(acc.data[0].y) == [0.5, 0.0] and list(acc.data[0].x) == ["T = 0.3", "T = 1"]
    assert acc.data[0].error_y.array[0] > 0
    assert len(acceptance_by_temperature_figure([]).data) == 0


def test_coupled_answer_compares_the_three_texts_and_names_what_each_rule_paid():
    std_a, std_b = _trace(0.8, same_baseline=False), _trace(0.8)
    cpl_a, cpl_b = _trace(0.8), _trace(0.8)
    a = rv.reveal_coupled("all three identical", (std_a, std_b), (cpl_a, cpl_b)).html
    assert "This run:</b> all three identical" in a and "✓ right" in a and "differed" in a
    assert "5 of 6" not in a and "83% of 6 tested drafts" in a          # accepted ÷ tested, each rule
    cpl_b.new_token_ids = [1, 2, 3]
    assert "not this time" in rv.reveal_coupled("all three identical", (std_a, std_b), (cpl_a, cpl_b)).html
    from components.render.lab import acceptance_by_rule_figure
    fig = acceptance_by_rule_figure([("draft", std_a, cpl_a)])
    assert [t.name for t in fig.data] == ["standard rule", "coupled rule"] and fig.data[0].y[0] == pytest.approx(5 / 6)
