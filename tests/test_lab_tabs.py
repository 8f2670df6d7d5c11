"""The teaching tabs' handlers, called without a browser: the tabs build with their stable elem_ids,
the handlers return figures and tables, and bad input becomes a gr.Error."""
import threading

import gradio as gr
import plotly.graph_objects as go
import pytest

from components.pages import teaching as lab_tabs
from components.pages.teaching import compare as tab_compare, ksweep as tab_ksweep, lab as tab_lab, simulator as tab_simulator, theory as tab_theory
from components.pages.context import AppContext
from specdec_core import InjectedBugs, LoadedModel, SpecConfig, Trace, speculative_generate
from specdec_core.bugs import NO_BUGS
from specdec_core.teaching.toy import make_toy_pair, pair_meta

ELEM_IDS = ["lab-setup", "lab-run", "lab-plot", "lab-verdict", "lab-details", "lab-bug-resample", "lab-bug-greedy",
            "lab-bug-drafttemp", "lab-bug-dropbonus", "sim-run", "sim-plot", "sim-position", "sim-tokens",
            "sim-iteration", "sim-plot-pq", "sim-sweep-run", "sim-sweep-plot", "sim-speedup-table", "theory-k",
            "theory-c", "theory-refresh", "theory-heatmap", "theory-kcurves", "theory-formulas", "theory-md",
            "compare-run", "select-run", "compare-plot", "compare-table", "compare-rejected", "compare-summary",
            "ksweep-run", "ksweep-plot", "ksweep-table", "ksweep-md"]


class PreloadedPool:
    """The pool interface the handlers use (get / loaded), holding the session's bundled model so the
    handlers do not load a second copy."""

    def __init__(self, models: dict[str, LoadedModel]) -> None:
        self.models = models

    def get(self, key: str) -> LoadedModel:
        if key not in self.models:
            raise RuntimeError(f"could not load '{key}': no network here")
        return self.models[key]

    def loaded(self) -> list[str]:
        return list(self.models)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pool(bundled):
    model, tok = bundled
    return PreloadedPool({"bundled": LoadedModel("bundled", "SmolLM2 (test)", model, tok, threading.Lock())})


def _lab(**over):
    args = dict(setup="toy", prompt="the cat", chat=False, agreement=0.2, n_tokens=1, k=3, temperature=1.0, top_k=0,
                top_p=1.0, n_runs=600, seed=0, bug_resample=False, bug_greedy=False, bug_mismatch=False,
                bug_draft_temperature=2.0, bug_drop_bonus=False)
    args.update(over)
    return tab_lab.run_lab(None, *args.values(), progress=None)


def test_tabs_build_with_stable_elem_ids():
    from specdec_core import ModelPool
    with gr.Blocks() as demo:
        with gr.Tabs():
            lab_tabs.add_teaching_tabs(AppContext(ModelPool(), gr.State(None)))
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    missing = [i for i in ELEM_IDS if i not in ids]
    assert not missing, missing


def test_bug_switches_are_off_unless_ticked():
    assert tab_lab.lab_bugs(False, False, False, 2.0, False) == NO_BUGS
    assert tab_lab.lab_bugs(False, False, True, 1.5, False) == InjectedBugs(draft_temperature=1.5)
    with pytest.raises(gr.Error, match="draft temperature"):
        tab_lab.lab_bugs(False, False, True, None, False)


@pytest.mark.slow
def test_lab_correct_and_broken_on_the_toy_pair():
    fig, verdict, details = _lab()
    assert isinstance(fig, go.Figure) and [t.type for t in fig.data] == ["bar", "bar"]
    assert "No bias detected" in verdict and "none (the correct engine)" in details
    fig, verdict, details = _lab(bug_greedy=True)
    assert "Biased" in verdict and "greedy_draft_ratio_rule" in details
    assert "BIASED" in fig.layout.title.text


@pytest.mark.parametrize("over, message", [
    (dict(prompt="   "), "prompt is empty"),
    (dict(prompt="the zebra"), "unknown word"),
    (dict(n_runs=10**6), "runs must be between"),
    (dict(k=0), "K must be between"),
    (dict(temperature=None), "temperature must be a number"),
    (dict(n_tokens=3), "tokens examined"),
    (dict(setup="nope"), "unknown setup"),
])
def test_lab_bad_input_is_a_clear_error(over, message):
    with pytest.raises(gr.Error, match=message):
        _lab(**over)


def test_lab_setup_change_sizes_n_and_shows_the_agreement_slider():
    prompt, chat, n, agreement = tab_lab.lab_setup_changed("ngram")
    assert "one, two" in prompt.value and n.value == tab_lab.LAB_DEFAULTS["ngram"][2] and agreement.visible is False
    assert tab_lab.lab_setup_changed("toy")[3].visible is True


def test_simulator_streams_and_steps():
    outs = list(tab_simulator.run_simulator(0.5, "the cat", 3, 1.0, 30, 0, False))
    last = outs[-1]
    assert len(last) == 14 + 3                        # viewer (tokens, 7 plots, summary, slider, anatomy, tree x3) + 3
    trace = Trace.from_dict(last[-2])
    assert trace.stats.new_tokens == 30 and trace.baseline is not None
    assert "sd-tokens" in last[0] and trace.prompt == "the cat"
    step = tab_simulator.step_simulator(last[-2], 1, 1)                # from iteration 1 to 2
    assert len(step) == 10 and isinstance(step[4], go.Figure) and isinstance(step[-2], go.Figure)  # + tree x3
    fig = tab_simulator.sim_position(last[-2], 2, 1)
    assert "iteration 2, position 1" in fig.layout.title.text
    assert {t.name for t in fig.data} >= {"p (target)", "q (draft)"}
    assert len(fig.data[0].y) == 10                         # all ten probabilities
    with pytest.raises(gr.Error, match="unknown word"):
        list(tab_simulator.run_simulator(0.5, "hello there", 3, 1.0, 30, 0, False))
    with pytest.raises(gr.Error, match="Nothing to step"):
        tab_simulator.step_simulator(None, 1, 1)


@pytest.mark.slow
def test_simulator_slow_motion_yields_every_iteration(monkeypatch):
    monkeypatch.setattr(tab_simulator, "SLOW_MOTION_S", 0.0)
    outs = list(tab_simulator.run_simulator(0.5, "the", 2, 1.0, 12, 1, True))
    n_iter = len(Trace.from_dict(outs[-1][-2]).iterations)
    assert len(outs) == n_iter + 1


def test_simulator_sweep_returns_plot_and_table():
    fig, table = tab_simulator.run_sim_sweep(3, 1.0, 60, progress=None)
    assert isinstance(fig, go.Figure) and len(fig.data[0].x) == len(tab_simulator.SIM_AGREEMENTS)
    assert len(table.value["data"]) == len(tab_simulator.SIM_AGREEMENTS)
    assert table.value["headers"][3:] == [f"c = {c:g}" for c in tab_simulator.SIM_C_VALUES]


def test_theory_with_and_without_a_run():
    heat, curves, formulas, md = tab_theory.update_theory(4, 0.1, None)
    assert heat.data[0].type == "heatmap" and "Live tab" in md
    pair = make_toy_pair(0.6)
    trace = speculative_generate(pair.target, pair.draft, pair.tokenizer.encode("the"),
                                 SpecConfig(k=3, temperature=1.0, max_new_tokens=30), pair.tokenizer,
                                 meta=pair_meta(pair))
    heat, curves, formulas, md = tab_theory.update_theory(3, 0.2, trace.to_dict())
    assert "Your latest run" in md and "K = 3" in md
    assert any(t.name and "your latest run" in t.name for t in heat.data)
    assert any(t.name == "calibrated prediction for your run" for t in curves.data)   # the cost model's curve
    flat = tab_theory.update_theory(3, 0.2, trace.to_dict(), "flat (GPU-like)")[1]
    assert any(t.name == "calibrated prediction, flat verify" for t in flat.data)
    with pytest.raises(gr.Error, match="K must be between"):
        tab_theory.update_theory(0, 0.1, None)


def test_prompts_parsing():
    assert tab_compare.parse_prompts("a\n\n b \n") == ["a", "b"]
    with pytest.raises(gr.Error, match="at least one prompt"):
        tab_compare.parse_prompts(" \n ")
    with pytest.raises(gr.Error, match="At most"):
        tab_compare.parse_prompts("\n".join("p" * 3 for _ in range(tab_compare.MAX_SELECTION_PROMPTS + 1)))


# --- on the bundled model ------------------------------------------------------------------------------

@pytest.mark.slow
def test_compare_lists_the_incompatible_toy_and_ranks_the_rest(pool):
    fig, table, rejected, summary = tab_compare.run_compare(pool, "bundled", "Count from 1 to 10, separated by commas.",
                                                   True, 3, 0.0, 8, 0, progress=None)
    names = [row[1] for row in table.value["data"]]
    assert names[0] == "baseline (target only)"
    assert "prompt lookup (n-gram)" in names and any(n.startswith("self") for n in names)
    assert "toy 10-word bigram model" in rejected and "vocab size" in rejected
    assert all(row[-1] in ("yes", "–") for row in table.value["data"])   # greedy: same tokens as the baseline
    assert isinstance(fig, go.Figure) and "best =" in fig.layout.title.text
    assert "Selected" in summary or "No draft beats the baseline" in summary


@pytest.mark.slow
def test_ksweep_on_the_bundled_model(pool):
    fig, table, md = tab_ksweep.run_ksweep(pool, "bundled", "ngram", "Count from 1 to 10, separated by commas.", True, 2,
                                   0.0, 12, 0, progress=None)
    rows = table.value["data"]
    assert [r[0].rstrip(" ★") for r in rows] == ["1", "2"] and sum("★" in r[0] for r in rows) == 1
    assert all(r[-1] == "yes" for r in rows)
    assert "Best measured K" in md and isinstance(fig, go.Figure)
    assert "calibrated" in md and any(t.name == "calibrated prediction (measured verify curve)" for t in fig.data)
    assert "Knowing the output" in md                                    # greedy prompt lookup: the ceiling
    assert any((t.name or "").startswith("best K schedule in hindsight") for t in fig.data)
    with pytest.raises(gr.Error, match="could not load"):
        tab_ksweep.run_ksweep(pool, "bundled", "org/absent-model", "hi", True, 2, 0.0, 12, 0, progress=None)


@pytest.mark.slow
def test_lab_on_the_bundled_model_with_prompt_lookup(pool):
    fig, verdict, details = tab_lab.run_lab(pool, "ngram", tab_lab.LAB_DEFAULTS["ngram"][0], False, 0.0, 1, 3, 1.0, 0, 1.0,
                                       10, 0, True, False, False, 2.0, False, progress=None)
    assert "10 of 10" in details and "10 runs drafted" in details
    assert "resample_from_p" in details and isinstance(fig, go.Figure)


@pytest.mark.parametrize("value", [None, "3", True, 2.5, float("nan"), float("inf"), float("-inf")])
def test_shared_conversions_name_the_setting(value):
    from components.serving.inputs import as_float, as_int
    with pytest.raises(gr.Error, match="K must be a whole number"):
        as_int("K", value, 1, 16)
    if not isinstance(value, float) or value != value:
        with pytest.raises(gr.Error, match="c must be a number"):
            as_float("c", value, 0.0, 1.0)
    else:
        with pytest.raises(gr.Error, match="c must be"):
            as_float("c", value, 0.0, 1.0)
