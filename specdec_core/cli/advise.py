"""Should I speculate here? ``python -m specdec_core.advise --target T --draft D [--prompts FILE] [--tokens N]``
(installed: ``specdec-advise``)

Runs a small sample on this machine — for each prompt, target-only generation and speculative decoding with
the recommended settings back to back (their order alternating from prompt to prompt), until the prompts or
the time budget run out — and prints:

- acceptance, overall and per draft position, with Wilson 95 % intervals;
- the measured speedup with a 95 % interval over the prompts (each prompt one interleaved round) and the
  verdict in plain words;
- the best fixed K by the calibrated cost model (this run's costs and acceptance), next to the K policy used;
- the same runs priced on other hardware (``policy.roofline``).

``--json PATH`` writes the report and every run's trace. Bad names, a draft that does not fit the target, a
device this machine lacks, unreadable files and an output path that cannot be written get one line on stderr
and exit status 2, before any model loads (``validate``). Above ``bench`` and ``cli`` in the layering.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .command import Parser, check_device, check_output, check_pair, load_pair, prog_name
from .. import limits
from ..config import MAX_K, recommended_config
from ..stats.intervals import position_intervals, rounds_interval, speedup_interval, verdict, wilson
from ..trace import Trace

DEFAULT_TOKENS = 64
DEFAULT_PROMPTS = 8
DEFAULT_BUDGET_S = 80.0          # sampling time; loading, warm-up and calibration come on top (well under 2 min)
MIN_PROMPTS = 3                  # the budget never cuts the sample below this many prompts
MAX_PROMPTS = 100
MAX_PROMPTS_FILE_BYTES = 8_000_000   # well above MAX_PROMPTS prompts of limits.MAX_PROMPT_CHARS; /dev/zero is refused


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=prog_name("specdec_core.advise", "specdec-advise"),
                description="Measure a target/draft pair on a small sample here and say whether speculative "
                            "decoding pays, with 95 % intervals, the best K, and the same runs priced on other "
                            "hardware.")
    ap.add_argument("--target", default="bundled", help="'bundled' (default), a hub id or a local folder")
    ap.add_argument("--draft", default="feature",
                    help="'feature' (default), 'trained', 'ngram', 'self', 'bundled', a hub id or a local folder "
                         "(as python -m specdec_core)")
    ap.add_argument("--prompts", metavar="FILE", help="UTF-8 text, one prompt per line (default: held-out chat "
                                                      "prompts the shipped drafts never saw)")
    ap.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help=f"new tokens per run (default {DEFAULT_TOKENS})")
    ap.add_argument("--seed", type=int, default=recommended_config().seed,
                    help=f"the runs' seed (default {recommended_config().seed}; the recommended settings are greedy)")
    ap.add_argument("--max-prompts", type=int, default=DEFAULT_PROMPTS,
                    help=f"prompts at most (default {DEFAULT_PROMPTS})")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                    help=f"seconds of sampling before it stops taking new prompts (default {DEFAULT_BUDGET_S:g}; "
                         f"at least {MIN_PROMPTS} prompts are run)")
    ap.add_argument("--device", default=None, help="cpu, cuda or mps (default: the best available)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads for torch (default 1: for a small model no slower than two on this project's "
                         "2-core machine, and far steadier while other work runs; 0 = torch's default)")
    ap.add_argument("--json", metavar="PATH", help="write the report and the traces as JSON")
    return ap


def read_prompts(path: str | None, n: int) -> list[str]:
    """The prompts: one per non-empty line of ``path`` (UTF-8), else ``n`` held-out chat prompts."""
    if path is None:
        from ..training.prompts import heldout_prompts
        return heldout_prompts(n, seed=23)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PROMPTS_FILE_BYTES + 1)
        if len(data) > MAX_PROMPTS_FILE_BYTES:
            raise ValueError(f"--prompts {path}: is larger than {MAX_PROMPTS_FILE_BYTES / 1e6:g} MB; "
                             "give at most a few prompts, one per line")
        lines = [line.strip() for line in data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    except UnicodeDecodeError as e:
        raise ValueError(f"--prompts {path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise OSError(f"--prompts {path}: cannot read it ({e.strerror or e})") from e
    prompts = [line for line in lines if line]
    if not prompts:
        raise ValueError(f"--prompts {path}: no prompt in it (one prompt per line)")
    for i, prompt in enumerate(prompts):
        try:
            limits.check_prompt(prompt)
        except ValueError as e:
            raise ValueError(f"--prompts {path}: prompt {i + 1}: {e}") from None
    return prompts[:min(n, MAX_PROMPTS)]


def validate(args: argparse.Namespace) -> None:
    """Every check of the command line that needs no model (ValueError); the prompts file is read next."""
    limits.whole("--tokens", args.tokens, 8, limits.MAX_NEW_TOKENS)
    limits.check_seed(args.seed)
    if not 1 <= args.max_prompts <= MAX_PROMPTS:
        raise ValueError(f"--max-prompts must be between 1 and {MAX_PROMPTS}, got {args.max_prompts}")
    if not (math.isfinite(args.budget) and args.budget > 0):
        raise ValueError(f"--budget must be a positive number of seconds, got {args.budget}")
    if not 0 <= args.threads <= 256:
        raise ValueError(f"--threads must be between 0 (torch's default) and 256, got {args.threads}")
    check_pair(args.target, args.draft)
    check_device(args.device)
    check_output(args.json)


class Bar:
    """A one-line progress bar on a text stream (stderr)."""

    def __init__(self, total: int, out: TextIO | None = None, width: int = 30) -> None:
        self.total, self.out, self.width, self.t0 = total, out or sys.stderr, width, time.monotonic()

    def show(self, done: int, what: str) -> None:
        fill = int(self.width * done / max(1, self.total))
        self.out.write(f"\r[{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total} runs "
                       f"{time.monotonic() - self.t0:5.0f} s  {what[:40]:<40}")
        self.out.flush()

    def close(self) -> None:
        self.out.write("\n")
        self.out.flush()


def sample(target: Any, drafter: Any, prompts: Sequence[str], tokens: int, budget_s: float,
           bar: Bar | None = None, seed: int = 0) -> list[Trace]:
    """For each prompt, the speculative run and the baseline back to back (the baseline first on even
    prompts), each trace carrying its baseline; stops taking prompts once ``budget_s`` is spent (not before
    MIN_PROMPTS)."""
    from ..decoding.baseline import baseline_generate, warm_up
    from ..decoding.engine import speculative_generate
    from ..stats.intervals import fill_stats
    from ..models.loading import encode_prompt
    cfg = recommended_config(max_new_tokens=tokens, seed=seed)
    fresh = getattr(drafter, "fresh", None)
    warm_up(*{id(m): m for m in (target.model, getattr(drafter, "model", target.model))}.values())
    t0, traces = time.monotonic(), []
    for i, prompt in enumerate(prompts):
        if i >= MIN_PROMPTS and time.monotonic() - t0 > budget_s:
            break
        ids = encode_prompt(target.tokenizer, prompt)
        if bar:
            bar.show(2 * i, prompt)
        base = baseline_generate(target.model, ids, cfg, target.tokenizer) if i % 2 == 0 else None
        trace = speculative_generate(target.model, fresh() if fresh else drafter, ids, cfg, target.tokenizer,
                                     prompt=prompt, meta={"target": target.label})
        if bar:
            bar.show(2 * i + 1, prompt)
        trace.baseline = base or baseline_generate(target.model, ids, cfg, target.tokenizer)
        traces.append(fill_stats(trace))
    if bar:
        bar.show(2 * len(traces), "done")
        bar.close()
    return traces


# --- the report -------------------------------------------------------------------------------------------

def pooled_positions(traces: Sequence[Trace]) -> list[dict]:
    """Per draft position over all runs: tested, accepted, rate and its Wilson interval."""
    per_run = [position_intervals(t) for t in traces]
    out = []
    for j in range(max(map(len, per_run), default=0)):
        rows = [r[j] for r in per_run if len(r) > j]
        tested, acc = sum(r[0] for r in rows), sum(r[1] for r in rows)
        if tested:
            out.append({"position": j + 1, "tested": tested, "accepted": acc, "rate": acc / tested,
                        "ci": list(wilson(acc, tested))})
    return out


def best_fixed_k(traces: Sequence[Trace], k_max: int = MAX_K) -> dict:
    """The best fixed K by the calibrated cost model (the runs' costs and per-position acceptance)."""
    from ..policy.costmodel import acceptance_profile, costs_from_traces, predicted_speedup
    cal = next((t.calibration["verify_ms"] for t in traces if t.calibration), None)
    costs = costs_from_traces(traces, cal, k_max + 1)
    prof = acceptance_profile(traces)
    n = max(1, round(sum(t.stats.new_tokens for t in traces) / len(traces)))
    curve = [predicted_speedup(costs, prof, k, n) for k in range(1, k_max + 1)]
    best = max(range(len(curve)), key=lambda i: (round(curve[i], 9), -i))
    return {"k": best + 1, "predicted_speedup": curve[best], "curve": curve}


def what_if_table(traces: Sequence[Trace], gpu: str = "") -> list[dict]:
    """Every device's predicted speedup: the geometric mean over the runs of each run priced there (this
    device first, priced with its own measured costs)."""
    from ..policy.costmodel import costs_from_traces
    from ..policy.roofline import here_id, what_if
    here = here_id(str(traces[0].config.get("device", "cpu")), gpu)
    per_run = [what_if(t, here=here, measured_costs=costs_from_traces([t], (t.calibration or {}).get("verify_ms")))
               for t in traces]
    table = []
    for col in zip(*per_run):
        vals = [r.speedup for r in col]
        s = math.exp(sum(math.log(v) for v in vals) / len(vals)) if all(v and v > 0 for v in vals) else None
        r = col[0]
        table.append({"device": r.device, "label": r.label, "measured": r.measured, "predicted_speedup": s,
                      "target_forward_ms": r.t1_ms, "draft_ms": r.draft_ms, "note": r.note})
    return table


def make_report(traces: Sequence[Trace], target: str, draft: str, gpu: str = "") -> dict:
    drafted = sum(t.stats.drafted for t in traces)
    accepted = sum(t.stats.accepted for t in traces)
    speedups = [t.stats.tokens_per_s / t.baseline.tokens_per_s for t in traces
                if t.baseline is not None and t.baseline.tokens_per_s > 0]
    iv = rounds_interval(speedups)
    if iv is None and len(traces) == 1:          # one prompt: its bootstrap over iterations
        iv = speedup_interval(traces[0])
    c = traces[0].config
    ks = [it.k for t in traces for it in t.iterations]
    return {
        "target": target, "draft": draft, "device": c.get("device"), "dtype": c.get("dtype"),
        "prompts": len(traces), "new_tokens": sum(t.stats.new_tokens for t in traces),
        "acceptance": {"accepted": accepted, "drafted": drafted, "rate": accepted / drafted if drafted else 0.0,
                       "ci": list(wilson(accepted, drafted))},
        "positions": pooled_positions(traces),
        "speedup": None if iv is None else {"point": iv.point, "ci": iv.to_list(), "method": iv.method,
                                             "per_prompt": speedups},
        "verdict": verdict(iv),
        "policy": {"k_policy": c.get("k_policy"), "k_cap": c.get("k"), "mean_k": sum(ks) / len(ks) if ks else 0.0},
        "best_fixed_k": best_fixed_k(traces),
        "what_if": what_if_table(traces, gpu),
    }


def report_lines(r: dict) -> list[str]:
    a = r["acceptance"]
    lines = [f"pair: draft {r['draft']} -> target {r['target']} on {r['device']} ({r['dtype']}, {r['threads']} CPU "
             f"thread{'s' if r['threads'] != 1 else ''}); {r['prompts']} prompts, {r['new_tokens']} new tokens",
             f"acceptance: {a['accepted']}/{a['drafted']} drafts = {100 * a['rate']:.1f} % "
             f"(95 % CI {100 * a['ci'][0]:.1f}–{100 * a['ci'][1]:.1f} %, Wilson)"]
    for p in r["positions"]:
        lines.append(f"  position {p['position']}: {p['accepted']}/{p['tested']} = {100 * p['rate']:.0f} % "
                     f"(95 % CI {100 * p['ci'][0]:.0f}–{100 * p['ci'][1]:.0f} %)")
    lines.append(f"verdict: {r['verdict']}")
    pol, best = r["policy"], r["best_fixed_k"]
    lines.append(f"K: the {pol['k_policy']} policy (cap {pol['k_cap']}) drafted K = {pol['mean_k']:.1f} on average; "
                 f"the best fixed K by the calibrated model is {best['k']} "
                 f"(predicted ×{best['predicted_speedup']:.2f})")
    lines.append("the same runs on other hardware (roofline what-if; docs/cost-model.md):")
    width = max(len(w["label"]) for w in r["what_if"])
    for w in r["what_if"]:
        s = "–" if w["predicted_speedup"] is None else f"×{w['predicted_speedup']:.2f}"
        basis = "measured costs" if w["measured"] else "datasheet roofline"
        lines.append(f"  {w['label']:<{width}}  {s:>6}  ({basis}{'; ' + w['note'] if w['note'] else ''})")
    return lines


def check_contexts(target: Any, prompts: Sequence[str], tokens: int, path: str | None) -> None:
    """Refuse, before sampling, a prompt that with ``tokens`` new tokens does not fit the target's context."""
    from ..models.loading import encode_prompt
    context = limits.context_length(target.model)
    for i, prompt in enumerate(prompts):
        try:
            limits.check_context(len(encode_prompt(target.tokenizer, prompt)), tokens, context)
        except ValueError as e:
            raise ValueError(f"--prompts {path}: prompt {i + 1}: {e}" if path else str(e)) from None


def run(args: argparse.Namespace) -> int:
    import torch
    from ..policy.roofline import gpu_name
    validate(args)
    prompts = read_prompts(args.prompts, args.max_prompts)   # a bad file fails before any model loads
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.monotonic()
    target, drafter = load_pair(args.target, args.draft, args.device)
    check_contexts(target, prompts, args.tokens, args.prompts)
    bar = Bar(2 * len(prompts))
    traces = sample(target, drafter, prompts, args.tokens, args.budget, bar, args.seed)
    report = make_report(traces, target.label, args.draft, gpu_name())
    report["threads"] = torch.get_num_threads()
    report["seconds"] = time.monotonic() - t0
    print("\n".join(report_lines(report)))
    print(f"({report['seconds']:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"report": report, "traces": [t.to_dict() for t in traces]}, f)
        print(f"report and traces written to {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
