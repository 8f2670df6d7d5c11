"""Batched speculative decoding on a busy server: the speedup over the batched target-only run at each batch size,
the batch size where speculation stops paying, and the cost-aware K against every fixed K.

    python -m specdec_core.bench --only batch                         # B = 1, 2, 4, 8, 16; prompt lookup and the
                                                                      # feature draft; 48 new tokens; 4 rounds
    python -m specdec_core.bench --only batch --batch-sizes 1,4 --batch-rounds 2 --quick

For each batch size B the batch is the bench's copy prompt (row 0: prompt lookup's home ground) and B − 1 held-out
chat requests (``training.prompts.heldout_prompts``: open answers, most longer than the tokens asked for), so rows
differ in prompt length and kind, as on a server. Per round, in alternating order: the
batched target-only baseline, and per draft every fixed K of ``FIXED_KS`` and the cost-aware policy (cap the
largest fixed K, priced with this machine's batch prices, measured before the rounds). All greedy: every row of
every run must equal the baseline's row token for token (a ratio is refused otherwise).

The speedup at batch size B is the throughput **while the batch is full**: all rows' tokens ÷ the time of the
iterations in which every row took part (the baseline: its steps after the first, which carries the prefill). A
server that keeps B requests in flight (continuous batching: a finished request's place is taken by the next)
decodes at that rate; a static batch does not stay at B — its rows finish at different times (a copied passage in
a third of the iterations an open answer needs), and the stretch where fewer rows are left runs at a smaller batch's
rate. So each side also gets the **whole batch**'s ratio (every row's tokens ÷ the wall time to the last row,
prefill included), printed beside. A side's speedup is the geometric mean of its per-round ratios over the same
round's baseline with a t interval (``stats.intervals.rounds_interval``). K = 0 is the baseline itself (×1).

Printed per draft and B: the best fixed K and its speedup, the cost-aware policy's speedup, the K it chose (mean
over iterations) and its ratio to the best fixed K (K = 0 included; the goal: ≥ ``GOAL``); the crossover B on this
machine (the smallest B where no fixed K's interval lies above ×1 and the best is below); and the crossover the
cost model predicts from the measured prices and acceptance, here and on the GPU profiles (``policy.roofline``),
with their per-forward overhead and without it (a CUDA-graph engine).
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..config import SpecConfig
from ..stats.intervals import rounds_interval
from .prompts import PROMPTS

FIXED_KS = (1, 2, 3, 4, 6)
GOAL = 0.95                      # cost-aware ÷ best fixed K (K = 0 included), at every B
BATCH_DRAFTS = ("ngram", "feature", "trained")
GPU_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
GPUS = ("t4", "a10g", "h100")
HELDOUT_SEED = 23                # the held-out section's draw


@dataclass(frozen=True)
class BatchSettings:
    sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    drafts: tuple[str, ...] = ("ngram", "feature")
    max_new_tokens: int = 48
    repeats: int = 4


def validate_batch(bs: BatchSettings) -> None:
    from ..limits import check_batch
    if not bs.sizes or any(check_batch(b) != b for b in bs.sizes) or list(bs.sizes) != sorted(set(bs.sizes)):
        raise ValueError(f"batch sizes must be increasing, each between 1 and 16, got {bs.sizes}")
    if not bs.drafts or any(d not in BATCH_DRAFTS for d in bs.drafts):
        raise ValueError(f"batch drafts must be among {', '.join(BATCH_DRAFTS)}, got {bs.drafts}")
    if bs.repeats < 2:
        raise ValueError(f"batch rounds must be at least 2 (an interval needs two), got {bs.repeats}")
    SpecConfig(max_new_tokens=bs.max_new_tokens)


Run = Callable[[], Any]          # one run: a Trace (speculative) or (results, BatchBaseline)


def run_batch_bench(target: torch.nn.Module, tokenizer: Any, bs: BatchSettings,
                    log: Callable[[str], None] = print) -> dict:
    from ..batch.baseline import batch_baseline
    from ..batch.engine import batch_generate
    from ..batch.prices import measured_batch_prices
    from ..training.prompts import heldout_prompts
    from ..drafters.model import model_drafter
    from ..drafters.ngram import NGramDrafter
    from ..drafters.registry import shipped_draft_for
    from ..models.loading import encode_prompt
    n, cap = bs.max_new_tokens, max(FIXED_KS)
    makers = {d: (NGramDrafter if d == "ngram" else
                  (lambda d=d: model_drafter(shipped_draft_for(d, target), name=d))) for d in bs.drafts}
    cost_cfg = SpecConfig(k=cap, k_policy="cost", max_new_tokens=n)
    prices = {}
    for d, make in makers.items():
        log(f"  measuring the batch prices of {d} (once) …")
        prices[d] = measured_batch_prices(target, make(), cost_cfg, batch_generate, tuple(sorted(set(bs.sizes) | {1})))
    report: dict = {"settings": dataclasses.asdict(bs), "fixed_ks": list(FIXED_KS), "sizes": {},
                    "prices": {d: p.to_dict() for d, p in prices.items()}}
    others = heldout_prompts(max(bs.sizes) - 1, seed=HELDOUT_SEED) if max(bs.sizes) > 1 else []
    for b in bs.sizes:
        texts = [PROMPTS[0].text, *others[:b - 1]]
        ids = [encode_prompt(tokenizer, t) for t in texts]
        greedy = SpecConfig(max_new_tokens=n)
        runs: dict[str, Run] = {"baseline": lambda: batch_baseline(target, ids, greedy, tokenizer)}
        for d, make in makers.items():
            for k in FIXED_KS:
                runs[f"{d} K={k}"] = (lambda make=make, k=k: batch_generate(
                    target, make(), ids, SpecConfig(k=k, k_policy="fixed", max_new_tokens=n), tokenizer))
            runs[f"{d} cost"] = (lambda make=make, d=d: batch_generate(target, make(), ids, cost_cfg, tokenizer,
                                                                        prices=prices[d]))
        rounds = _interleave(runs, bs.repeats, warm=b == bs.sizes[0])
        report["sizes"][b] = _summarize(b, rounds, makers)
        log("  " + _line(b, report["sizes"][b]))
    report["crossover"] = {d: _crossover(report, d) for d in bs.drafts}
    report["predicted"] = _predicted(report, prices, target, makers)
    return report


def _interleave(runs: dict[str, Run], repeats: int, warm: bool) -> dict[str, list]:
    """Every side once untimed (``warm``), then ``repeats`` rounds in alternating order."""
    names = list(runs)
    if warm:
        for name in names:
            runs[name]()
    out: dict[str, list] = {name: [] for name in names}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            out[name].append(runs[name]())
    return out


def full_batch_rate(trace: Any) -> float:
    """Tokens/s of a batched run over the iterations in which every row took part."""
    full = [f for f in trace.batch.forwards if len(f.rows) == trace.batch.size]
    ms = sum(sum(f.draft_ms) + f.verify_ms + f.other_ms for f in full)
    return 1000.0 * sum(f.tokens for f in full) / ms if ms > 0 else 0.0


def full_batch_baseline_rate(baseline: Any, size: int) -> float:
    """Tokens/s of the batched baseline over its steps with every row, the first (with the prefill) left out."""
    steps = [ms for ms, rows in zip(baseline.step_ms[1:], baseline.step_rows[1:]) if rows == size]
    return 1000.0 * size * len(steps) / sum(steps) if steps and sum(steps) > 0 else 0.0


def _summarize(b: int, rounds: dict[str, list], makers: dict) -> dict:
    """Per side: the per-round speedups over the same round's baseline (while the batch is full, and the whole
    batch), their interval, identical outputs, and the acceptance and the K chosen."""
    base = rounds["baseline"]
    base_full = [full_batch_baseline_rate(bb, b) for _, bb in base]
    base_whole = [bb.tokens_per_s for _, bb in base]
    base_rows = [r.new_token_ids for r in base[0][0]]
    sides = {}
    for name, traces in rounds.items():
        if name == "baseline":
            continue
        same = all([row.new_token_ids for row in t.rows()] == base_rows for t in traces)
        ratios = [full_batch_rate(t) / tps for t, tps in zip(traces, base_full)]
        whole = [t.batch.stats.tokens_per_s / tps for t, tps in zip(traces, base_whole)]
        iv, iw = rounds_interval(ratios), rounds_interval(whole)
        ks = [f.k for t in traces for f in t.batch.forwards if len(f.rows) == b]
        st = traces[0].batch.stats
        sides[name] = {"identical": same, "ratios": ratios, "speedup": iv.point if (iv and same) else None,
                       "low": iv.low if iv else None, "high": iv.high if iv else None,
                       "whole_batch": iw.point if (iw and same) else None,
                       "mean_k": sum(ks) / len(ks) if ks else 0.0, "acceptance_rate": st.acceptance_rate,
                       "mean_acceptance_length": st.mean_acceptance_length,
                       "accepted_by_position": _by_position(traces)}
    out = {"baseline_tokens_per_s": statistics.median(base_full), "sides": sides, "best": {}}
    for d in makers:
        fixed = {k: sides[f"{d} K={k}"]["speedup"] for k in FIXED_KS}
        ok = {k: v for k, v in fixed.items() if v is not None}
        best_k = max(ok, key=ok.get) if ok else None
        best = max([1.0] + list(ok.values()))                    # K = 0 (the baseline) is ×1
        cost = sides[f"{d} cost"]["speedup"]
        out["best"][d] = {"k": best_k if best_k is not None and ok[best_k] > 1.0 else 0, "speedup": best,
                          "best_drafting": ok.get(best_k) if best_k else None,
                          "cost": cost, "cost_over_best": cost / best if cost else None,
                          "cost_mean_k": sides[f"{d} cost"]["mean_k"],
                          "cost_whole_batch": sides[f"{d} cost"]["whole_batch"]}
    return out


def _by_position(traces: list) -> list[float]:
    """Per draft position j: P(draft j accepted | drafts 1 … j−1 accepted), every row of every run pooled."""
    tested, accepted = {}, {}
    for t in traces:
        for row in t.rows():
            for it in row.iterations:
                for j, dr in enumerate(it.drafts, 1):
                    if dr.tested:
                        tested[j] = tested.get(j, 0) + 1
                        accepted[j] = accepted.get(j, 0) + dr.accepted
    return [accepted[j] / tested[j] for j in sorted(tested)]


def _crossover(report: dict, d: str) -> int | None:
    """The smallest measured B at which every fixed K measured below ×1 (the best K is K = 0: no drafting); None
    when some K still pays at every measured B."""
    for b, entry in report["sizes"].items():
        best = entry["best"][d]["best_drafting"]
        if best is not None and best < 1.0:
            return int(b)
    return None


def _predicted(report: dict, prices: dict, target: torch.nn.Module, makers: dict) -> dict:
    """The crossover the cost model predicts with the acceptance measured at each batch size (the largest K's side:
    every draft position; beyond the sizes measured, the largest size's): here, and on the GPU profiles."""
    from ..policy.batch_cost import crossover, device_batch_prices
    from ..policy.costmodel import AcceptanceProfile
    from ..policy.roofline import model_shape, profiles
    out = {}
    devices = {dev.id: dev for dev in profiles()}
    sizes = sorted(report["sizes"])
    for d, make in makers.items():
        measured = {b: AcceptanceProfile(tuple(min(1.0, max(0.0, a)) for a in
                                               report["sizes"][b]["sides"][f"{d} K={max(FIXED_KS)}"]
                                               ["accepted_by_position"] or [0.0])) for b in sizes}

        def at(b: int) -> AcceptanceProfile:
            return measured[max([s for s in sizes if s <= b] or sizes[:1])]
        drafter = make()
        module = getattr(drafter, "model", None) or getattr(drafter, "draft", None)
        draft_shape = model_shape(module) if module is not None else None
        rows = {"this machine (measured prices)": crossover(prices[d], at, max(FIXED_KS), sizes[-1])}
        for gpu in GPUS:
            dev = devices[gpu]
            for label, device in ((dev.label, dev), (f"{dev.label}, no framework overhead",
                                                     dataclasses.replace(dev, overhead_ms=0.0, overhead_ms_per_layer=0.0))):
                p = device_batch_prices(device, model_shape(target), draft_shape, GPU_SIZES,
                                        range(1, max(FIXED_KS) + 2), prices[d].draft_ms[0])
                rows[label] = crossover(p, at, max(FIXED_KS), GPU_SIZES[-1])
        out[d] = {"acceptance_by_position": {b: list(p.accept) for b, p in measured.items()}, "crossover": rows}
    return out


def _line(b: int, entry: dict) -> str:
    parts = [f"B {b}: baseline {entry['baseline_tokens_per_s']:.1f} tok/s"]
    for d, best in entry["best"].items():
        cost = f"{best['cost']:.2f}x (mean K {best['cost_mean_k']:.1f})" if best["cost"] else "REFUSED"
        parts.append(f"{d}: best fixed K={best['k']} {best['speedup']:.2f}x, cost {cost}")
    return "; ".join(parts)


def render_batch(report: dict) -> str:
    """The section as markdown: per draft, speedup vs B (best fixed K, cost-aware), the crossovers."""
    lines = ["## Batched speculative decoding (`--only batch`)", "",
             "Speedups while the batch is full (× over the batched baseline, 95 % CI); the whole static batch's in the "
             "last column but one.", "",
             "| draft | B | baseline tok/s | best fixed K | its speedup | every fixed K | cost-aware | "
             "mean K | cost ÷ best (≥ 0.95) | cost-aware, whole batch | acceptance: per draft · mean length |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in report["settings"]["drafts"]:
        for b, entry in report["sizes"].items():
            best, sides = entry["best"][d], entry["sides"]
            fixed = " ".join(f"K{k} {_x(sides[f'{d} K={k}'])}" for k in report["fixed_ks"])
            cost = sides[f"{d} cost"]
            ratio = f"{best['cost_over_best']:.3f}" if best["cost_over_best"] else "—"
            whole = f"{cost['whole_batch']:.2f}" if cost["whole_batch"] else "—"
            lines.append(f"| {d} | {b} | {entry['baseline_tokens_per_s']:.1f} | {best['k']} | {best['speedup']:.2f} | "
                         f"{fixed} | {_x(cost)} | {best['cost_mean_k']:.1f} | {ratio} | {whole} | "
                         f"{cost['acceptance_rate']:.2f} · {cost['mean_acceptance_length']:.2f} |")
    lines += ["", "| draft | where speculation stops paying | B |", "|---|---|---|"]
    for d in report["settings"]["drafts"]:
        lines.append(f"| {d} | measured here | {_b(report['crossover'][d])} |")
        for where, b in report["predicted"][d]["crossover"].items():
            lines.append(f"| {d} | predicted: {where} | {_b(b)} |")
    return "\n".join(lines)


def _x(side: dict) -> str:
    if side["speedup"] is None:
        return "refused (outputs differ)" if not side["identical"] else "—"
    return f"{side['speedup']:.2f} [{side['low']:.2f}–{side['high']:.2f}]"


def _b(b: int | None) -> str:
    return "beyond the sizes measured" if b is None else str(b)
