"""Benchmark: this engine against transformers' own assisted generation, measured side by side.

    python -m specdec_core.bench              # full run (compare 16 and theory 23 minutes on 2 idle CPU cores;
                                              # held-out 22 on a slow day: bench_heldout)
    python -m specdec_core.bench --quick      # smoke test: 2 prompts, short outputs, 2 rounds
    python -m specdec_core.bench --json out.json --repeats 5
    python -m specdec_core.bench --only coupling  # coupled vs standard sampling's acceptance and speed (bench.coupling)
    python -m specdec_core.bench --only batch     # batched speculation: speedup vs batch size (bench.batch)

Method (all greedy, float32, one process):
- models are loaded once and every side is run once untimed (warm-up) before anything is measured;
- the sides of one prompt are interleaved round by round, alternating direction (A B C, C B A, A B C
  ...), so a change in machine load hits every side alike;
- each side's tokens/s is reported as the median over rounds with the min-max range; a ratio is the
  median of the per-round ratios (with their min-max), measured on runs made side by side;
- every run's output tokens are compared: a ratio is only reported when both sides produced
  token-for-token the same output in every round, otherwise it is refused and the row says where the
  outputs diverged;
- forward hooks count and time every top-level model forward of both sides, so "host time" (wall
  time outside model forwards: sampling, bookkeeping, tracing, generate() machinery) is measured the
  same way for us and for transformers.

Jobs: ``ngram`` (our NGramDrafter vs ``generate(prompt_lookup_num_tokens=K)``), ``draft:<pair>`` (our
ModelDrafter vs ``generate(assistant_model=..., num_assistant_tokens=K, "constant", threshold 0)``; for the
shipped token-only draft also vs transformers' default heuristic schedule; the feature-reading draft is
not an ``assistant_model``: its peer is transformers' MTP loop, ``generate(use_mtp=True)`` with the same
draft as its one MTP layer, against our engine at K = 1, see ``mtp_peer``),
each against target-only generation (ours and transformers' plain ``generate``), and our engine with
the full trace vs ``SpecConfig(full_trace=False)``. Results are printed as markdown and written as JSON.
"""
from __future__ import annotations

import contextlib
import platform
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .measure import (BenchPrompt, Comparison, RunResult, Runner,
    compare, hf_generate, interleave,
    ours_baseline, ours_speculative)
from .models import early_exit_draft, tiny_realistic_pair
from .heldout import run_heldout, validate_heldout
from .prompts import PROMPTS
from .report import make_report, side_rows
from ..config import MAX_K, RECOMMENDED_CONFIDENCE_STOP, SpecConfig, recommended_config
from .settings import BenchSettings

HF_DEFAULT_PROMPT_LOOKUP = 10  # transformers' documented prompt_lookup_num_tokens
PAIRS = ("self", "trained", "feature", "early-exit", "tiny")
NO_HF_PEER = ("feature",)             # reads the target's features: not an assistant_model ...
MTP_PEER = ("feature",)               # ... but transformers' MTP loop runs it (one layer: K = 1; see mtp_peer)
HF_DEFAULT_SCHEDULE_TOO = ("trained",)  # the shipped token draft is also run with transformers' default schedule
OURS_DEFAULT_TOO = ("trained", "feature")  # the shipped drafts also run with our defaults (cost-aware K + stop) and
                                           # with fixed K and the confidence stop


# --- the benchmark --------------------------------------------------------------------------------


@dataclass
class Group:
    """One target model and the sides measured against it, interleaved per prompt."""
    name: str
    runners: dict[str, Runner]
    comparisons: list[tuple[str, str, str, str]]     # (job, label, a, b)


def bundled_group(target: torch.nn.Module, tokenizer: Any, ids: list[int], s: BenchSettings,
                  drafts: dict[str, torch.nn.Module]) -> Group:
    """Target-only (ours, transformers), n-gram (ours full / minimal trace, prompt lookup) and one
    model-draft job per pair in ``drafts`` (ours full / minimal, assisted generation)."""
    from ..drafters.ngram import NGramDrafter
    eos = tokenizer.eos_token_id
    n = s.max_new_tokens
    full_ng = SpecConfig(k=s.ngram_k, max_new_tokens=n)
    min_ng = SpecConfig(k=s.ngram_k, max_new_tokens=n, full_trace=False)
    t = {"target": target}
    runners: dict[str, Runner] = {
        "ours target-only": ours_baseline(target, ids, SpecConfig(max_new_tokens=n), tokenizer),
        "hf generate": hf_generate(target, ids, n, eos, t),
        "ours ngram": ours_speculative(target, NGramDrafter, ids, full_ng, tokenizer, t),
        "ours ngram min-trace": ours_speculative(target, NGramDrafter, ids, min_ng, tokenizer, t),
        "hf prompt-lookup": hf_generate(target, ids, n, eos, t, prompt_lookup_num_tokens=s.ngram_k),
    }
    comps = [("ngram", "ours vs transformers (prompt lookup)", "ours ngram", "hf prompt-lookup"),
             ("ngram", "ours: speedup vs ours target-only", "ours ngram", "ours target-only"),
             ("ngram", "transformers: speedup vs plain generate", "hf prompt-lookup", "hf generate"),
             ("ngram", "full trace vs minimal trace", "ours ngram", "ours ngram min-trace"),
             ("target-only", "ours vs transformers (plain generate)", "ours target-only", "hf generate")]
    for pair, draft in drafts.items():
        runners.update(_draft_sides(pair, target, draft, tokenizer, ids, s))
        comps += _draft_comparisons(pair, "ours target-only", "hf generate")
    # our default settings (config.recommended_config(), as the CLI) vs transformers' defaults for the same job
    default = recommended_config(max_new_tokens=n)
    runners["ours default ngram"] = ours_speculative(target, NGramDrafter, ids, default, tokenizer, t)
    hf_default = "hf prompt-lookup"
    if s.ngram_k != HF_DEFAULT_PROMPT_LOOKUP:
        hf_default = "hf default prompt-lookup"
        runners[hf_default] = hf_generate(target, ids, n, eos, t, prompt_lookup_num_tokens=HF_DEFAULT_PROMPT_LOOKUP)
    comps.append(("default", "ours default vs transformers default (prompt lookup)", "ours default ngram", hf_default))
    if "self" in drafts:
        from ..drafters.model import ModelDrafter
        both = {"target": target, "draft": target}
        runners["ours default draft[self]"] = ours_speculative(target, lambda: ModelDrafter(target), ids, default,
                                                               tokenizer, both)
        runners["hf default assisted[self]"] = hf_generate(target, ids, n, eos, both, assistant_model=target)
        comps.append(("default", "ours default vs transformers default (assisted, self)", "ours default draft[self]",
                      "hf default assisted[self]"))
    return Group("bundled", runners, comps)


def _draft_sides(pair: str, target: torch.nn.Module, draft: torch.nn.Module, tokenizer: Any, ids: list[int],
                 s: BenchSettings) -> dict[str, Runner]:
    from ..drafters.model import model_drafter
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    n = s.max_new_tokens
    roles = {"target": target, "draft": draft}
    sides = {
        f"ours draft[{pair}]": ours_speculative(target, lambda: model_drafter(draft), ids,
                                                SpecConfig(k=s.draft_k, max_new_tokens=n), tokenizer, roles),
        f"ours draft[{pair}] min-trace": ours_speculative(
            target, lambda: model_drafter(draft), ids, SpecConfig(k=s.draft_k, max_new_tokens=n, full_trace=False),
            tokenizer, roles),
    }
    if pair not in NO_HF_PEER:
        sides[f"hf assisted[{pair}]"] = hf_generate(target, ids, n, eos, roles, assistant_model=draft,
                                                    num_assistant_tokens=s.draft_k,
                                                    num_assistant_tokens_schedule="constant",
                                                    assistant_confidence_threshold=0.0)
    if pair in HF_DEFAULT_SCHEDULE_TOO:
        sides[f"hf default assisted[{pair}]"] = hf_generate(target, ids, n, eos, roles, assistant_model=draft)
    if pair in OURS_DEFAULT_TOO:
        sides[f"ours default draft[{pair}]"] = ours_speculative(target, lambda: model_drafter(draft), ids,
                                                                recommended_config(max_new_tokens=n), tokenizer, roles)
        sides[f"ours stop draft[{pair}]"] = ours_speculative(
            target, lambda: model_drafter(draft), ids,
            SpecConfig(k=s.draft_k, max_new_tokens=n, confidence_stop=RECOMMENDED_CONFIDENCE_STOP), tokenizer, roles)
    if pair in MTP_PEER:
        from .mtp_peer import build_mtp_model, mtp_generation
        mtp = build_mtp_model(target, draft)
        sides[f"ours draft[{pair}] K=1"] = ours_speculative(target, lambda: model_drafter(draft), ids,
                                                            SpecConfig(k=1, max_new_tokens=n), tokenizer, roles)
        sides[f"hf mtp[{pair}]"] = hf_generate(target, ids, n, eos, {"target": target},
                                               context=lambda: mtp_generation(target, mtp), use_mtp=True)
    return sides


def _draft_comparisons(pair: str, ours_base: str, hf_base: str) -> list[tuple[str, str, str, str]]:
    job = f"draft[{pair}]"
    comps = [(job, "ours: speedup vs ours target-only", f"ours draft[{pair}]", ours_base),
             (job, "full trace vs minimal trace", f"ours draft[{pair}]", f"ours draft[{pair}] min-trace")]
    if pair not in NO_HF_PEER:
        comps += [(job, "ours vs transformers (assisted)", f"ours draft[{pair}]", f"hf assisted[{pair}]"),
                  (job, "transformers: speedup vs plain generate", f"hf assisted[{pair}]", hf_base)]
    if pair in HF_DEFAULT_SCHEDULE_TOO:
        comps += [(job, "ours vs transformers (assisted, its default schedule)", f"ours draft[{pair}]",
                   f"hf default assisted[{pair}]"),
                  (job, "ours default vs transformers default (assisted)", f"ours default draft[{pair}]",
                   f"hf default assisted[{pair}]")]
        if pair in OURS_DEFAULT_TOO:   # both stop drafting on the draft's confidence
            comps.append((job, "ours K + confidence stop vs transformers default (assisted)",
                          f"ours stop draft[{pair}]", f"hf default assisted[{pair}]"))
    if pair in OURS_DEFAULT_TOO:
        comps += [(job, "ours default: speedup vs ours target-only", f"ours default draft[{pair}]", ours_base),
                  (job, "ours K + confidence stop: speedup vs ours target-only", f"ours stop draft[{pair}]", ours_base)]
    if pair in MTP_PEER:
        comps += [(job, "ours vs transformers (MTP loop, K = 1 both)", f"ours draft[{pair}] K=1", f"hf mtp[{pair}]"),
                  (job, "transformers (MTP loop): speedup vs plain generate", f"hf mtp[{pair}]", hf_base)]
    return comps


def tiny_group(target: torch.nn.Module, draft: torch.nn.Module, ids: list[int], s: BenchSettings) -> Group:
    """The random-weight pair: no tokenizer, no EOS, so every run makes exactly max_new_tokens."""
    n = s.max_new_tokens
    runners = {"ours target-only (tiny)": ours_baseline(target, ids, SpecConfig(max_new_tokens=n), None),
               "hf generate (tiny)": hf_generate(target, ids, n, None, {"target": target})}
    runners.update(_draft_sides("tiny", target, draft, None, ids, s))
    return Group("tiny", runners, _draft_comparisons("tiny", "ours target-only (tiny)", "hf generate (tiny)"))


def run_group(group: Group, prompt: BenchPrompt, repeats: int, warmup: bool,
              log: Callable[[str], None] = lambda m: None) -> tuple[dict[str, list[RunResult]], list[Comparison]]:
    t0 = time.perf_counter()
    results = interleave(group.runners, repeats, warmup)
    log(f"  {group.name} / {prompt.name}: {len(group.runners)} sides x {repeats} rounds in "
        f"{time.perf_counter() - t0:.0f} s")
    comps = [compare(job, label, a, b, prompt, results) for job, label, a, b in group.comparisons]
    return results, comps


def machine_info() -> dict:
    import transformers
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
            cpu = names[0] if names else cpu
    info = {"cpu": cpu or platform.machine(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    with contextlib.suppress(OSError):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


def run_benchmark(s: BenchSettings, log: Callable[[str], None] = print, profile: bool = False) -> dict:
    """Load the bundled model (and build the in-process drafts), run every group on every prompt,
    and return the report as a JSON-able dict."""
    from ..decoding.baseline import warm_up
    from ..models.loading import encode_prompt, load_bundled_model
    validate_settings(s)
    if s.threads:
        torch.set_num_threads(s.threads)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    machine = machine_info()
    log(f"loading the bundled model ... ({machine['cpu']}, {machine['cores']} cores, "
        f"{machine['torch_threads']} torch threads)")
    target, tok = load_bundled_model(s.device, getattr(torch, s.dtype))
    drafts: dict[str, torch.nn.Module] = {}
    if "self" in s.pairs:
        drafts["self"] = target
    if "early-exit" in s.pairs:
        drafts["early-exit"] = early_exit_draft(target, s.early_exit_layers)
    from ..drafters.registry import shipped_draft_for
    for key in ("trained", "feature"):
        if key in s.pairs:
            drafts[key] = shipped_draft_for(key, target)
    tiny = None
    if "tiny" in s.pairs:
        tiny = tuple(m.to(device=s.device, dtype=getattr(torch, s.dtype)) for m in tiny_realistic_pair(len(tok)))
    warm_up(target, *([tiny[0], tiny[1]] if tiny else []))
    rows: list[dict] = []
    comparisons: list[Comparison] = []
    warmed: set[str] = set()
    by_name = {p.name: p for p in PROMPTS}
    for name in (s.prompts if s.compare else ()):
        prompt = by_name[name]
        ids = encode_prompt(tok, prompt.text, chat=True)
        groups = [bundled_group(target, tok, ids, s, drafts)]
        if tiny is not None:
            groups.append(tiny_group(tiny[0], tiny[1], ids, s))
        for group in groups:
            results, comps = run_group(group, prompt, s.repeats, warmup=group.name not in warmed, log=log)
            warmed.add(group.name)
            comparisons += comps
            rows += side_rows(prompt, group.name, len(ids), results)
            log("    " + "; ".join(f"{c.a} / {c.b}: " + (f"{c.ratio.median:.2f}x" if c.ratio else "REFUSED")
                                   for c in comps if "vs transformers" in c.label))
    report = make_report(s, machine, started, rows, comparisons)
    report["ours_default"] = {k: v for k, v in recommended_config(max_new_tokens=s.max_new_tokens).to_dict().items()
                              if k in ("k", "k_policy", "temperature", "confidence_stop")}
    if s.theory:
        from .theory import TheorySettings, run_theory
        log("cost model and K policies ...")
        ts = TheorySettings(ks=s.theory_ks, max_new_tokens=s.theory_max_new_tokens, repeats=s.theory_repeats,
                            drafters=s.theory_drafters, h2h_repeats=s.theory_h2h_repeats)
        report["theory"] = run_theory(target, tok, [by_name[n] for n in s.prompts], ts, log)
    if s.heldout is not None:
        log("held-out prompts ...")
        report["heldout"] = run_heldout(target, tok, s.heldout, log)
    if s.tree is not None:
        from .tree import run_tree_bench
        log("token trees against chains ...")
        report["tree"] = run_tree_bench(target, tok, s.tree, log)
    if s.coupling is not None:
        from .coupling import run_coupling
        log("coupled sampling against the standard rule ...")
        report["coupling"] = run_coupling(target, tok, s.coupling, log)
    if s.batch is not None:
        from .batch import run_batch_bench
        log("batched speculative decoding ...")
        report["batch"] = run_batch_bench(target, tok, s.batch, log)
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    if profile:
        log("profiling ...")
        report["profile"] = profile_section(target, tok, s)
    return report


def validate_settings(s: BenchSettings) -> None:
    """Refuse bad settings before anything is loaded."""
    names = {p.name for p in PROMPTS}
    unknown = [p for p in s.prompts if p not in names]
    if unknown or not s.prompts:
        raise ValueError(f"unknown or no prompt(s) {unknown}; choose from {sorted(names)}")
    bad_pairs = [p for p in s.pairs if p not in PAIRS]
    if bad_pairs:
        raise ValueError(f"unknown pair(s) {bad_pairs}; choose from {', '.join(PAIRS)}")
    if s.repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {s.repeats}")
    for name, k in (("ngram_k", s.ngram_k), ("draft_k", s.draft_k)):
        if not 1 <= k <= MAX_K:
            raise ValueError(f"{name} must be between 1 and {MAX_K}, got {k}")
    if s.dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {s.dtype!r}")
    if s.device.split(":")[0] not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be cpu, cuda or mps, got {s.device!r}")
    if s.threads is not None and s.threads < 1:
        raise ValueError(f"threads must be >= 1, got {s.threads}")
    if not 1 <= s.early_exit_layers:
        raise ValueError(f"early_exit_layers must be >= 1, got {s.early_exit_layers}")
    SpecConfig(max_new_tokens=s.max_new_tokens)  # the engine's own range check
    if s.theory:
        from .theory import DRAFTERS
        known = [name for name, _ in DRAFTERS]
        bad = [d for d in s.theory_drafters if d not in known]
        if bad or not s.theory_drafters:
            raise ValueError(f"unknown or no theory drafter(s) {bad}; choose from {', '.join(known)}")
        if not s.theory_ks or not all(1 <= k <= 32 for k in s.theory_ks):
            raise ValueError("theory K values must be between 1 and 32")
        if s.theory_repeats < 1:
            raise ValueError(f"theory repeats must be >= 1, got {s.theory_repeats}")
        if s.theory_h2h_repeats < 0:
            raise ValueError(f"head-to-head repeats must be >= 0, got {s.theory_h2h_repeats}")
        SpecConfig(max_new_tokens=s.theory_max_new_tokens)
    if s.heldout is not None:
        validate_heldout(s.heldout)
    if s.tree is not None:
        from .tree import validate_tree
        validate_tree(s.tree)
    if s.coupling is not None:
        from .coupling import validate_coupling
        validate_coupling(s.coupling)
    if s.batch is not None:
        from .batch import validate_batch
        validate_batch(s.batch)


def profile_section(target: torch.nn.Module, tokenizer: Any, s: BenchSettings) -> str:
    """torch.profiler over one run of each n-gram and self-draft side, on the first prompt."""
    from ..drafters.model import ModelDrafter
    from ..drafters.ngram import NGramDrafter
    from ..models.loading import encode_prompt
    prompt = next(p for p in PROMPTS if p.name == s.prompts[0])
    ids = encode_prompt(tokenizer, prompt.text, chat=True)
    n, eos, t = s.max_new_tokens, tokenizer.eos_token_id, {"target": target}
    both = {"target": target, "draft": target}
    runs = {"ours ngram": ours_speculative(target, NGramDrafter, ids, SpecConfig(k=s.ngram_k, max_new_tokens=n),
                                           tokenizer, t),
            "hf prompt-lookup": hf_generate(target, ids, n, eos, t, prompt_lookup_num_tokens=s.ngram_k),
            "ours draft[self]": ours_speculative(target, lambda: ModelDrafter(target), ids,
                                                 SpecConfig(k=s.draft_k, max_new_tokens=n), tokenizer, both),
            "hf assisted[self]": hf_generate(target, ids, n, eos, both, assistant_model=target,
                                             num_assistant_tokens=s.draft_k, num_assistant_tokens_schedule="constant",
                                             assistant_confidence_threshold=0.0)}
    parts = []
    for name, run in runs.items():
        run()  # warm
        parts.append(f"Profile: {name} on {prompt.name} (torch.profiler, top ops by self CPU time)\n\n```\n"
                     f"{profile_run(run)}\n```")
    return "\n\n".join(parts)


# --- profile --------------------------------------------------------------------------------------

def profile_run(run: Runner, top: int = 12) -> str:
    """One run under torch.profiler: the top ops by self CPU time, and the share of the wall time
    spent inside model forwards (the rest is host overhead)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        res = run()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)
    share = res.forward_s / res.seconds if res.seconds else 0.0
    return (f"wall {1000 * res.seconds:.0f} ms, {len(res.tokens)} tokens, forwards {res.forwards}, "
            f"inside forwards {100 * share:.1f} %, host {1000 * (res.seconds - res.forward_s):.1f} ms\n{table}")
