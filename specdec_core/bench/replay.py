"""Prompt lookup's K policies replayed on recorded answers: decisions compared free of timing noise.

    python -m specdec_core.bench.replay                     # bench prompts + 20 held-out + 10 copy tasks
    python -m specdec_core.bench.replay --heldout 40 --seed 3 --json replay.json
    python -m specdec_core.bench.replay --answers answers.json --verify-ms 56.8,57.5,65,64,86,98.6,115.6,115.1,129.7

A greedy run emits the baseline's tokens whatever its K policy, and prompt lookup's drafts follow from the
text alone, so one greedy answer per prompt is enough to re-enact every policy on it
(``hindsight.replay_policy``) and price its decisions with one cost model, in milliseconds of compute rather
than minutes of machine time, and without the run-to-run noise of a shared CPU. The answers are the bundled
model's, greedy: the bench prompts, held-out open-ended prompts (``training.prompts.heldout_prompts``) and copy
tasks that ask it to repeat one of its own held-out answers word for word (``--answers PATH`` keeps them
for the next call). The costs are this machine's: the target's verify curve (``calibration``, or one given
with ``--verify-ms``: the curve of a quiet day, or a GPU's) and the lookup and per-iteration overhead read
off one real run. The cost-aware policy decides with the same curve that prices it: what is compared is
its decisions, not the calibration's error (``docs/cost-model.md`` has both).

Printed per group (geometric means over its prompts): the cost-aware policy against fixed K = 1, against each
prompt's best fixed K (worst prompt) and against the +2/-1 heuristic, and the best schedule in hindsight
(``hindsight.best_schedule``, which no policy can beat) against K = 1 and the heuristic. A policy change is
tried here first, then measured with ``bench --only theory``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .measure import geomean
from ..policy.costmodel import Costs

GROUPS = ("bench extractive", "bench open-ended", "held-out open-ended", "copy own answer")
COPY_ASK = "Repeat the following text exactly, word for word:\n\n"


@dataclass
class Answer:
    name: str
    group: str
    prompt_ids: list[int]
    output_ids: list[int]
    max_new_tokens: int


def record(prompts: Sequence[tuple[str, str, str]], max_new_tokens: int, model: Any, tokenizer: Any,
           progress: Callable[[str], None] = lambda s: None) -> list[Answer]:
    """The bundled model's greedy answer to each (name, group, text), as the engine's baseline decodes it."""
    from ..config import SpecConfig
    from ..decoding.baseline import baseline_generate
    from ..models.loading import encode_prompt
    cfg = SpecConfig(max_new_tokens=max_new_tokens, full_trace=False)
    out = []
    for name, group, text in prompts:
        ids = encode_prompt(tokenizer, text, chat=True)
        res = baseline_generate(model, ids, cfg, tokenizer)
        out.append(Answer(name, group, ids, list(res.new_token_ids), max_new_tokens))
        progress(f"recorded {name} ({len(res.new_token_ids)} tokens)")
    return out


def compare(answers: Sequence[Answer], costs: Costs, k_max: int, eos_token_id: int | None,
            make_cost: Callable[[], Any]) -> list[dict]:
    """Per answer: priced ms of the cost-aware policy (``make_cost()``, a fresh one per answer), the heuristic,
    every fixed K = 1..k_max and the best schedule in hindsight. An empty answer (the end-of-sequence token
    first) has nothing to replay and is left out."""
    from ..drafters.ngram import NGramDrafter
    from ..policy.hindsight import best_schedule, outcomes, replay_policy
    from ..policy.kpolicy import FixedK, HeuristicK
    rows = []
    for a in (a for a in answers if a.output_ids):
        def priced(policy: Any) -> float:
            return replay_policy(policy, a.prompt_ids, a.output_ids, costs, eos_token_id, a.max_new_tokens)[0]
        fixed = {k: priced(FixedK(k)) for k in range(1, k_max + 1)}
        best, _ = best_schedule(outcomes(NGramDrafter(), a.prompt_ids, a.output_ids, k_max, eos_token_id,
                                          a.max_new_tokens), costs)
        rows.append({"name": a.name, "group": a.group, "tokens": len(a.output_ids), "cost": priced(make_cost()),
                     "heuristic": priced(HeuristicK(k_max)), "fixed": fixed, "hindsight": best})
    return rows


def summarize(rows: Sequence[dict]) -> list[dict]:
    """Per group, speed ratios (the ratio of priced times, inverted): geometric means, and the worst prompt
    of cost ÷ its best fixed K."""
    out = []
    for group in [g for g in GROUPS if any(r["group"] == g for r in rows)]:
        rs = [r for r in rows if r["group"] == group]

        def gm(f: Callable[[dict], float]) -> float:
            return geomean([f(r) for r in rs])
        out.append({"group": group, "prompts": len(rs),
                    "cost_vs_k1": gm(lambda r: r["fixed"][1] / r["cost"]),
                    "cost_vs_best_fixed_worst": min(min(r["fixed"].values()) / r["cost"] for r in rs),
                    "cost_vs_heuristic": gm(lambda r: r["heuristic"] / r["cost"]),
                    "hindsight_vs_k1": gm(lambda r: r["fixed"][1] / r["hindsight"]),
                    "hindsight_vs_heuristic": gm(lambda r: r["heuristic"] / r["hindsight"])})
    return out


def format_table(summary: Sequence[dict]) -> str:
    head = ("| group | prompts | cost ÷ K = 1 | cost ÷ best fixed K, worst prompt | cost ÷ heuristic | "
            "hindsight ÷ K = 1 | hindsight ÷ heuristic |")
    lines = [head, "|---" * 7 + "|"]
    for s in summary:
        lines.append(f"| {s['group']} | {s['prompts']} | {s['cost_vs_k1']:.3f} | {s['cost_vs_best_fixed_worst']:.3f} "
                     f"| {s['cost_vs_heuristic']:.3f} | {s['hindsight_vs_k1']:.3f} | {s['hindsight_vs_heuristic']:.3f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench.replay", description=__doc__.split("\n")[0])
    ap.add_argument("--heldout", type=int, default=20, help="held-out open-ended prompts (default 20)")
    ap.add_argument("--copies", type=int, default=10,
                    help="copy tasks, each repeating one of the held-out answers (default 10, at most --heldout)")
    ap.add_argument("--seed", type=int, default=7, help="which held-out prompts (default 7)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="default 64 (as recommended_config())")
    ap.add_argument("--k-max", type=int, default=8, help="the policies' cap and the largest fixed K (default 8)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--verify-ms", default=None,
                    help="a verify curve to price with, ms for 1, 2, … tokens fed, comma-separated (default: calibrated "
                         "now; extrapolated past its last point)")
    ap.add_argument("--answers", default=None,
                    help="a JSON file of recorded answers: read if it exists (the prompt settings are then its own), "
                         "else written after recording")
    ap.add_argument("--json", default=None, help="also write the per-prompt figures here")
    return ap


def record_all(model: Any, tokenizer: Any, heldout: int, copies: int, seed: int, max_new_tokens: int,
               progress: Callable[[str], None] = lambda s: None) -> list[Answer]:
    """The bench prompts, ``heldout`` held-out prompts and ``copies`` copy tasks, answered."""
    from .prompts import PROMPTS
    from ..training.prompts import heldout_prompts
    prompts = [(p.name, f"bench {p.kind}", p.text) for p in PROMPTS]
    prompts += [(f"held-out {i}", "held-out open-ended", t) for i, t in enumerate(heldout_prompts(heldout, seed))]
    answers = record(prompts, max_new_tokens, model, tokenizer, progress)
    to_copy = [a for a in answers if a.group == "held-out open-ended"][:copies]
    return answers + record([(f"copy of {a.name}", "copy own answer",
                              COPY_ASK + tokenizer.decode(a.output_ids, skip_special_tokens=True)) for a in to_copy],
                            max_new_tokens, model, tokenizer, progress)


def replay_report(model: Any, tokenizer: Any, answers: Sequence[Answer], k_max: int,
                  verify_ms: Sequence[float] | None = None,
                  progress: Callable[[str], None] = lambda s: None) -> tuple[Costs, list[dict]]:
    """Time this machine's costs (``verify_ms``, if given, replaces the calibrated verify curve) and
    ``compare`` the policies on every answer: (costs, per-answer rows)."""
    from dataclasses import replace

    from ..policy import calibration
    from ..config import SpecConfig
    from ..drafters.ngram import NGramDrafter
    from ..decoding.engine import speculative_generate
    from ..policy.kpolicy import CostAwareK
    from ..policy.costmodel import costs_from_traces

    curve = calibration.calibrate(model, k_max + 1)
    run = speculative_generate(model, NGramDrafter(), answers[0].prompt_ids,
                               SpecConfig(k=k_max, max_new_tokens=answers[0].max_new_tokens, full_trace=False,
                                          k_policy="cost"), tokenizer)
    costs = costs_from_traces([run], curve.verify_ms)
    if verify_ms:
        costs = replace(costs, verify_ms=tuple(verify_ms))
    progress(f"verify curve (ms, 1..{k_max + 1} tokens fed): " + ", ".join(f"{v:.1f}" for v in costs.verify_ms)
             + f"; lookup {costs.draft_ms:.3f} ms, overhead {costs.overhead_ms:.2f} ms per iteration")
    rows = compare(answers, costs, k_max, tokenizer.eos_token_id,
                   lambda: CostAwareK(k_max, costs.verify_ms, costs.draft_ms, False, overhead_ms=costs.overhead_ms))
    return costs, rows


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name, v, lo, hi in (("--heldout", args.heldout, 0, 200), ("--copies", args.copies, 0, args.heldout),
                            ("--max-new-tokens", args.max_new_tokens, 2, 512), ("--k-max", args.k_max, 1, 16)):
        if not lo <= v <= hi:
            print(f"error: {name} must be between {lo} and {hi}, got {v}", file=sys.stderr)
            return 2
    try:
        verify = [float(x) for x in args.verify_ms.split(",")] if args.verify_ms else None
        if verify is not None and not all(0 < v < 1e6 for v in verify):
            raise ValueError
    except ValueError:
        print(f"error: --verify-ms must be positive milliseconds separated by commas, got {args.verify_ms!r}",
              file=sys.stderr)
        return 2
    answers = None
    if args.answers and os.path.exists(args.answers):
        try:
            with open(args.answers) as f:
                answers = [Answer(**a) for a in json.load(f)]
            if not answers:
                raise ValueError("no answers")
        except (OSError, ValueError, TypeError) as e:
            print(f"error: cannot read recorded answers from {args.answers}: {e}", file=sys.stderr)
            return 2
    import torch

    from ..models.loading import load_bundled_model
    if args.threads:
        torch.set_num_threads(args.threads)

    def say(s: str) -> None:
        print(s, file=sys.stderr, flush=True)
    model, tok = load_bundled_model()
    if answers is None:
        answers = record_all(model, tok, args.heldout, args.copies, args.seed, args.max_new_tokens, say)
        if args.answers:
            with open(args.answers, "w") as f:
                json.dump([asdict(a) for a in answers], f)
    costs, rows = replay_report(model, tok, answers, args.k_max, verify, say)
    summary = summarize(rows)
    print(format_table(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"costs": {"verify_ms": list(costs.verify_ms), "draft_ms": costs.draft_ms,
                                 "overhead_ms": costs.overhead_ms}, "summary": summary, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
