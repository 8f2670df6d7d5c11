"""Coupled sampling's price: acceptance and speed of the standard and the coupled rule, the same draft, held-out
prompts.

    python -m specdec_core.bench --only coupling --threads 1            # 4 prompts, 40 new tokens, 2 rounds
    python -m specdec_core.bench --only coupling --coupling-prompts 2 --quick

For each held-out prompt (``training.prompts.heldout_prompts``, the held-out section's draw), temperature and round
(the round's index is the seed), four runs, in alternating order: our target-only baseline under each sampler and
the feature draft under each sampler, all with a fixed K = ``K`` and no confidence stop (so every rule is offered
the same drafts, whatever the cost-aware policy would make of the machine's load; ``k=0`` in the settings: our
defaults, ``config.recommended_config()``). Per temperature and rule:
- acceptance per tested draft (accepted ÷ tested: the chance a draft the target looked at was accepted), with its
  Wilson 95 % interval (``intervals.wilson``; drafts of one iteration are not independent, so a little narrow);
- at the coupled runs' tested positions, from each position's p and q (the trace's ``tv`` and ``coupled_alpha``):
  the mean of 1 − TV (what the standard rule accepts there on average), of P(y = x | x) (the coupled rule's
  expected acceptance) and of the paper's floor (1 − TV) / (1 + TV); the standard runs' own mean alpha;
- speed: tokens/s over the same sampler's baseline in the same round, the geometric mean over every (prompt,
  round) pair with a t interval (``intervals.rounds_interval``); the coupled runs' outputs must equal the coupled
  baseline's token for token (drafter invariance, counted), the standard runs' differ by design.
The issue's goal: the coupled rule's acceptance at least ``GOAL`` × the standard rule's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .heldout import check_sample
from .measure import RunResult, ours_baseline, ours_speculative
from ..config import SpecConfig, recommended_config
from ..sampling.coupled import coupling_floor
from ..stats.intervals import rounds_interval, wilson
from ..trace import Trace

GOAL = 0.8                      # coupled acceptance >= GOAL x standard acceptance
K = 3                           # drafts per iteration (fixed)
RULES = ("standard", "coupled")


@dataclass(frozen=True)
class CouplingSettings:
    prompts: int = 4
    seed: int = 23                  # the held-out section's draw
    max_new_tokens: int = 40
    repeats: int = 2                # rounds per prompt and temperature; round r runs with seed r
    temperatures: tuple[float, ...] = (0.7, 1.0)
    draft: str = "feature"
    k: int = K                      # fixed K; 0: our defaults (the cost-aware K, cap 10, the confidence stop)


def validate_coupling(cs: CouplingSettings) -> None:
    """Refuse bad settings before anything is loaded."""
    check_sample("coupling", cs.prompts, cs.repeats, (cs.draft,), ("feature", "trained"))
    if not 0 <= cs.k <= 10:
        raise ValueError(f"coupling k must be between 0 (our defaults) and 10, got {cs.k}")
    for t in cs.temperatures:
        if not t > 0:
            raise ValueError(f"coupling temperatures must be above 0 (greedy is the same under both rules), got {t}")
        SpecConfig(max_new_tokens=cs.max_new_tokens, temperature=t)


@dataclass
class _Tally:
    """One (temperature, rule)'s runs: counts, the per-position values and the paired speed ratios."""
    tested: int = 0
    accepted: int = 0
    alpha: list[float] = field(default_factory=list)         # alpha = min(1, p/q) per tested draft
    coupled_alpha: list[float] = field(default_factory=list)  # P(y = x | x) per tested draft (coupled runs)
    tv: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)        # tokens/s over the same round's baseline
    same_as_baseline: int = 0
    runs: int = 0
    tokens: int = 0
    iterations: int = 0

    def add(self, trace: Trace, run: RunResult, base: RunResult) -> None:
        for it in trace.iterations:
            for d in it.drafts:
                if d.tested:
                    self.tested += 1
                    self.accepted += d.accepted
                    self.alpha.append(d.alpha)
                    if d.coupled_alpha is not None:
                        self.coupled_alpha.append(d.coupled_alpha)
                        self.tv.append(d.tv)
        self.ratios.append(run.tokens_per_s / base.tokens_per_s)
        self.same_as_baseline += run.tokens == base.tokens
        self.runs += 1
        self.tokens += len(run.tokens)
        self.iterations += trace.stats.iterations

    def row(self, temperature: float, rule: str) -> dict:
        lo, hi = wilson(self.accepted, self.tested)
        iv = rounds_interval(self.ratios)
        mean = (lambda xs: sum(xs) / len(xs) if xs else None)
        return {"temperature": temperature, "rule": rule, "tested": self.tested, "accepted": self.accepted,
                "acceptance": self.accepted / self.tested if self.tested else None, "acceptance_ci": [lo, hi],
                "mean_alpha": mean(self.alpha), "mean_coupled_alpha": mean(self.coupled_alpha),
                "mean_one_minus_tv": mean([1 - x for x in self.tv]),
                "mean_floor": mean([coupling_floor(x) for x in self.tv]),
                "speedup": iv.point if iv else None, "speedup_ci": iv.to_list() if iv else None,
                "same_as_baseline": self.same_as_baseline, "runs": self.runs,
                "tokens_per_iteration": self.tokens / self.iterations if self.iterations else None}


def _sides(target: torch.nn.Module, draft: torch.nn.Module, ids: list[int], temperature: float, seed: int,
           cs: CouplingSettings, tokenizer: Any) -> tuple[dict, dict[str, list]]:
    """The four runners of one round (a baseline and the draft under each rule) and where the drafts' traces go."""
    from ..drafters.model import model_drafter
    kept: dict[str, list] = {rule: [] for rule in RULES}
    sides = {}
    for rule in RULES:
        settings = dict(max_new_tokens=cs.max_new_tokens, temperature=temperature, seed=seed, sampler=rule)
        cfg = SpecConfig(k=cs.k, k_policy="fixed", **settings) if cs.k else recommended_config(**settings)
        sides[f"baseline {rule}"] = ours_baseline(target, ids, cfg, tokenizer)
        sides[rule] = ours_speculative(target, lambda: model_drafter(draft), ids, cfg, tokenizer,
                                       {"target": target, "draft": draft}, keep=kept[rule])
    return sides, kept


def run_coupling(target: torch.nn.Module, tokenizer: Any, cs: CouplingSettings,
                 log: Callable[[str], None] = print) -> dict:
    """Measure both rules against their baselines (module docstring)."""
    from ..drafters.registry import shipped_draft_for
    from ..models.loading import encode_prompt
    from ..training.prompts import heldout_prompts
    draft = shipped_draft_for(cs.draft, target)
    texts = heldout_prompts(cs.prompts, seed=cs.seed)
    tallies = {(t, rule): _Tally() for t in cs.temperatures for rule in RULES}
    for i, text in enumerate(texts, 1):
        ids = encode_prompt(tokenizer, text, chat=True)
        if i == 1:   # once, untimed: the cost policy's calibration and every side's first-call costs
            for run in _sides(target, draft, ids, cs.temperatures[0], 0, cs, tokenizer)[0].values():
                run()
        for t in cs.temperatures:
            for r in range(cs.repeats):
                sides, kept = _sides(target, draft, ids, t, r, cs, tokenizer)
                names = list(sides) if (i + r) % 2 == 0 else list(sides)[::-1]
                results = {name: sides[name]() for name in names}
                for rule in RULES:
                    tallies[t, rule].add(kept[rule][-1], results[rule], results[f"baseline {rule}"])
            log(f"  coupling {i}/{len(texts)} T={t:g}: " + "; ".join(
                f"{rule} {tallies[t, rule].accepted}/{tallies[t, rule].tested} accepted" for rule in RULES))
    rows = [tallies[t, rule].row(t, rule) for t in cs.temperatures for rule in RULES]
    goals = []
    for t in cs.temperatures:
        std, cpl = (next(x for x in rows if x["temperature"] == t and x["rule"] == rule) for rule in RULES)
        ratio = cpl["acceptance"] / std["acceptance"] if std["acceptance"] and cpl["acceptance"] is not None else None
        expected = (cpl["mean_coupled_alpha"] / cpl["mean_one_minus_tv"]
                    if cpl["mean_coupled_alpha"] is not None and cpl["mean_one_minus_tv"] else None)
        goals.append({"temperature": t, "ratio": ratio, "same_positions_ratio": expected,
                      "met": None if ratio is None else ratio >= GOAL})
    return {"settings": vars(cs) | {"temperatures": list(cs.temperatures)}, "prompts": texts, "rows": rows,
            "goals": goals}


def _pct(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def render_coupling(section: dict) -> str:
    s = section["settings"]
    setting = f"fixed K = {s['k']}" if s.get("k") else "our defaults"
    out = [f"Coupled sampling against the standard rule ({s['prompts']} held-out prompts from "
           f"`heldout_prompts(n, seed={s['seed']})`, the {s['draft']} draft, {setting}, {s['max_new_tokens']} new "
           f"tokens, {s['repeats']} rounds (seed = round) per prompt and temperature). Acceptance = accepted ÷ tested "
           "drafts [Wilson 95 %]; at the coupled runs' tested positions: mean 1 − TV, mean P(y = x | x) and the "
           "floor (1 − TV)/(1 + TV); speedup = tokens/s over the same sampler's baseline, geometric mean over "
           "(prompt, round) pairs [95 % t interval]; same text = runs equal to their baseline token for token.", "",
           "| T | rule | acceptance | mean α | 1 − TV | P(y = x) | floor | speedup | same text | tokens/iter |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in section["rows"]:
        acc = ("no drafts" if r["acceptance"] is None else
               f"{r['acceptance']:.3f} [{r['acceptance_ci'][0]:.3f}–{r['acceptance_ci'][1]:.3f}] "
               f"({r['accepted']:,}/{r['tested']:,})")
        speed = ("—" if r["speedup"] is None else
                 f"{r['speedup']:.2f}x" + (f" [{r['speedup_ci'][0]:.2f}–{r['speedup_ci'][1]:.2f}]"
                                           if r["speedup_ci"] else ""))
        out.append(f"| {r['temperature']:g} | {r['rule']} | {acc} | {_pct(r['mean_alpha'])} | "
                   f"{_pct(r['mean_one_minus_tv'])} | {_pct(r['mean_coupled_alpha'])} | {_pct(r['mean_floor'])} | "
                   f"{speed} | {r['same_as_baseline']}/{r['runs']} | {_pct(r['tokens_per_iteration'], 2)} |")
    out += ["", f"Goal: coupled acceptance >= {GOAL} x standard acceptance."]
    for g in section["goals"]:
        verdict = {True: "met", False: "NOT met", None: "not measured"}[g["met"]]
        out.append(f"- T {g['temperature']:g}: observed ratio {_pct(g['ratio'])} ({verdict}); at the same positions "
                   f"(mean P(y = x) ÷ mean 1 − TV) {_pct(g['same_positions_ratio'])}")
    return "\n".join(out)
