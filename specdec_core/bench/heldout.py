"""Held-out speed: the shipped drafts on open-ended prompts they were not trained on, against the baseline.

    python -m specdec_core.bench --only heldout                       # 10 prompts, 64 new tokens, 3 rounds
    python -m specdec_core.bench --only heldout --heldout-prompts 20 --heldout-seed 5

The compare section has two open-ended prompts of its own; a claim about a trained draft's speed needs
more, and prompts it never saw: ``training.prompts.heldout_prompts(n, seed)`` draws them, alternately, from
free-form chat prompts written apart from the training lists and from templates × topics that never occur
in training (a different seed, a different draw). For each prompt, our target-only baseline and every
(draft, setting) side run interleaved, ``repeats`` rounds in alternating order (``bench_measure.interleave``);
a side's speedup on a prompt is the median of its per-round ratios to that round's baseline, refused unless
its output equals the baseline's token for token (greedy, float32); the figure is the geometric mean over
prompts, with the min–max over every round.

Settings: our defaults (``config.recommended_config()``: cost-aware K and the confidence stop), the same
without the stop, fixed K = ``FIXED_K`` with the stop, and one draft per iteration (fixed
K = 1, no stop: accepted ÷ drafted is then the draft's per-draft acceptance, undiluted by deeper drafts and
unfiltered by the stop, the figure ``ACCEPTANCE_GOAL`` is set for); prompt lookup, for comparison, with our
defaults only (it has no confidence to stop on, and fixed K is not how it is meant to run). Every side's
acceptance is also given on the free-form chat prompts alone, the harder half for the trained drafts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from .measure import BenchPrompt, Comparison, aggregate, compare, interleave, ours_baseline, ours_speculative
from ..config import RECOMMENDED_CONFIDENCE_STOP, SpecConfig, recommended_config

DRAFTS = ("feature", "trained", "ngram")   # the shipped drafts, and prompt lookup for comparison
FIXED_K = 4
SPEEDUP_GOAL = 1.30      # a trained draft's speedup goal on open-ended prompts, with our defaults
ACCEPTANCE_GOAL = 0.60   # its greedy per-draft acceptance goal there (accepted ÷ drafted at K = 1)
ONE_DRAFT = "one draft per iteration (K = 1)"
BASELINE = "ours target-only"


class _Run(NamedTuple):
    """One measured run of a side: its counts, and whether its prompt is a free-form chat prompt."""
    drafted: int
    accepted: int
    tokens: int
    iterations: int
    freeform: bool


@dataclass(frozen=True)
class HeldoutSettings:
    prompts: int = 10
    seed: int = 23           # not the card's seed (1): other prompts than the draft card measured on
    max_new_tokens: int = 64
    repeats: int = 3
    drafts: tuple[str, ...] = DRAFTS


def check_sample(part: str, prompts: int, repeats: int, drafts: tuple[str, ...], known: tuple[str, ...]) -> None:
    """Refuse a bench part's sample of the held-out prompts before anything is loaded (ValueError naming
    ``part``): how many prompts, rounds, and which drafts."""
    from ..training.prompts import N_HELDOUT_PROMPTS as most
    if not 1 <= prompts <= most:
        raise ValueError(f"{part} prompts must be between 1 and {most}, got {prompts}")
    if repeats < 1:
        raise ValueError(f"{part} repeats must be >= 1, got {repeats}")
    bad = [d for d in drafts if d not in known]
    if bad or not drafts:
        raise ValueError(f"unknown or no {part} draft(s) {bad}; choose from {', '.join(known)}")


def validate_heldout(hs: HeldoutSettings) -> None:
    """Refuse bad settings before anything is loaded."""
    check_sample("held-out", hs.prompts, hs.repeats, hs.drafts, DRAFTS)
    SpecConfig(max_new_tokens=hs.max_new_tokens)


def setting_configs(max_new_tokens: int) -> dict[str, SpecConfig]:
    """The settings each draft runs with, by label."""
    return {"defaults": recommended_config(max_new_tokens=max_new_tokens),
            "defaults without the confidence stop": recommended_config(max_new_tokens=max_new_tokens,
                                                                       confidence_stop=0.0),
            f"fixed K = {FIXED_K} + stop": SpecConfig(k=FIXED_K, k_policy="fixed", max_new_tokens=max_new_tokens,
                                                      confidence_stop=RECOMMENDED_CONFIDENCE_STOP),
            ONE_DRAFT: SpecConfig(k=1, k_policy="fixed", max_new_tokens=max_new_tokens)}


def run_heldout(target: torch.nn.Module, tokenizer: Any, hs: HeldoutSettings,
                log: Callable[[str], None] = print) -> dict:
    """Measure every (draft, setting) side against the baseline on ``hs.prompts`` held-out prompts."""
    from ..training.prompts import FREEFORM_HELDOUT, heldout_prompts
    from ..drafters.ngram import NGramDrafter
    from ..drafters.model import model_drafter
    from ..models.loading import encode_prompt
    from ..drafters.registry import shipped_draft_for
    drafts = {key: shipped_draft_for(key, target) for key in hs.drafts if key != "ngram"}
    configs = setting_configs(hs.max_new_tokens)
    comparisons: list[Comparison] = []
    stats: dict[str, list[_Run]] = {}
    texts = heldout_prompts(hs.prompts, seed=hs.seed)
    for i, text in enumerate(texts, 1):
        prompt = BenchPrompt(f"heldout-{i}", "open-ended", text)
        ids = encode_prompt(tokenizer, text, chat=True)
        freeform = text in FREEFORM_HELDOUT
        runners = {BASELINE: ours_baseline(target, ids, SpecConfig(max_new_tokens=hs.max_new_tokens), tokenizer)}
        for key, draft in drafts.items():
            for label, cfg in configs.items():
                runners[f"{key}: {label}"] = ours_speculative(target, lambda d=draft: model_drafter(d), ids, cfg,
                                                              tokenizer, {"target": target, "draft": draft})
        if "ngram" in hs.drafts:
            runners["ngram: defaults"] = ours_speculative(target, NGramDrafter, ids, configs["defaults"], tokenizer,
                                                          {"target": target})
        results = interleave(runners, hs.repeats, warmup=i == 1)
        sides = [side for side in runners if side != BASELINE]
        comps = [compare("heldout", side, side, BASELINE, prompt, results) for side in sides]
        for side in sides:
            stats.setdefault(side, []).extend(_Run(r.drafted or 0, r.accepted or 0, len(r.tokens), r.iterations or 1,
                                                   freeform) for r in results[side])
        comparisons += comps
        log(f"  heldout-{i}/{len(texts)}: " + "; ".join(
            f"{c.a} {c.ratio.median:.2f}x" if c.ratio else f"{c.a} REFUSED" for c in comps))
    rows = []
    for side, runs in stats.items():
        goal = side.endswith(": defaults") and not side.startswith("ngram")
        agg = aggregate(comparisons, "heldout", side, at_least=SPEEDUP_GOAL if goal else None)
        drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
        free = [r for r in runs if r.freeform]
        acceptance = accepted / drafted if drafted else None
        acc_goal = side.endswith(f": {ONE_DRAFT}")
        acc_met = None if not acc_goal or acceptance is None else acceptance >= ACCEPTANCE_GOAL
        rows.append({"side": side, "speedup": agg.ratio, "lo": agg.lo, "hi": agg.hi, "prompts": agg.prompts,
                     "refused": agg.refused, "goal": agg.goal, "met": agg.met,
                     "acceptance": acceptance, "drafted": drafted, "accepted": accepted,
                     "freeform_drafted": sum(r.drafted for r in free),
                     "freeform_accepted": sum(r.accepted for r in free),
                     "acceptance_goal": f">= {ACCEPTANCE_GOAL:.2f}" if acc_goal else "", "acceptance_met": acc_met,
                     "tokens_per_iteration": sum(r.tokens for r in runs) / sum(r.iterations for r in runs)})
    return {"settings": vars(hs) | {"drafts": list(hs.drafts)}, "prompts": texts, "rows": rows,
            "refusals": [f"{c.prompt}: {c.a}: {c.refused}" for c in comparisons if c.refused]}


def _counted(accepted: int, drafted: int) -> str:
    """accepted ÷ drafted with its counts, e.g. '0.54 (663 / 1,239)'."""
    return f"{accepted / drafted:.2f} ({accepted:,} / {drafted:,})"


def render_heldout(section: dict) -> str:
    s = section["settings"]
    out = [f"Held-out open-ended prompts ({s['prompts']} from `heldout_prompts(n, seed={s['seed']})`: free-form "
           f"chat prompts and template × topic pairs, none trained on; {s['max_new_tokens']} new tokens, greedy, "
           f"{s['repeats']} interleaved rounds): "
           "speedup over our target-only baseline, the geometric mean over prompts of each prompt's median "
           "per-round ratio [min–max over all rounds]; acceptance = accepted ÷ drafted over all runs (at K = 1: "
           "the per-draft acceptance), and on the free-form chat prompts alone.", "",
           "| draft: setting | speedup | goal | met | acceptance | goal | met | tokens/iteration |",
           "|---|---|---|---|---|---|---|---|"]
    verdict = {True: "yes", False: "NO", None: "not measured"}
    for r in section["rows"]:
        speed = "refused" if r["speedup"] is None else f"{r['speedup']:.2f}x [{r['lo']:.2f}–{r['hi']:.2f}]"
        met = "" if not r["goal"] else verdict[r["met"]]
        if r["acceptance"] is None:
            acc = "no drafts"
        else:
            acc = _counted(r["accepted"], r["drafted"]) if r.get("drafted") else f"{r['acceptance']:.2f}"
        if r.get("freeform_drafted"):
            acc += f"; free-form {_counted(r['freeform_accepted'], r['freeform_drafted'])}"
        acc_goal = r.get("acceptance_goal", "")
        acc_met = "" if not acc_goal else verdict[r.get("acceptance_met")]
        out.append(f"| {r['side']} | {speed} | {r['goal']} | {met} | {acc} | {acc_goal} | {acc_met} | "
                   f"{r['tokens_per_iteration']:.2f} |")
    if section["refusals"]:
        out += ["", "Refused (output differs from the baseline):"] + [f"- {x}" for x in section["refusals"]]
    return "\n".join(out)
