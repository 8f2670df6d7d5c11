"""The roofline what-if: forward times on a made-up profile by hand, a recorded run priced on it by hand, the
shipped profiles' sources, and the sizes a run records."""
import pytest

from conftest import make_tiny_lm
from specdec_core import NGramDrafter, SpecConfig, speculative_generate
from specdec_core.policy.roofline import (Device, ModelShape, device_costs, forward_ms, model_shape, priced_speedup,
                                          profiles, what_if)
from specdec_core.trace import DraftRecord, IterationRecord, Stats, Trace

# Made up: 100 GB/s, 1 TFLOP/s, float16 (2 bytes a weight), 1 ms per forward + 0.1 ms per layer.
DEV = Device("made-up", "made-up device", "float16", 100.0, 1.0, 1.0, 0.1)
TARGET = ModelShape(1_000_000_000, 10)      # memory 2e9 B / 1e11 B/s = 20 ms; compute 2e9 n / 1e12 = 2n ms
DRAFT = ModelShape(100_000_000, 2)          # memory 2 ms; compute 0.2 n ms


def test_forward_time_by_hand():
    assert forward_ms(DEV, TARGET, 1) == pytest.approx(20 + 1 + 10 * 0.1)        # memory-bound: 22 ms
    assert forward_ms(DEV, TARGET, 10) == pytest.approx(20 + 2)                 # the ridge: 2 * 10 = 20 ms
    assert forward_ms(DEV, TARGET, 20) == pytest.approx(40 + 2)                 # compute-bound: 42 ms
    assert forward_ms(DEV, DRAFT, 1) == pytest.approx(2 + 1 + 0.2)              # 3.2 ms
    with pytest.raises(ValueError):
        forward_ms(DEV, TARGET, 0)


def _iteration(i: int, start: int) -> IterationRecord:
    drafts = [DraftRecord(10 + j, "", 1.0, 1.0, 1.0, None, True) for j in range(2)]
    return IterationRecord(i, start, 2, drafts, None, None, [10, 11, 12], [1.0, 1.0], 5.0, 0.5)


def test_a_run_priced_on_the_made_up_device_by_hand():
    """Two iterations at K = 2, both drafts accepted (3 tokens each), prompt of 4 tokens:
    spec = prefill t(4) + t_draft(4) = 22 + 3.2, then 2 x (2 drafts x 3.2 + t_verify(3) = 22) = 2 x 28.4 -> 82.0 ms
    for 6 tokens; baseline = t(4) + 6 x t(1) = 22 + 132 = 154 ms -> speedup 154 / 82 = 1.878."""
    its = [_iteration(0, 4), _iteration(1, 7)]
    trace = Trace({"k": 2, "temperature": 0.0, "max_new_tokens": 6, "target_weights": TARGET.weights,
                   "target_layers": TARGET.layers, "draft_weights": DRAFT.weights, "draft_layers": DRAFT.layers},
                  "", [1, 2, 3, 4], its, [10, 11, 12] * 2,
                  stats=Stats(new_tokens=6, iterations=2, drafted=4, accepted=4, draft_forwards=4))
    costs = device_costs(DEV, TARGET, DRAFT, 3, 4)
    assert costs.verify_ms[2] == pytest.approx(22.0) and costs.draft_ms == pytest.approx(3.2)
    assert priced_speedup(trace, costs) == pytest.approx(154 / 82.0)
    (row,) = what_if(trace, [DEV])
    assert row.speedup == pytest.approx(154 / 82.0) and not row.measured
    # a profile of this very device gives way to its calibration
    measured = what_if(trace, [DEV], here="made-up", measured_costs=costs)
    assert [r.measured for r in measured] == [True]
    # a trace without its models' sizes cannot be priced, and says so
    trace.config = {k: v for k, v in trace.config.items() if "weights" not in k}
    assert what_if(trace, [DEV])[0].speedup is None


def test_every_shipped_profile_names_its_sources():
    devs = profiles()
    assert {"laptop-cpu", "t4", "l4", "a10g", "a100", "h100"} <= {d.id for d in devs}
    for d in devs:
        assert {"bandwidth_gb_s", "peak_tflops", "overhead"} <= set(d.sources), d.id
    assert [d.dtype for d in devs if d.id == "t4"] == ["float16"]        # no bfloat16 on a T4


def test_runs_record_their_models_sizes():
    t, d = make_tiny_lm(seed=1), make_tiny_lm(seed=2)
    shape = model_shape(t)           # untied: the input embedding (8 x 16) is gathered, not multiplied
    assert shape == ModelShape(sum(p.numel() for p in t.parameters()) - 8 * 16, 1)
    tr = speculative_generate(t, d, [1, 2, 3], SpecConfig(max_new_tokens=6))
    assert (tr.config["target_weights"], tr.config["draft_layers"]) == (shape.weights, 1)
    tr = speculative_generate(t, NGramDrafter(), [1, 2, 3], SpecConfig(max_new_tokens=6))
    assert "draft_weights" not in tr.config and all(r.speedup is not None for r in what_if(tr))


def test_the_shipped_feature_draft_counts_its_own_layer_and_its_vocabulary_rows(bundled):
    from specdec_core.drafters.registry import shipped_draft_for
    model, _ = bundled
    target = model_shape(model)
    assert target.layers == 30 and 134_000_000 < target.weights < 135_000_000    # tied head counted once
    draft = shipped_draft_for("feature", model)
    shape = model_shape(draft)
    hidden = model.config.hidden_size
    own = sum(p.numel() for n, p in draft.named_parameters() if not n.startswith(("embed_tokens", "lm_head")))
    assert shape == ModelShape(own + len(draft.draft_vocab) * hidden, 1)    # its layer + the head's draft rows


def test_the_theory_tabs_what_if_figure_and_table(tiny_pair):
    from specdec_core import baseline_generate
    from specdec_core.policy.roofline import here_id
    from components.pages.teaching.whatif import update_whatif
    from components.render.whatif import whatif_figure, whatif_md, whatif_rows
    t, d = tiny_pair
    cfg = SpecConfig(max_new_tokens=24)
    tr = speculative_generate(t, d, [1, 2, 3], cfg)
    tr.baseline = baseline_generate(t, [1, 2, 3], cfg)
    rows = whatif_rows(tr)
    assert rows[0].measured and rows[0].label == "this device (cpu), measured costs"
    assert [r.device for r in rows[1:]] == [p.id for p in profiles()]
    fig = whatif_figure(tr, rows)
    measured, predicted = fig.data
    assert list(measured.x) == ["measured speedup here"] and measured.error_y.array[0] >= 0
    assert list(predicted.y) == [r.speedup for r in rows]
    md = whatif_md(tr, rows)
    assert "NVIDIA H100 SXM" in md and "measured costs (calibration)" in md and "95 % CI" in md
    assert "Run a prompt" in update_whatif(None)[1]
    # on an L4 the L4 profile gives way to this device's own calibration
    assert here_id("cuda:0", "NVIDIA L4") == "l4" and here_id("cpu") == "cpu"
    tr.config["device"] = "cuda:0"
    rows = whatif_rows(tr, "NVIDIA L4")
    assert rows[0].label == "this device (NVIDIA L4), measured costs" and "l4" not in [r.device for r in rows[1:]]


def test_the_roofline_check_times_forwards_on_either_clock():
    import time
    from specdec_core.bench.roofline_check import forward_curve, measure_overhead, tiny_llama
    for clock in (time.process_time, time.perf_counter):
        curve = forward_curve(tiny_llama(2), 3, clock, context=8, repeats=2)
        assert len(curve) == 3 and all(t > 0 for t in curve)
    fixed, per_layer = measure_overhead(time.perf_counter)
    assert fixed >= 0 and per_layer > 0          # 30 layers cost more than one
