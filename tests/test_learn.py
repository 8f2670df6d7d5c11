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
from components.pages.learn.runs import BUGS, need
from components.pages.learn.tab import N, go_step, go_to, open_from_url, reveal_chapter, run_chapter
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

def test_eleven_short_chapters_each_with_a_guess_in_range():
    assert N == len(CHAPTERS) == 11
    assert [c.slug for c in CHAPTERS].index("trees") == [c.slug for c in CHAPTERS].index("k") + 1
    assert len({c.slug for c in CHAPTERS}) == N
    for c in CHAPTERS:
        assert words(c.text) <= 150, c.slug
        g = c.guess
        if g.choices:
            assert g.value in g.choices
        else:
            assert g.minimum <= g.value <= g.maximum and g.step > 0
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


def test_reveal_needs_a_guess_and_the_run():
    with pytest.raises(gr.Error, match="guess"):
        reveal_chapter(None, 1, None, None)
    with pytest.raises(gr.Error, match="Run this chapter first"):
        reveal_chapter(None, 1, 2.0, None)
    with pytest.raises(gr.Error, match="no chapter"):
        run_chapter(None, N + 1)
    with pytest.raises(gr.Error):
        need({"other": 1}, "trace")


# --- the answers ---------------------------------------------------------------------------------------------

def test_forward_cost_answer_follows_the_measured_curve():
    curve = [10.0, 11.0, 12.0, 13.0, 15.0, 17.0, 19.0, 30.0]
    assert rv.forward_ratio(curve, 8) == pytest.approx(3.0)
    a = rv.reveal_forward_cost(3.0, curve)
    assert "3.00 ×" in a and "right" in a
    b = rv.reveal_forward_cost(3.0, [10.0] * 8)          # a flat curve: another answer
    assert "1.00 ×" in b and "not this time" in b
    with pytest.raises(ValueError):
        rv.forward_ratio(curve[:4], 8)


def test_kept_counts_the_accepted_drafts_of_the_iteration():
    t = _trace()
    a = rv.reveal_kept(2, t, 0)
    assert "2 of 3 kept" in a and "right" in a and "“ ran”" in a and "α = min(1, p/q) = 0.20" in a
    b = rv.reveal_kept(2, t, 1)
    assert "3 of 3 kept" in b and "bonus" in b and "not this time" in b


def test_identical_answer_follows_the_baseline():
    assert "identical (7 tokens)" in rv.reveal_identical("identical", _trace(0.0))
    diff = rv.reveal_identical("identical", _trace(1.0, same_baseline=False))
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
    a = rv.reveal_alpha(0.9, _trace(), 1)
    assert "α = 1.000" in a and "not this time" in a and "draft 1 “ a”" in a
    assert "right" in rv.reveal_alpha(1.0, _trace(), 1)
    b = rv.reveal_alpha(0.2, _trace(), 0, 2)
    assert "α = 0.200" in b and "right" in b and "draft 3 “ sat”" in b and "rejected" in b


def test_exact_answer_and_an_inconclusive_verdict_is_not_judged():
    a = rv.reveal_exact("biased", "<b>bug</b>", "biased", 0.1, 0.01, 1e-9)
    assert "right" in a and "<b>bug" not in a and "&lt;b&gt;bug" in a
    assert "not this time" in rv.reveal_exact("stays exact", "x", "biased", 0.1, 0.01, 1e-9)
    assert "right" not in rv.reveal_exact("stays exact", "x", "inconclusive", 0.02, 0.02, 0.2)


def test_temperature_answer_compares_the_hottest_with_the_coolest_run():
    assert rv.acceptance_row(_trace())[:3] == (1.0, 6, 5)
    assert rv.trend(0.5, 0.52) == "about the same" and rv.trend(0.5, 0.3) == "lower" and rv.trend(0.3, 0.5) == "higher"
    rows = [(0.3, 100, 60, 0.6), (0.7, 100, 50, 0.5), (1.0, 50, 20, 0.4)]
    a = rv.reveal_temperature("lower", rows)
    assert "right" in a and "40% at T = 1 vs 60% at T = 0.3" in a
    assert "not this time" in rv.reveal_temperature("about the same", rows)
    with pytest.raises(ValueError):
        rv.reveal_temperature("lower", [(0.3, 0, 0, None), (1.0, 10, 5, 0.5)])


def test_speedup_answer_is_the_measured_speedup():
    t = _trace()
    s = (7 / 0.06) / (7 / 0.09)
    a = rv.reveal_speedup(1.5, t, 1.8)
    assert f"×{s:.2f}" in a and "right" in a and "×1.80" in a


def test_draft_and_k_answers_name_the_measured_winner():
    rows = [("prompt lookup", 1.3, 0.6), ("the feature-reading draft", 0.9, 0.4)]
    assert "prompt lookup wins" in rv.reveal_draft("the feature-reading draft", rows)
    assert "neither" not in rv.reveal_draft("x", rows)
    assert "the feature-reading draft wins" in rv.reveal_draft("x", rows[::-1])
    assert "neither beat the baseline" in rv.reveal_draft("x", [("a", 0.9, 0.5), ("b", 0.8, 0.1)])
    a = rv.reveal_best_k(2, [(1, 10.0), (2, 12.0), (3, 11.0)], 8.0, [10.0, 10.0, 11.0, 14.0])
    assert "best K = 2" in a and "right" in a and "×1.50" in a
    assert "best K = 3" in rv.reveal_best_k(2, [(1, 10.0), (2, 12.0), (3, 13.0)], 8.0, [])


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
    a = rv.reveal_tree_gain(1.0, chain, tree, curve)
    assert "+1.00 (4.50 vs 3.50)" in a and "right" in a and "y ~ p" in a
    assert "over 9 tokens, costs 1.67 × the chain&#x27;s over 4" in a and f"×{flat:.2f} as fast" in a
    assert "the chain at 116.7 (×1.00)" in a            # the fixture's tokens/s, the same for both
    tree.iterations[0].emitted = [11]
    tree.config["tree_nodes"] = 3
    for it in tree.iterations:
        it.tree.rule = "greedy"
    b = rv.reveal_tree_gain(1.0, chain, tree, curve)
    assert "-1.00 (2.50 vs 3.50)" in b and "not this time" in b and "did not pay off" in b and "argmax p" in b
    assert "over 4 tokens, as the chain" in b
    with pytest.raises(ValueError, match="measured up to 4"):
        rv.reveal_tree_gain(1.0, chain, tree, curve[:3])
    for it in tree.iterations:
        it.tree = None
    with pytest.raises(ValueError, match="no tree"):
        rv.reveal_tree_gain(1.0, chain, tree, curve)


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


def test_costly_draft_answer_uses_the_measured_speedup_and_c():
    t = _trace()
    a = rv.reveal_costly_draft("slower", t)
    assert "(faster)" in a and "not this time" in a and "c = 0.20" in a
    slow = copy.deepcopy(t)
    slow.stats.tokens_per_s = 1.0
    assert "(slower)" in rv.reveal_costly_draft("slower", slow) and "right" in rv.reveal_costly_draft("slower", slow)
    even = copy.deepcopy(t)
    even.stats.tokens_per_s = even.baseline.tokens_per_s * 1.02
    b = rv.reveal_costly_draft("slower", even)
    assert "about even" in b and "right" not in b and "not this time" not in b


# --- the figures the lesson adds ------------------------------------------------------------------------------

def test_forward_cost_figures():
    fig = forward_cost_figure([10.0, 12.0, 20.0])
    assert len(fig.data) == 3 and list(fig.data[-1].y) == [10.0, 12.0, 20.0]
    assert list(fig.data[0].y) == [10.0, 20.0, 30.0]            # n one-token forwards
    assert len(forward_cost_figure([]).data) == 0
    assert list(baseline_forwards_figure([30.0, 10.0]).data[0].y) == [30.0, 10.0]
    assert len(baseline_forwards_figure([]).data) == 0
    acc = acceptance_by_temperature_figure([(0.3, 10, 5, 0.6), (1.0, 0, 0, None)])
    assert list(acc.data[0].y) == [0.5, 0.0] and list(acc.data[0].x) == ["T = 0.3", "T = 1"]
    assert len(acceptance_by_temperature_figure([]).data) == 0
