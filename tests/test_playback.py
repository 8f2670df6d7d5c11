"""Playback, the anatomy figure and presenter mode without a browser: the pure figure builder on recorded
traces (figure data compared), the play / pause / tick handlers, the pace checks, the viewer's initial
state, and the presenter handlers."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from components.render import palette as pal
from components.render.anatomy import N_STAGES, STAGES, anatomy_figure
from components.pages.presenter import presenter_fold, presenter_from_url
from components.pages.viewer import (FAR, PAUSE_LABEL, PLAY_LABEL, build_viewer, check_pace, new_playback, play_tick,
                               render_iteration, set_pace, step_view, toggle_play)
from specdec_core import Trace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _trace(name: str) -> Trace:
    return Trace.from_dict(json.loads((EXAMPLES / name).read_text(encoding="utf-8")))


def _first(trace: Trace, pred) -> int:
    return next(i for i, it in enumerate(trace.iterations) if pred(it))


# --- the anatomy figure ----------------------------------------------------------------------------------

def test_anatomy_of_a_sampled_rejection_shows_every_recorded_number():
    trace = _trace("sampling_t08.json")
    i = _first(trace, lambda it: it.resampled is not None and any(d.accepted for d in it.drafts))
    it = trace.iterations[i]
    fig = anatomy_figure(trace, i)
    assert [t.name for t in fig.data] == list(STAGES)
    draft, verify, decide, emit = (list(t.text) for t in fig.data)
    n = len(it.drafts)
    assert len(draft) == len(verify) == len(decide) == n and len(emit) == n + 1
    for j, d in enumerate(it.drafts):
        assert f"q = {d.q:.3f}" in draft[j] and f"p = {d.p:.3f}" in verify[j]
        if d.tested:
            assert f"α = {d.alpha:.3f}" in decide[j] and f"u = {d.u:.3f}" in decide[j]
            assert ("✓ accept" if d.accepted else "✗ reject") in decide[j]
            assert ("<" if d.accepted else "≥") in decide[j]
        else:
            assert "not tested" in decide[j]
    assert all(e.endswith("✓") if d.accepted else e == ("✗ dropped" if d.tested else "dropped")
               for e, d in zip(emit, it.drafts))
    r = it.resampled
    assert "norm(max(0, p − q))" in emit[-1] and f"{r.residual_prob:.3f}" in emit[-1]
    assert list(fig.data[3].textfont.color)[-1] == pal.RESAMPLED
    assert list(fig.data[2].textfont.color)[:n] == [pal.ACCEPTED if d.accepted else pal.REJECTED if d.tested
                                                    else "#777777" for d in it.drafts]
    assert fig.layout.xaxis.ticktext[-1] == "+1 resampled"
    accepted = sum(d.accepted for d in it.drafts)
    assert f"{accepted} of {n} drafts accepted" in fig.layout.title.text


def test_anatomy_of_a_clean_sweep_ends_with_the_bonus_token():
    trace = _trace("self_draft.json")
    i = _first(trace, lambda it: it.bonus is not None)
    it = trace.iterations[i]
    emit = list(anatomy_figure(trace, i).data[3].text)
    assert all("✓" in e for e in emit[:-1]) and "bonus" in emit[-1] and f"p = {it.bonus.p:.3f}" in emit[-1]
    assert "draft = argmax p" in anatomy_figure(trace, i).data[2].text[0]


@pytest.mark.parametrize("stage", range(1, N_STAGES + 1))
def test_anatomy_builds_up_stage_by_stage(stage):
    trace = _trace("ngram_extractive.json")
    fig = anatomy_figure(trace, 2, stage)
    assert [t.name for t in fig.data] == list(STAGES[:stage])
    assert f"step {stage} of {N_STAGES}" in fig.layout.title.text
    assert anatomy_figure(trace, 2, 99).layout.title.text == anatomy_figure(trace, 2).layout.title.text


def test_anatomy_without_a_selection_or_drafts_says_why():
    empty = Trace(config={"k": 1, "temperature": 0.0, "max_new_tokens": 1}, prompt="", prompt_ids=[])
    assert "Run a prompt" in anatomy_figure(empty).layout.annotations[0].text
    trace = _trace("ngram_extractive.json")
    trace.iterations[0].drafts = []
    assert "proposed nothing" in anatomy_figure(trace, 0).layout.annotations[0].text


def test_anatomy_says_where_and_why_the_draft_stopped():
    trace = _trace("ngram_extractive.json")
    it = trace.iterations[2]
    assert "drafted:" not in anatomy_figure(trace, 2).layout.title.text          # K drafts: nothing to say
    it.k, it.draft_stop = len(it.drafts) + 2, "the match's source has only <2> token(s) after it"
    title = anatomy_figure(trace, 2).layout.title.text
    assert (f"Only {len(it.drafts)} of K = {it.k} drafted: the match's source has only &lt;2&gt; token(s) "
            f"after it.") in title


# --- playback handlers -------------------------------------------------------------------------------------

def _n(trace_dict: dict) -> int:
    return len(trace_dict["iterations"])


SKIP = type(gr.skip())
AT = 4          # the anatomy's place in the step outputs (slider, tokens, plot-pq, plot-residual, anatomy, tree x3)
N_STEP = 8      # the number of step outputs


def test_play_from_the_last_iteration_rewinds_then_ticks_to_the_end_and_stops():
    d = _trace("ngram_extractive.json").to_dict()
    n = _n(d)
    playing = new_playback()
    timer, button, stage, *view = toggle_play(step_view, N_STEP, AT, playing, 0.5, False, d, n)
    assert timer.active is True and timer.value == 0.5 and button.value == PAUSE_LABEL and playing["on"]
    assert view[0].value == 1 and anatomy_title(view[AT]).startswith("Anatomy of iteration 1 — step 4")
    value = 1
    for _ in range(n - 2):                          # ticks in the middle keep the timer running
        *view, timer, button, stage = play_tick(step_view, N_STEP, AT, playing, False, stage, d, value)
        value = view[0].value
        assert isinstance(timer, SKIP) and playing["on"]
    *view, timer, button, stage = play_tick(step_view, N_STEP, AT, playing, False, stage, d, value)
    assert view[0].value == n and timer.active is False and button.value == PLAY_LABEL and not playing["on"]


def test_build_up_playback_shows_each_step_of_the_anatomy_before_moving_on():
    d = _trace("ngram_extractive.json").to_dict()
    n = _n(d)
    playing = new_playback()
    _, _, stage, slider, _, _, _, anatomy, *_ = toggle_play(step_view, N_STEP, AT, playing, 1.0, True, d, n)
    assert stage == 1 and slider.value == 1 and "step 1 of 4" in anatomy_title(anatomy)
    seen, value = [], 1
    while True:
        *view, timer, button, stage = play_tick(step_view, N_STEP, AT, playing, True, stage, d, value)
        if not isinstance(view[0], SKIP):
            value = view[0].value
        seen.append((value, stage))
        assert f"Anatomy of iteration {value} — step {stage} of 4" in anatomy_title(view[AT])
        if not playing["on"]:
            break
        assert len(seen) < 5 * n
    assert seen[:4] == [(1, 2), (1, 3), (1, 4), (2, 1)] and seen[-1] == (n, 4)
    assert len(seen) == 4 * n - 1                   # every step of every iteration, the first one shown by play


def anatomy_title(fig) -> str:
    return fig.layout.title.text


def test_play_in_the_middle_keeps_the_position_and_pause_stops():
    d = _trace("ngram_extractive.json").to_dict()
    playing = new_playback()
    timer, button, stage, *view = toggle_play(step_view, N_STEP, AT, playing, 1.0, True, d, 3)
    assert playing["on"] and stage == 4 and all(isinstance(v, SKIP) for v in view)
    timer, button, stage, *view = toggle_play(step_view, N_STEP, AT, playing, 1.0, False, d, 4)
    assert timer.active is False and button.value == PLAY_LABEL and not playing["on"]


def test_a_tick_on_its_way_when_pause_is_pressed_draws_nothing():
    """The timer's tick and ⏸ run side by side: a tick that reads the switch off (before or after drawing its
    step) leaves every output as it is, so the page stays on the iteration it was paused at."""
    d = _trace("ngram_extractive.json").to_dict()
    playing = new_playback()
    toggle_play(step_view, N_STEP, AT, playing, 1.0, False, d, 2)

    def pausing_step(*args):
        view = step_view(*args)
        toggle_play(step_view, N_STEP, AT, playing, 1.0, False, d, 2)       # ⏸ lands while the tick draws
        return view
    out = play_tick(pausing_step, N_STEP, AT, playing, False, 4, d, 2)
    assert not playing["on"] and all(isinstance(v, SKIP) for v in out)
    assert all(isinstance(v, SKIP) for v in play_tick(step_view, N_STEP, AT, playing, False, 4, d, 2))


@pytest.mark.parametrize("pace, message", [(None, "pace must be a number"), ("1", "pace must be a number"),
                                           (float("nan"), "pace must be a number"), (0.1, "between 0.25 and 3"),
                                           (4, "between 0.25 and 3")])
def test_bad_pace_is_refused_with_its_name(pace, message):
    with pytest.raises(gr.Error, match=message):
        check_pace(pace)
    d = _trace("ngram_extractive.json").to_dict()
    with pytest.raises(gr.Error, match=message):
        toggle_play(step_view, N_STEP, AT, new_playback(), pace, False, d, 1)


def test_nothing_to_play_and_the_pace_slider():
    with pytest.raises(gr.Error, match="Nothing to play back"):
        toggle_play(step_view, N_STEP, AT, new_playback(), 1.0, False, None, None)
    *skips, timer, button, stage = play_tick(step_view, N_STEP, AT, {"on": True}, True, 2, None, None)
    assert len(skips) == N_STEP and timer.active is False
    assert set_pace(2.5, {"on": True}).value == 2.5 and set_pace(2.5, {"on": True}).active is True
    assert set_pace(0.25, new_playback()).active is False


def test_home_and_end_land_on_the_first_and_last_iteration():
    d = _trace("ngram_extractive.json").to_dict()
    assert step_view(d, 5, -FAR)[0].value == 1 and step_view(d, 5, FAR)[0].value == _n(d)
    assert len(render_iteration(Trace.from_dict(d), 0)) == 8


def test_a_viewer_built_with_a_trace_starts_drawn_with_one_iteration_slider():
    trace = _trace("ngram_extractive.json")
    with gr.Blocks() as demo:
        v = build_viewer("t-", initial=trace)
    sliders = [b for b in demo.blocks.values() if isinstance(b, gr.Slider)]
    assert sorted(s.elem_id for s in sliders) == ["t-iteration", "t-pace"]      # no stray slider
    assert v.build_up.value is False and v.stage.value == N_STAGES
    assert v.slider.value == len(trace.iterations) and v.slider.interactive is True
    assert all(p.value is not None for p in v.plots.values()) and v.anatomy.value is not None
    assert "Press Run" not in v.tokens.value


# --- presenter mode -----------------------------------------------------------------------------------------

def test_presenter_from_the_url_and_the_fold():
    on = presenter_from_url(SimpleNamespace(query_params={"presenter": "1"}))
    assert isinstance(on, gr.Checkbox) and on.value is True
    assert isinstance(presenter_from_url(SimpleNamespace(query_params={})), type(gr.skip()))
    folded = presenter_fold(True, 2)
    assert len(folded) == 2 and all(a.open is False for a in folded)
    assert presenter_fold(False, 1)[0].open is True
