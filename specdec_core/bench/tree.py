"""Token trees against chains: the same draft on held-out prompts, greedy and at temperature 0.7.

    python -m specdec_core.bench --only tree                         # 4 prompts, 48 new tokens, 2 rounds
    python -m specdec_core.bench --only tree --tree-prompts 2 --tree-drafts feature,ngram

For each held-out prompt (``training.prompts.heldout_prompts``, the held-out section's draw) and temperature,
our target-only baseline and, per draft, four settings run interleaved (``measure.interleave``):
- a chain of ``FIXED_DEPTH`` drafts and a tree of ``nodes`` nodes (``top_k`` children per node at most) as deep,
  both fixed: what a tree adds in tokens per iteration, and what it costs;
- our defaults (``config.recommended_config()``: the cost-aware policy, cap 10, the confidence stop) as a chain,
  and the same with trees allowed (``tree_nodes``): the policy then takes a tree only where it predicts one pays;
- at T > 0, for a model draft, the fixed tree again with independent siblings (i.i.d. draws from q, verified by
  recursive rejection) instead of distinct top-k ones (verified by the target draw).

Greedy outputs must equal the baseline's token for token (a ratio is refused otherwise); sampled outputs differ
by design (their exactness is the chi-square tests'), so their ratios are taken as they come. Per side: tokens per
iteration, the verify's ms and tokens fed per iteration, the share of tree iterations, the measured speedup over
the baseline (geometric mean over prompts of each prompt's median per-round ratio [min–max]) and what the
calibrated cost model predicts for the same runs (``costmodel.predict_speedup``: each run's own costs, its
trees priced as trees) with this machine's verify and with a flat, GPU-like one.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .heldout import check_sample
from .measure import BenchPrompt, Spread, compare, geomean, interleave, ours_baseline, ours_speculative
from ..config import SpecConfig, recommended_config

TREE_DRAFTS = ("feature", "trained", "ngram")
FIXED_DEPTH = 4          # the fixed chain's K and the fixed tree's depth cap
TREE_GAIN_GOAL = 1.0     # the feature draft's fixed tree: more tokens per iteration than its chain (ratio > this)
SLOWER_AT_MOST = 0.03    # with the cost-aware policy, trees allowed are at most this much slower than the chain
BASELINE = "target-only"


@dataclass(frozen=True)
class TreeSettings:
    prompts: int = 4
    seed: int = 23                         # the held-out section's draw
    max_new_tokens: int = 48
    repeats: int = 2
    drafts: tuple[str, ...] = ("feature", "trained")
    nodes: int = 16
    top_k: int = 4
    temperatures: tuple[float, ...] = (0.0, 0.7)


def validate_tree(ts: TreeSettings) -> None:
    """Refuse bad settings before anything is loaded."""
    check_sample("tree", ts.prompts, ts.repeats, ts.drafts, TREE_DRAFTS)
    if ts.nodes < 2:
        raise ValueError(f"a tree needs at least 2 nodes, got {ts.nodes}")
    for t in ts.temperatures:
        SpecConfig(max_new_tokens=ts.max_new_tokens, temperature=t, tree_nodes=ts.nodes, tree_top_k=ts.top_k,
                   k=FIXED_DEPTH)


def setting_configs(ts: TreeSettings, temperature: float) -> dict[str, SpecConfig]:
    """The settings every draft runs with at one temperature, by label."""
    n, t = ts.max_new_tokens, temperature
    tree = dict(tree_nodes=ts.nodes, tree_top_k=ts.top_k)
    return {f"chain, fixed K = {FIXED_DEPTH}": SpecConfig(k=FIXED_DEPTH, k_policy="fixed", temperature=t,
                                                          max_new_tokens=n),
            f"tree of {ts.nodes}, fixed depth {FIXED_DEPTH}": SpecConfig(k=FIXED_DEPTH, k_policy="fixed", temperature=t,
                                                                      max_new_tokens=n, **tree),
            "chain, defaults": recommended_config(temperature=t, max_new_tokens=n, tree_nodes=0),
            f"tree of <= {ts.nodes}, defaults": recommended_config(temperature=t, max_new_tokens=n, **tree)}


INDEPENDENT = "independent siblings"   # the label suffix of the fixed tree drafted with i.i.d. siblings


def run_tree_bench(target: torch.nn.Module, tokenizer: Any, ts: TreeSettings,
                   log: Callable[[str], None] = print) -> dict:
    """Measure every (draft, temperature, setting) side against the baseline on ``ts.prompts`` held-out prompts."""
    from ..drafters.ngram import NGramDrafter
    from ..drafters.registry import shipped_draft_for
    from ..models.loading import encode_prompt
    from ..training.prompts import heldout_prompts
    models = {key: shipped_draft_for(key, target) for key in ts.drafts if key != "ngram"}
    texts = heldout_prompts(ts.prompts, seed=ts.seed)
    per_side: dict[str, dict] = {}
    for i, text in enumerate(texts, 1):
        prompt = BenchPrompt(f"heldout-{i}", "open-ended", text)
        ids = encode_prompt(tokenizer, text, chat=True)
        for t in ts.temperatures:
            kept: dict[str, list] = {BASELINE: []}
            runners = {BASELINE: ours_baseline(target, ids, SpecConfig(max_new_tokens=ts.max_new_tokens,
                                                                       temperature=t), tokenizer, kept[BASELINE])}
            for key in ts.drafts:
                draft = models.get(key)
                meter = {"target": target} if draft is None else {"target": target, "draft": draft}
                configs = setting_configs(ts, t)
                fixed_tree = list(configs)[1]
                if t > 0 and draft is not None:
                    configs[f"{fixed_tree}, {INDEPENDENT}"] = configs[fixed_tree]
                for label, cfg in configs.items():
                    side = f"{key} T {t:g}: {label}"
                    kept[side] = []
                    make = NGramDrafter if draft is None else _maker(draft, label.endswith(INDEPENDENT))
                    runners[side] = ours_speculative(target, make, ids, cfg, tokenizer, meter, kept[side])
            results = interleave(runners, ts.repeats, warmup=i == 1 and t == ts.temperatures[0])
            for side in runners:
                del kept[side][:len(kept[side]) - ts.repeats]          # the warm-up run is not measured
            notes = []
            for side in (s for s in runners if s != BASELINE):
                entry = per_side.setdefault(side, {"prompts": [], "runs": []})
                ratio = _ratio(side, prompt, results, exact=t == 0)
                entry["prompts"].append(ratio)
                for trace, base in zip(kept[side], kept[BASELINE]):
                    entry["runs"].append(_run_figures(trace, base))
                notes.append(f"{side} {ratio['median']:.2f}x" if ratio["median"] else f"{side} REFUSED")
            log(f"  heldout-{i}/{len(texts)} T {t:g}: " + "; ".join(notes))
    _price(per_side)
    rows = [_row(side, entry) for side, entry in per_side.items()]
    return {"settings": vars(ts) | {"drafts": list(ts.drafts), "temperatures": list(ts.temperatures),
                                    "fixed_depth": FIXED_DEPTH},
            "prompts": texts, "rows": rows, "goals": _goals(rows, ts)}


def _maker(draft: torch.nn.Module, independent: bool) -> Callable[[], Any]:
    from ..drafters.model import model_drafter

    def make() -> Any:
        drafter = model_drafter(draft)
        if independent:
            drafter.tree_siblings = "independent"
        return drafter
    return make


def _ratio(side: str, prompt: BenchPrompt, results: dict, exact: bool) -> dict:
    """The side's median per-round tokens/s ratio to the baseline on one prompt (greedy: refused unless the outputs
    are the same)."""
    if exact:
        c = compare("tree", side, side, BASELINE, prompt, results)
        if c.ratio is None:
            return {"median": None, "min": None, "max": None, "refused": f"{prompt.name}: {c.refused}"}
        return {"median": c.ratio.median, "min": c.ratio.min, "max": c.ratio.max, "refused": None}
    r = Spread.of([a.tokens_per_s / b.tokens_per_s for a, b in zip(results[side], results[BASELINE])])
    return {"median": r.median, "min": r.min, "max": r.max, "refused": None}


def _run_figures(trace: Any, baseline: Any) -> dict:
    """One run's counts and the cost model's predictions for it (its same-round baseline attached)."""
    from ..policy.costmodel import fed_tokens, predict_speedup
    trace.baseline = baseline
    its = trace.iterations
    return {"tokens": trace.stats.new_tokens, "iterations": len(its), "drafted": trace.stats.drafted,
            "accepted": trace.stats.accepted, "trees": sum(it.tree is not None for it in its),
            "verify_ms": sum(it.verify_ms for it in its), "fed": sum(fed_tokens(it) for it in its),
            "predicted": predict_speedup(trace), "predicted_flat": predict_speedup(trace, flat=True),
            "plan": [(fed_tokens(it), len(it.draft_ms)) for it in its],
            "draft_ms": [ms for it in its for ms in it.draft_ms],
            "curve": (trace.calibration or {}).get("verify_ms"), "model_draft": trace.stats.draft_forwards > 0}


def _price(per_side: dict[str, dict]) -> None:
    """Each run's decisions priced alike, free of the machine's load: its verifies at the calibrated curve (the
    longest any run of the process carries), its draft forwards at the median forward of every run of that draft,
    against the baseline's tokens at the curve's one-token forward (prefill and overhead left out). Sets each
    run's ``priced`` speedup."""
    from ..policy.costmodel import Costs
    runs = [r for e in per_side.values() for r in e["runs"]]
    curve = max((r["curve"] for r in runs if r["curve"]), key=len, default=None)
    if not curve:
        return
    for side, entry in per_side.items():
        draft = side.split(" T ")[0]
        forwards = [ms for s, e in per_side.items() if s.split(" T ")[0] == draft
                    for r in e["runs"] for ms in r["draft_ms"]]
        draft_ms = statistics.median(forwards) if forwards else 0.0
        for r in entry["runs"]:
            costs = Costs(tuple(curve), draft_ms, r["model_draft"])
            ms = sum(costs.t_verify(fed) + costs.draft_cost(n, n) if n else costs.t_verify(fed) for fed, n in r["plan"])
            r["priced"] = r["tokens"] * costs.t1 / ms if ms > 0 else None


def _row(side: str, entry: dict) -> dict:
    ok = [r for r in entry["prompts"] if r["median"] is not None]
    runs = entry["runs"]
    iters = sum(r["iterations"] for r in runs) or 1
    pred = [r["predicted"] for r in runs if r["predicted"]]
    priced = [r["priced"] for r in runs if r.get("priced")]
    flat = [r["predicted_flat"] for r in runs if r["predicted_flat"]]
    return {"side": side, "speedup": geomean([r["median"] for r in ok]) if ok else None,
            "lo": min((r["min"] for r in ok), default=None), "hi": max((r["max"] for r in ok), default=None),
            "prompts": len(entry["prompts"]), "refused": [r["refused"] for r in entry["prompts"] if r["refused"]],
            "tokens_per_iteration": sum(r["tokens"] for r in runs) / iters,
            "verify_ms_per_iteration": sum(r["verify_ms"] for r in runs) / iters,
            "fed_per_iteration": sum(r["fed"] for r in runs) / iters,
            "tree_share": sum(r["trees"] for r in runs) / iters,
            "acceptance": (sum(r["accepted"] for r in runs) / d) if (d := sum(r["drafted"] for r in runs)) else None,
            "predicted": statistics.median(pred) if pred else None,
            "predicted_flat": statistics.median(flat) if flat else None,
            "priced": statistics.median(priced) if priced else None}


def _goals(rows: list[dict], ts: TreeSettings) -> list[dict]:
    """Per draft and temperature: the fixed tree's tokens per iteration over the fixed chain's (the feature
    draft's goal: more), and the cost-aware run with trees allowed over the chain's speed (goal: at most
    ``SLOWER_AT_MOST`` slower)."""
    by = {r["side"]: r for r in rows}
    out = []
    for key in ts.drafts:
        for t in ts.temperatures:
            names = [f"{key} T {t:g}: {label}" for label in setting_configs(ts, t)]
            chain, tree, chain_d, tree_d = (by.get(n) for n in names)
            if not all((chain, tree, chain_d, tree_d)):
                continue
            gain = tree["tokens_per_iteration"] / chain["tokens_per_iteration"]
            speed = (tree_d["speedup"] / chain_d["speedup"]) if tree_d["speedup"] and chain_d["speedup"] else None
            priced = (tree_d["priced"] / chain_d["priced"]) if tree_d["priced"] and chain_d["priced"] else None
            out.append({"draft": key, "temperature": t, "tokens_gain": gain,
                        "tokens_goal": f"> {TREE_GAIN_GOAL:g}" if key == "feature" else "",
                        "tokens_met": gain > TREE_GAIN_GOAL if key == "feature" else None,
                        "defaults_ratio": speed, "speed_goal": f">= {1 - SLOWER_AT_MOST:.2f}",
                        "speed_met": None if speed is None else speed >= 1 - SLOWER_AT_MOST, "priced_ratio": priced,
                        "tree_share_defaults": tree_d["tree_share"]})
    return out


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def render_tree(section: dict) -> str:
    s = section["settings"]
    out = [f"Token trees against chains ({s['prompts']} held-out prompts from `heldout_prompts(n, seed={s['seed']})`, "
           f"{s['max_new_tokens']} new tokens, {s['repeats']} interleaved rounds; trees of up to {s['nodes']} nodes, "
           f"at most {s['top_k']} children per node; fixed settings {s['fixed_depth']} deep): speedup over our "
           "target-only baseline at the same temperature (geometric mean over prompts of the median per-round "
           "ratio [min–max over rounds]); priced: the runs' decisions priced alike, free of the machine's load "
           "(verifies at the calibrated curve, draft forwards at the draft's median forward, against the "
           "baseline's tokens at a one-token forward; prefill and overhead left out); per iteration: tokens "
           "emitted, the verify's ms and tokens fed; the share of iterations that verified a tree; the cost "
           "model's prediction for the same runs with this machine's verify and with a flat (GPU-like) one.", "",
           "| draft, T: setting | speedup | priced | predicted | flat verify | tokens/iteration | verify ms | fed "
           "| trees |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in section["rows"]:
        speed = "refused" if r["speedup"] is None else f"{r['speedup']:.2f}x [{r['lo']:.2f}–{r['hi']:.2f}]"
        out.append(f"| {r['side']} | {speed} | {_x(r.get('priced'))} | {_x(r['predicted'])} | "
                   f"{_x(r['predicted_flat'])} | "
                   f"{r['tokens_per_iteration']:.2f} | {r['verify_ms_per_iteration']:.1f} | "
                   f"{r['fed_per_iteration']:.1f} | {100 * r['tree_share']:.0f} % |")
    verdict = {True: "yes", False: "NO", None: ""}
    out += ["", "| draft, T | fixed tree ÷ chain, tokens/iteration | goal | met | defaults with trees ÷ without, "
                "speed | goal | met | the same, priced | tree iterations (defaults) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for g in section["goals"]:
        out.append(f"| {g['draft']}, T {g['temperature']:g} | {g['tokens_gain']:.2f} | {g['tokens_goal']} | "
                   f"{verdict[g['tokens_met']]} | {_x(g['defaults_ratio'])} | {g['speed_goal']} | "
                   f"{verdict[g['speed_met']]} | {_x(g.get('priced_ratio'))} | "
                   f"{100 * g['tree_share_defaults']:.0f} % |")
    refused = [x for r in section["rows"] for x in r["refused"]]
    if refused:
        out += ["", "Refused (output differs from the baseline):"] + [f"- {x}" for x in refused]
    return "\n".join(out)
