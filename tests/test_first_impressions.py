"""What a newcomer sees first: a finished run opens on its most instructive iteration, no viewer starts as empty
frames, the Simulator runs when its tab opens, and greedy runs are described by the greedy rule (a rejected draft is
replaced by the target's argmax), sampling runs by the residual."""
from __future__ import annotations

import copy
import json

import gradio as gr
import pytest

from components.render.anatomy import anatomy_figure
from components.render.figures import FIGURE_IDS, outcomes_figure, residual_figure
from components.render.base import instructive_index
from components.pages.replay import EXAMPLES_DIR, replay_example
from components.pages.teaching.simulator import simulator_on_open
from components.render.tokens import tokens_html
from components.pages.viewer import build_viewer
from specdec_core import Trace


def _example(name: str) -> Trace:
    return Trace.from_dict(json.loads((EXAMPLES_DIR / name).read_text(encoding="utf-8")))


def _texts(fig) -> str:
    """Every piece of text a figure shows: title, annotations, trace names, cell texts, tick labels."""
    d = fig.to_plotly_json()
    out = [str(d["layout"].get("title", {}).get("text", ""))]
    out += [str(a.get("text", "")) for a in d["layout"].get("annotations", [])]
    for t in d["data"]:
        out.append(str(t.get("name", "")))
        for key in ("text", "hovertext"):
            v = t.get(key)
            out += [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v or "")]
    for axis in ("xaxis", "yaxis"):
        out += [str(x) for x in d["layout"].get(axis, {}).get("ticktext", []) or []]
    return "\n".join(out)


def _rejecting(it) -> bool:
    return any(d.tested and not d.accepted for d in it.drafts)


def test_instructive_index_prefers_the_first_rejection_then_the_first_drafts():
    trace = _example("sampling_t08.json")
    i = instructive_index(trace)
    assert _rejecting(trace.iterations[i]) and not any(_rejecting(it) for it in trace.iterations[:i])
    accepting = copy.deepcopy(trace)
    for it in accepting.iterations:                # no rejection anywhere: the first iteration with drafts
        it.drafts = [d for d in it.drafts if d.accepted]
    accepting.iterations[0].drafts = []
    assert instructive_index(accepting) == next(it.index for it in accepting.iterations if it.drafts)
    for it in accepting.iterations:                # nothing drafted at all: the last iteration
        it.drafts = []
    assert instructive_index(accepting) == len(accepting.iterations) - 1
    accepting.iterations = []
    assert instructive_index(accepting) is None


def test_a_loaded_example_opens_on_its_first_rejection():
    out = replay_example("sampling_t08.json")
    trace = _example("sampling_t08.json")
    assert out[9].value == instructive_index(trace) + 1                         # the step-through slider
    assert f'class="sd-it sd-sel" data-it="{instructive_index(trace)}"' in out[0]


def test_a_viewer_without_a_trace_shows_what_each_figure_will_hold():
    with gr.Blocks():
        viewer = build_viewer("t-")
    for key in FIGURE_IDS:
        fig = viewer.plots[key].value
        assert fig is not None and "plot" in fig, key
        notes = [a["text"] for a in json.loads(fig["plot"])["layout"].get("annotations", [])]
        assert notes and all(len(n) > 20 for n in notes), key
    anatomy = json.loads(viewer.anatomy.value["plot"])
    assert "pick an iteration" in anatomy["layout"]["annotations"][0]["text"]


def test_the_simulator_runs_when_its_tab_opens_and_not_again():
    frames = list(simulator_on_open(None, 0.5, "the cat", 4, 1.0, 30, 0, False))
    assert frames
    final = frames[-1]
    trace = Trace.from_dict(final[-2])
    assert trace.iterations and trace.baseline is not None
    assert final[9].value == instructive_index(trace) + 1
    again = list(simulator_on_open(final[-2], 0.5, "the cat", 4, 1.0, 30, 0, False))
    assert len(again) == 1 and len(again[0]) == len(final)
    assert all(isinstance(v, type(gr.skip())) for v in again[0])


def test_greedy_runs_say_the_target_takes_its_own_choice():
    trace = _example("ngram_extractive.json")
    assert trace.config["temperature"] == 0
    i = instructive_index(trace)
    assert trace.iterations[i].resampled is not None
    anatomy, residual = _texts(anatomy_figure(trace, i)), _texts(residual_figure(trace, i))
    for text in (anatomy, residual):
        assert "norm(max(0" not in text and "resampled" not in text and "residual" not in text.replace(
            "no residual drawn", "")
        assert "argmax p" in text or "own choice" in text
    names = [t.name for t in residual_figure(trace, i).data]    # no one-hot "residual" at probability 1.000
    assert names == ["p (target), one-hot at its argmax", "q (draft)"]
    assert "target's choice" in _texts(outcomes_figure(trace)) and "resampled" not in _texts(outcomes_figure(trace))
    stream = tokens_html(trace, i)
    assert "argmax p" in stream and "norm(max(0" not in stream


@pytest.mark.parametrize("name", ["sampling_t08.json", "trained_draft_t07.json"])
def test_sampling_runs_keep_the_residual_words(name):
    trace = _example(name)
    i = instructive_index(trace)
    assert "norm(max(0, p − q))" in _texts(anatomy_figure(trace, i))
    assert "norm(max(0, p − q))" in _texts(residual_figure(trace, i))
    assert "resampled" in _texts(outcomes_figure(trace)) and "argmax" not in _texts(anatomy_figure(trace, i))
