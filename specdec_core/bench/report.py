"""Benchmark report: JSON rows per side, aggregates against the targets, the markdown tables, and the
JSON file. Pure formatting over the measured results (nothing is run here)."""
from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

from .measure import Aggregate, BenchPrompt, Comparison, RunResult, aggregate, summarize
from ..config import RECOMMENDED_CONFIDENCE_STOP

if TYPE_CHECKING:
    from .settings import BenchSettings

TARGETS: tuple[tuple[str, str, str, float], ...] = (
    # (job, label, prompt kind, minimum ratio)
    ("ngram", "ours vs transformers (prompt lookup)", "all", 1.10),
    ("draft[self]", "ours vs transformers (assisted)", "all", 1.05),
    ("draft[early-exit]", "ours vs transformers (assisted)", "all", 1.05),
    ("ngram", "full trace vs minimal trace", "all", 0.95),
    ("draft[self]", "full trace vs minimal trace", "all", 0.95),
    ("draft[early-exit]", "full trace vs minimal trace", "all", 0.95),
    ("ngram", "ours: speedup vs ours target-only", "extractive", 3.5),
    ("default", "ours default vs transformers default (prompt lookup)", "all", 1.10),
    ("default", "ours default vs transformers default (assisted, self)", "all", 1.10),
    ("draft[feature]", "ours default: speedup vs ours target-only", "open-ended", 1.30),
    ("draft[feature]", "ours vs transformers (MTP loop, K = 1 both)", "all", 1.05),
    ("draft[trained]", "ours default: speedup vs ours target-only", "open-ended", 1.30),
    ("draft[trained]", "ours vs transformers (assisted)", "all", 1.05),
    ("draft[trained]", "ours vs transformers (assisted, its default schedule)", "all", 1.05),
    ("draft[trained]", "ours default vs transformers default (assisted)", "all", 1.05),
    ("draft[trained]", "ours K + confidence stop vs transformers default (assisted)", "all", 1.05),
    ("draft[feature]", "ours K + confidence stop: speedup vs ours target-only", "open-ended", 1.30),
)
# the trained drafts' own figures (issue goals): greedy acceptance on open-ended prompts, and c
DRAFT_GOALS = {"acceptance_open_ended": 0.6, "c_max": 0.15}
DRAFT_SETTINGS = (("fixed K", "ours draft[{}]"), ("fixed K + confidence stop", "ours stop draft[{}]"),
                  ("defaults", "ours default draft[{}]"))   # (settings, side name) of a model draft's rows


def side_rows(prompt: BenchPrompt, group: str, prompt_tokens: int, results: dict[str, list[RunResult]]) -> list[dict]:
    """One JSON row per side: the summary plus every measured run."""
    return [{"prompt": prompt.name, "kind": prompt.kind, "group": group, "prompt_tokens": prompt_tokens,
             **asdict(summarize(side, runs)),
             "runs": [{"seconds": r.seconds, "tokens_per_s": r.tokens_per_s, "forward_s": r.forward_s,
                       "cpu_seconds": r.cpu_seconds, "others_cores": r.others_cores,
                       "new_tokens": len(r.tokens), "drafted": r.drafted, "accepted": r.accepted} for r in runs]}
            for side, runs in results.items()]


def make_report(s: BenchSettings, machine: dict, started: str, rows: list[dict],
                comparisons: list[Comparison]) -> dict:
    return {"settings": asdict(s), "machine": machine, "started": started,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "load_average_end": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "command": "python -m specdec_core.bench " + " ".join(sys.argv[1:]),
            "sides": rows, "comparisons": [asdict(c) for c in comparisons],
            "aggregates": [asdict(a) for a in _aggregates(comparisons)]}


def draft_figures(sides: list[dict]) -> list[dict]:
    """Per model-draft pair of the bundled group and prompt kind: acceptance (accepted ÷ drafted, pooled
    over prompts), tokens per iteration, and c = ms per draft forward ÷ ms per target forward of "ours
    target-only" on the same prompt (same run; both means include the prefill), median over prompts."""
    base = {r["prompt"]: r for r in sides if r["group"] == "bundled" and r["name"] == "ours target-only"}
    out = []
    pairs = sorted({r["name"][len("ours draft["):-1] for r in sides
                    if r["group"] == "bundled" and r["name"].startswith("ours draft[") and r["name"].endswith("]")})
    for pair, (settings, name) in itertools.product(pairs, DRAFT_SETTINGS):
        rows = [r for r in sides if r["group"] == "bundled" and r["name"] == name.format(pair)]
        for kind in ("open-ended", "extractive", "all"):
            sel = [r for r in rows if kind == "all" or r["kind"] == kind]
            runs = [run for r in sel for run in r["runs"]]
            drafted = sum(run.get("drafted") or 0 for run in runs)
            if not sel or not drafted:
                continue
            cs = [r["ms_per_forward"]["draft"] / base[r["prompt"]]["ms_per_forward"]["target"] for r in sel
                  if "draft" in r["ms_per_forward"] and r["prompt"] in base
                  and base[r["prompt"]]["ms_per_forward"].get("target")]
            out.append({"pair": pair, "settings": settings, "kind": kind, "prompts": len(sel),
                        "acceptance": sum(run.get("accepted") or 0 for run in runs) / drafted,
                        "tokens_per_iteration": statistics.median(r["tokens_per_iteration"] for r in sel
                                                                  if r["tokens_per_iteration"]),
                        "c": statistics.median(cs) if cs else None})
    return out


def _aggregates(comparisons: list[Comparison]) -> list[Aggregate]:
    goals = {(job, label, kind): v for job, label, kind, v in TARGETS}
    seen: list[tuple[str, str]] = []
    for c in comparisons:
        if (c.job, c.label) not in seen:
            seen.append((c.job, c.label))
    out = []
    for job, label in seen:
        for kind in ("all", "extractive", "open-ended"):
            agg = aggregate(comparisons, job, label, kind, goals.get((job, label, kind)))
            if agg.prompts:
                out.append(agg)
    return out



def _fmt_spread(sp: dict | None, digits: int = 1, suffix: str = "") -> str:
    if not sp:
        return "–"
    return f"{sp['median']:.{digits}f}{suffix} [{sp['min']:.{digits}f}–{sp['max']:.{digits}f}]"


def render_report(report: dict) -> str:
    """The report as markdown: machine, ratios with targets, per-prompt sides, host overhead."""
    m = report["machine"]
    s = report["settings"]
    out = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['torch_threads']} torch threads, "
           f"torch {m['torch']}, transformers {m['transformers']}, Python {m['python']}"
           + (f", GPU {m['cuda']}" if m.get("cuda") else ", no GPU") + ".",
           f"Run: {report['started']} – {report['finished']}; load average at start "
           f"{m.get('load_average')}, at end {report.get('load_average_end')}. {_others_line(report)}",
           _settings_line(s),
           f"Command: `{report['command'].strip()}`"]
    if not s.get("compare", True):
        return "\n".join(out)
    if report.get("ours_default"):
        d = report["ours_default"]
        out.append(f"\"ours default\" = config.recommended_config() (the CLI's defaults): K cap = {d.get('k')}, "
                   f"k_policy = {d.get('k_policy')}, confidence stop = {d.get('confidence_stop', 0.0)} (model drafts), "
                   f"greedy; \"transformers default\" = generate(prompt_lookup_num_tokens=10) or "
                   f"generate(assistant_model=...) with its default schedule.")
    out.append("")
    out += ["Ratios, tokens/s of A over B: geometric mean over prompts of each prompt's median per-round ratio, "
            "[min–max] over all rounds, and the 95 % t interval of the geometric mean over the prompts (each "
            "prompt's ratio from interleaved rounds); reported only where both sides' outputs were token-for-token "
            "identical in every round. Tracing overhead = 1 − (full trace / minimal trace). The last column is the "
            "same ratio by this process's CPU time (tokens per CPU-second), steadier when the machine is shared.", "",
            "| job | A vs B | all prompts | extractive | open-ended | target | met | all, by CPU time |",
            "|---|---|---|---|---|---|---|---|"]
    aggs: dict[tuple[str, str], dict[str, dict]] = {}
    for a in report["aggregates"]:
        aggs.setdefault((a["job"], a["label"]), {})[a["kind"]] = a
    for (job, label), kinds in aggs.items():
        cells = [_fmt_ratio(kinds.get(k)) for k in ("all", "extractive", "open-ended")]
        goal = next((a for a in kinds.values() if a["goal"]), None)
        met = "" if goal is None else {True: "yes", False: "NO", None: "not measured"}[goal["met"]]
        target = "" if goal is None else f"{goal['goal']} ({goal['kind']})"
        cpu = kinds.get("all", {}).get("cpu_ratio")
        out.append(f"| {job} | {label} | {' | '.join(cells)} | {target} | {met} | "
                   f"{'–' if cpu is None else f'{cpu:.2f}x'} |")
    figures = draft_figures(report["sides"])
    if figures:
        out += ["", f"Model drafts (greedy; fixed K = {s['draft_k']}; where run, the same with the recommended confidence "
                f"stop {RECOMMENDED_CONFIDENCE_STOP} and our defaults, config.recommended_config()): acceptance = accepted ÷ "
                f"drafted over all rounds; "
                f"c = ms per draft forward ÷ ms per target forward of ours target-only, same prompt, same run "
                f"(median over prompts). Goals for the trained drafts: acceptance ≥ "
                f"{DRAFT_GOALS['acceptance_open_ended']} on open-ended prompts, c ≤ {DRAFT_GOALS['c_max']}.", "",
                "| draft | settings | prompts | acceptance | tokens/iteration | c |", "|---|---|---|---|---|---|"]
        out += [f"| {f['pair']} | {f['settings']} | {f['kind']} ({f['prompts']}) | {f['acceptance']:.2f} "
                f"| {f['tokens_per_iteration']:.2f} "
                f"| {'–' if f['c'] is None else format(f['c'], '.3f')} |" for f in figures]
    refusals = [c for c in report["comparisons"] if c["refused"]]
    if refusals:
        out += ["", "Refused ratios:"] + [f"- {c['prompt']}: {c['a']} vs {c['b']}: {c['refused']}" for c in refusals]
    out += ["", "Per prompt and side: tokens/s median [min–max]; forwards and ms per forward by model role "
                "(prefill included); host = wall time outside model forwards per new token; other = our "
                "per-iteration other_ms (median per run, then median [min–max] over runs).", "",
            "| prompt | side | tokens/s | new tokens | forwards | ms/forward | tokens/iter | accept | host ms/token "
            "| other ms/iter |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["sides"]:
        fw = ", ".join(f"{k} {v}" for k, v in r["forwards"].items())
        ms = ", ".join(f"{k} {v:.1f}" for k, v in r["ms_per_forward"].items())
        tpi = f"{r['tokens_per_iteration']:.2f}" if r["tokens_per_iteration"] else "–"
        acc = f"{100 * r['acceptance_rate']:.0f} %" if r["acceptance_rate"] is not None else "–"
        out.append(f"| {r['prompt']} | {r['name']} | {_fmt_spread(r['tokens_per_s'])} | {r['new_tokens']} | {fw} | "
                   f"{ms} | {tpi} | {acc} | {_fmt_spread(r['host_ms_per_token'], 2)} | "
                   f"{_fmt_spread(r['other_ms_per_iteration'], 2)} |")
    prompts = {r["prompt"]: (r["kind"], r["prompt_tokens"]) for r in report["sides"]}
    out += ["", "Prompts: " + "; ".join(f"{name} ({kind}, {n} prompt tokens)" for name, (kind, n) in prompts.items())
            + "."]
    if report.get("profile"):
        out += ["", report["profile"]]
    return "\n".join(out)


def _settings_line(s: dict) -> str:
    head = f"Settings: greedy, {s.get('dtype', 'float32')} on {s.get('device', 'cpu')}; "
    if not s.get("compare", True) and not s.get("theory", True):   # the other parts say it all in their own line
        parts = [name for name in ("heldout", "tree", "coupling") if s.get(name)]
        return (f"Settings: {s.get('dtype', 'float32')} on {s.get('device', 'cpu')}; {', '.join(parts) or 'no'} "
                "part only (settings, temperatures included, in its section).")
    if not s.get("compare", True):   # the theory part only: its own settings
        ks = s.get("theory_ks") or [0]
        return (head + f"theory part only: K = {min(ks)}…{max(ks)}, max_new_tokens={s.get('theory_max_new_tokens')}, "
                f"{s.get('theory_repeats')} measured rounds, {s.get('theory_h2h_repeats', 0)} head-to-head rounds, "
                f"drafters: {', '.join(s.get('theory_drafters') or [])}.")
    return (head + f"max_new_tokens={s['max_new_tokens']}, n-gram K={s['ngram_k']}, "
            f"draft K={s['draft_k']} (pairs: {', '.join(s['pairs']) or 'none'}), {s['repeats']} measured rounds "
            f"per prompt after one warm-up round"
            + (f"; early-exit draft = first {s['early_exit_layers']} layers of the bundled model" if "early-exit"
               in s["pairs"] else "") + ".")


def _others_line(report: dict) -> str:
    """How busy other processes kept the machine during the measured runs."""
    busy = [run["others_cores"] for row in report["sides"] for run in row["runs"] if run.get("others_cores") is not None]
    if not busy:
        return "Other processes' CPU use was not measured."
    disturbed = sum(b > 0.25 for b in busy)
    return (f"Other processes kept {statistics.median(busy):.2f} cores busy (median over {len(busy)} measured runs, "
            f"max {max(busy):.2f}); {disturbed} runs shared the machine with more than a quarter core of other work.")


def _fmt_ratio(a: dict | None) -> str:
    if a is None:
        return "–"
    refused = f" ({a['refused']} of {a['prompts']} refused)" if a["refused"] else ""
    if a["ratio"] is None:
        return "REFUSED: outputs differ" + refused
    ci = f", 95 % CI {a['ci'][0]:.2f}–{a['ci'][1]:.2f}" if a.get("ci") else ""
    return f"{a['ratio']:.2f}x [{a['lo']:.2f}–{a['hi']:.2f}{ci}]{refused}"


def write_json(report: dict, path: str) -> None:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
