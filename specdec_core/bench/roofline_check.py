"""The roofline against this machine: ``python -m specdec_core.bench.roofline_check [--json PATH]``.

On one core (one torch thread), it measures the bundled target's verify curve t(1..16) as the calibration
does (after 128 cached tokens; by default in this process's CPU time, which other work on a shared machine
does not inflate; ``--clock wall`` for wall time), and the framework's overhead per forward: one-token
forwards of Llama models with hidden size 64 (nothing to compute or read to speak of) with 1 and 30 layers
give a fixed part and a part per layer. Then it sets the roofline of this CPU's spec-sheet profile (``devices.json``, id
``epyc-zen5-1core``), fed only those figures and the measured overhead, beside the measured curve, and
prints the error at every n; as a second reading, the same with the overhead set so that t(1) matches (what
is left is the error in the curve's shape); as a third, with the bandwidth one thread is measured to read
instead of the socket's datasheet figure (which term misses).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable

import torch

PROFILE = "epyc-zen5-1core"
N_MAX = 16
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def tiny_llama(layers: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval()


@torch.inference_mode()
def forward_curve(model: torch.nn.Module, n_max: int, clock: Callable[[], float], context: int = 128,
                  repeats: int = 5) -> list[float]:
    """Median ms of one forward over n = 1..n_max new tokens after ``context`` cached ones (as the calibration
    measures it), read on ``clock`` (seconds): ``time.perf_counter`` for wall time, ``time.process_time`` for
    this process's CPU time, which a machine busy with other work does not inflate."""
    from ..models.kv_cache import new_kv_cache
    vocab = int(model.get_output_embeddings().weight.shape[0])
    ids = torch.randint(0, vocab, (1, context + n_max), generator=torch.Generator().manual_seed(0))
    cache = new_kv_cache(model.config)
    model(input_ids=ids[:, :context], past_key_values=cache, use_cache=True, logits_to_keep=1)
    times: dict[int, list[float]] = {n: [] for n in range(1, n_max + 1)}
    for r in range(repeats + 1):                     # the first round warms up, untimed
        for n in (range(1, n_max + 1) if r % 2 else range(n_max, 0, -1)):
            t0 = clock()
            model(input_ids=ids[:, context:context + n], past_key_values=cache, use_cache=True, logits_to_keep=n)
            dt = clock() - t0
            cache.crop(-n)
            if r:
                times[n].append(1e3 * dt)
    return [statistics.median(times[n]) for n in range(1, n_max + 1)]


def measure_overhead(clock: Callable[[], float]) -> tuple[float, float]:
    """(fixed ms, ms per layer) of a one-token forward that has next to nothing to compute."""
    t1 = forward_curve(tiny_llama(1), 1, clock, repeats=15)[0]
    t30 = forward_curve(tiny_llama(30), 1, clock, repeats=15)[0]
    per_layer = max(0.0, (t30 - t1) / 29)
    return max(0.0, t1 - per_layer), per_layer


def measure_read_bandwidth(clock: Callable[[], float], mb: int = 512, repeats: int = 5) -> float:
    """GB/s one thread reads a float32 tensor of ``mb`` MB at (the median of ``repeats`` sums): a diagnostic
    beside the spec sheet's socket figure, not an input of the roofline."""
    x = torch.ones(mb * 2**20 // 4)
    x.sum()
    times = []
    for _ in range(repeats):
        t0 = clock()
        x.sum()
        times.append(clock() - t0)
    return x.numel() * 4 / statistics.median(times) / 1e9


def check(clock_name: str = "cpu") -> dict:
    from ..models.loading import load_bundled_model
    from ..policy.roofline import forward_ms, model_shape, profiles
    clock = CLOCKS[clock_name]
    torch.set_num_threads(1)
    model, _ = load_bundled_model("cpu")
    shape = model_shape(model)
    measured = forward_curve(model, N_MAX, clock)
    fixed, per_layer = measure_overhead(clock)
    spec = next(d for d in profiles() if d.id == PROFILE)
    with_measured = dataclasses.replace(spec, overhead_ms=fixed, overhead_ms_per_layer=per_layer)
    roof = [forward_ms(with_measured, shape, n) for n in range(1, N_MAX + 1)]
    bare = [forward_ms(dataclasses.replace(spec, overhead_ms=0.0, overhead_ms_per_layer=0.0), shape, n)
            for n in range(1, N_MAX + 1)]
    fitted = [b + (measured[0] - bare[0]) for b in bare]          # the overhead that makes t(1) match
    bandwidth = measure_read_bandwidth(clock)
    read = [forward_ms(dataclasses.replace(with_measured, bandwidth_gb_s=bandwidth), shape, n)
            for n in range(1, N_MAX + 1)]

    def errors(pred: list[float]) -> list[float]:
        return [p / m - 1 for p, m in zip(pred, measured)]

    return {"profile": PROFILE, "clock": clock_name, "weights": shape.weights, "layers": shape.layers, "threads": 1,
            "overhead_fixed_ms": fixed, "overhead_per_layer_ms": per_layer, "measured_ms": measured,
            "roofline_ms": roof, "roofline_errors": errors(roof), "fitted_overhead_ms": measured[0] - bare[0],
            "fitted_ms": fitted, "fitted_errors": errors(fitted), "read_gb_s": bandwidth,
            "spec_gb_s": spec.bandwidth_gb_s, "read_bandwidth_ms": read, "read_bandwidth_errors": errors(read)}


def report_lines(r: dict) -> list[str]:
    lines = [f"bundled target: {r['weights']:,} weights multiplied per token, {r['layers']} layers; one thread; "
             f"{'CPU' if r['clock'] == 'cpu' else 'wall'} time",
             f"measured overhead: {r['overhead_fixed_ms']:.2f} ms + {r['overhead_per_layer_ms']:.3f} ms per layer "
             f"= {r['overhead_fixed_ms'] + r['layers'] * r['overhead_per_layer_ms']:.1f} ms per target forward",
             f"one thread reads {r['read_gb_s']:.1f} GB/s (the spec sheet's socket: {r['spec_gb_s']:.0f} GB/s)",
             f"{'n':>3} {'measured':>9} {'roofline':>9} {'error':>7} {'fit t(1)':>9} {'error':>7} "
             f"{'read BW':>9} {'error':>7}"]
    for n, (m, p, e, f, fe, b, be) in enumerate(zip(
            r["measured_ms"], r["roofline_ms"], r["roofline_errors"], r["fitted_ms"], r["fitted_errors"],
            r["read_bandwidth_ms"], r["read_bandwidth_errors"]), 1):
        lines.append(f"{n:>3} {m:9.1f} {p:9.1f} {100 * e:+6.0f}% {f:9.1f} {100 * fe:+6.0f}% {b:9.1f} {100 * be:+6.0f}%")
    mae = statistics.fmean(abs(e) for e in r["roofline_errors"])
    fmae = statistics.fmean(abs(e) for e in r["fitted_errors"][1:])
    lines.append(f"mean |error|: roofline with the measured overhead {100 * mae:.0f} %; with the overhead fitted at "
                 f"t(1) ({r['fitted_overhead_ms']:.1f} ms), over n = 2..{len(r['measured_ms'])}: {100 * fmae:.0f} %; "
                 f"with the measured read bandwidth: "
                 f"{100 * statistics.fmean(abs(e) for e in r['read_bandwidth_errors']):.0f} %")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench.roofline_check", description=__doc__.split("\n")[0])
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="cpu",
                    help="cpu (this process's CPU time, default: steady on a busy machine) or wall")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    r = check(args.clock)
    print("\n".join(report_lines(r)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
