"""Benchmark: this engine against transformers' own assisted generation, measured side by side.

    python -m specdec_core.bench              # full run (about 15 minutes on 2 idle CPU cores)
    python -m specdec_core.bench --quick      # smoke test: 2 prompts, short outputs, 2 rounds
    python -m specdec_core.bench --json out.json --repeats 5

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
ModelDrafter vs ``generate(assistant_model=..., num_assistant_tokens=K, "constant", threshold 0)``),
each against target-only generation (ours and transformers' plain ``generate``), and our engine with
the full trace vs ``SpecConfig(full_trace=False)``. Results are printed as markdown and written as JSON.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .config import MAX_K, SpecConfig

NGRAM_K = 10          # transformers' documented prompt-lookup setting; the same K on both sides
DRAFT_K = 4           # draft tokens per iteration for the model-draft job, both sides
EARLY_EXIT_LAYERS = 8  # the in-process draft: the bundled model's first layers + its norm and head


# --- prompts --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchPrompt:
    name: str
    kind: str          # "extractive" (the answer copies the prompt) or "open-ended"
    text: str


_PASSAGE = ("The lighthouse on the northern cape was built in 1871 from granite quarried on the island "
            "itself. Its lamp burned paraffin until 1923, when a diesel generator was installed, and the "
            "last resident keeper left in 1989. Today the tower is automated, the keeper's cottage is a "
            "small museum, and the path from the harbour to the cape takes about forty minutes on foot.")
_CODE = ("def merge_sorted(left, right):\n"
         "    result = []\n"
         "    i = j = 0\n"
         "    while i < len(left) and j < len(right):\n"
         "        if left[i] <= right[j]:\n"
         "            result.append(left[i])\n"
         "            i += 1\n"
         "        else:\n"
         "            result.append(right[j])\n"
         "            j += 1\n"
         "    result.extend(left[i:])\n"
         "    result.extend(right[j:])\n"
         "    return result\n")
_LIST = ("Monday: water the tomatoes and check the greenhouse vents.\n"
         "Tuesday: order more seed trays and potting compost.\n"
         "Wednesday: repair the fence by the compost heap.\n"
         "Thursday: harvest the beans and freeze half of them.\n"
         "Friday: clean the tools and sharpen the secateurs.")

PROMPTS: tuple[BenchPrompt, ...] = (
    BenchPrompt("copy-passage", "extractive", "Repeat the following text exactly, word for word:\n\n" + _PASSAGE),
    BenchPrompt("copy-code", "extractive", "Repeat this Python function exactly:\n\n" + _CODE),
    BenchPrompt("copy-list", "extractive", "Repeat this list exactly, line by line:\n\n" + _LIST),
    BenchPrompt("story", "open-ended", "Write a short story about a robot who learns to paint."),
    BenchPrompt("explain", "open-ended", "Explain how a refrigerator keeps food cold."),
)
QUICK_PROMPTS = ("copy-passage", "story")


# --- one measured run -----------------------------------------------------------------------------

@dataclass
class RunResult:
    tokens: list[int]                 # the new tokens, EOS included when generated
    seconds: float                    # wall time of the whole call (prefill included), device synced
    forward_s: float = 0.0            # time inside top-level model forwards (forward hooks)
    forwards: dict[str, int] = field(default_factory=dict)   # forwards per model role
    forward_s_by_role: dict[str, float] = field(default_factory=dict)
    iterations: int | None = None     # ours only: speculative iterations
    drafted: int | None = None        # ours only: tokens proposed / accepted
    accepted: int | None = None
    other_ms: list[float] | None = None   # ours only: per-iteration other_ms from the trace
    cpu_seconds: float = 0.0          # CPU time of this process during the call (all threads)
    others_cores: float | None = None  # how many cores OTHER processes kept busy meanwhile (Linux)

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0

    @property
    def host_ms_per_token(self) -> float:
        """Wall time outside model forwards, per new token."""
        return 1000 * max(0.0, self.seconds - self.forward_s) / max(1, len(self.tokens))


Runner = Callable[[], RunResult]


class ForwardMeter:
    """Counts and times the forwards of some modules with hooks, while active. Roles that share one
    module (a model drafting for itself) are merged under "target+draft". On CPU every op is
    synchronous, so pre-hook to post-hook is the forward's cost; on CUDA the hooks synchronize."""

    def __init__(self, modules: dict[str, torch.nn.Module]) -> None:
        roles: dict[int, list[str]] = {}
        self._modules: dict[int, torch.nn.Module] = {}
        for role, m in modules.items():
            roles.setdefault(id(m), []).append(role)
            self._modules[id(m)] = m
        self._role = {key: "+".join(names) for key, names in roles.items()}
        self.counts: dict[str, int] = {}
        self.role_seconds: dict[str, float] = {}
        self.seconds = 0.0
        self._t0: dict[int, float] = {}
        self._handles: list[Any] = []

    def _clock(self, m: torch.nn.Module) -> float:
        dev = next(m.parameters()).device
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter()

    def __enter__(self) -> "ForwardMeter":
        self.counts = {role: 0 for role in self._role.values()}
        self.role_seconds = {role: 0.0 for role in self._role.values()}
        self.seconds = 0.0
        for key, m in self._modules.items():
            def pre(mod: torch.nn.Module, args: Any, key: int = key) -> None:
                self._t0[key] = self._clock(mod)

            def post(mod: torch.nn.Module, args: Any, out: Any, key: int = key) -> None:
                dt = self._clock(mod) - self._t0.pop(key)
                self.seconds += dt
                self.role_seconds[self._role[key]] += dt
                self.counts[self._role[key]] += 1
            self._handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def _sync(model: torch.nn.Module) -> None:
    dev = next(model.parameters()).device
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Stopwatch:
    """Wall time (device synchronized at both ends) and this process's CPU time of one call, plus how
    busy the REST of the machine was meanwhile (in cores, from /proc; None where unavailable): on a
    shared machine that says which measurements were disturbed. CPU time is the steadier measure of the
    work done; wall time is the claim."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.seconds = self.cpu_seconds = 0.0
        self.others_cores: float | None = None

    def __enter__(self) -> "Stopwatch":
        _sync(self.model)
        self._busy0 = _machine_busy_s()
        self._t0, self._c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        _sync(self.model)
        self.seconds = time.perf_counter() - self._t0
        self.cpu_seconds = time.process_time() - self._c0
        busy1 = _machine_busy_s()
        if self._busy0 is not None and busy1 is not None and self.seconds > 0:
            self.others_cores = max(0.0, (busy1 - self._busy0 - self.cpu_seconds) / self.seconds)


def _machine_busy_s() -> float | None:
    """CPU seconds all processes have spent busy since boot (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _result(tokens: list[int], clock: Stopwatch, meter: ForwardMeter, **ours: Any) -> RunResult:
    return RunResult(tokens, clock.seconds, meter.seconds, dict(meter.counts), dict(meter.role_seconds),
                     cpu_seconds=clock.cpu_seconds, others_cores=clock.others_cores, **ours)


def ours_speculative(target: torch.nn.Module, make_drafter: Callable[[], Any], ids: list[int], cfg: SpecConfig,
                     tokenizer: Any, meter_modules: dict[str, torch.nn.Module]) -> Runner:
    """Our engine as the app runs it (tokenizer given, so the trace carries token texts)."""
    from .engine import speculative_generate

    def run() -> RunResult:
        drafter = make_drafter()
        with ForwardMeter(meter_modules) as meter, Stopwatch(target) as clock:
            trace = speculative_generate(target, drafter, ids, cfg, tokenizer)
        st = trace.stats
        return _result(list(trace.new_token_ids), clock, meter, iterations=st.iterations, drafted=st.drafted,
                       accepted=st.accepted, other_ms=[it.other_ms for it in trace.iterations])
    return run


def ours_baseline(target: torch.nn.Module, ids: list[int], cfg: SpecConfig, tokenizer: Any) -> Runner:
    from .engine import baseline_generate

    def run() -> RunResult:
        with ForwardMeter({"target": target}) as meter, Stopwatch(target) as clock:
            res = baseline_generate(target, ids, cfg, tokenizer)
        return _result(list(res.new_token_ids), clock, meter)
    return run


def hf_generate(target: torch.nn.Module, ids: list[int], max_new_tokens: int, eos_token_id: int | None,
                meter_modules: dict[str, torch.nn.Module], **generate_kwargs: Any) -> Runner:
    """transformers' ``generate``, greedy, with whatever extra kwargs select its assisted modes."""
    device = next(target.parameters()).device
    x = torch.tensor([ids], device=device)
    mask = torch.ones_like(x)

    def run() -> RunResult:
        with ForwardMeter(meter_modules) as meter, _assistant_settings(generate_kwargs), Stopwatch(target) as clock:
            out = target.generate(x, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                  eos_token_id=eos_token_id, pad_token_id=eos_token_id, **generate_kwargs)
        return _result(out[0, len(ids):].tolist(), clock, meter)
    return run


ASSISTANT_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


@contextlib.contextmanager
def _assistant_settings(generate_kwargs: dict) -> Iterator[None]:
    """transformers 5.x reads num_assistant_tokens / schedule / confidence threshold from the ASSISTANT's
    generation_config (its candidate generator copies that config), so the generate() kwargs of the same
    names alone leave it on its defaults (20 tokens, threshold 0.4). Set them there too, and restore."""
    assistant = generate_kwargs.get("assistant_model")
    if assistant is None:
        yield
        return
    gc = assistant.generation_config
    saved = {f: getattr(gc, f, None) for f in ASSISTANT_FIELDS}
    try:
        for f in ASSISTANT_FIELDS:
            if f in generate_kwargs:
                setattr(gc, f, generate_kwargs[f])
        yield
    finally:
        for f, v in saved.items():
            setattr(gc, f, v)


# --- interleaving, identity, statistics -----------------------------------------------------------

def interleave(runners: dict[str, Runner], repeats: int, warmup: bool = True,
               on_run: Callable[[str, int, RunResult], None] | None = None) -> dict[str, list[RunResult]]:
    """Run every side once untimed (if ``warmup``), then ``repeats`` rounds of all sides, alternating
    the order each round (A B C, C B A, ...). Returns the measured runs per side, in round order."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    names = list(runners)
    if warmup:
        for name in names:
            runners[name]()
    results: dict[str, list[RunResult]] = {name: [] for name in names}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            res = runners[name]()
            results[name].append(res)
            if on_run is not None:
                on_run(name, r, res)
    return results


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ (length included), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def output_mismatch(sides: dict[str, list[RunResult]]) -> str | None:
    """None when every run of every side produced the same tokens; else where the first one diverged."""
    ref_name, ref_runs = next(iter(sides.items()))
    ref = ref_runs[0].tokens
    for name, runs in sides.items():
        for r, run in enumerate(runs):
            i = first_difference(ref, run.tokens)
            if i is not None:
                a = ref[i] if i < len(ref) else "end"
                b = run.tokens[i] if i < len(run.tokens) else "end"
                return (f"outputs differ: {name} (round {r + 1}) vs {ref_name} (round 1) at new token {i} "
                        f"({b} vs {a}; lengths {len(run.tokens)} vs {len(ref)})")
    return None


@dataclass
class Spread:
    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> "Spread":
        if not values:
            raise ValueError("no values to summarize")
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass
class SideSummary:
    name: str
    tokens_per_s: Spread
    seconds: Spread
    new_tokens: int
    forwards: dict[str, int]
    ms_per_forward: dict[str, float]        # median over runs, per model role
    host_ms_per_token: Spread
    tokens_per_iteration: float | None = None
    acceptance_rate: float | None = None
    other_ms_per_iteration: Spread | None = None   # ours: median of each run's per-iteration median


def summarize(name: str, runs: list[RunResult]) -> SideSummary:
    first = runs[0]
    other = None
    if first.other_ms:
        other = Spread.of([statistics.median(r.other_ms) for r in runs if r.other_ms])
    return SideSummary(
        name=name, tokens_per_s=Spread.of([r.tokens_per_s for r in runs]), seconds=Spread.of([r.seconds for r in runs]),
        new_tokens=len(first.tokens), forwards=dict(first.forwards),
        ms_per_forward={role: statistics.median(1000 * r.forward_s_by_role.get(role, 0.0) / max(1, r.forwards[role])
                                                for r in runs) for role in first.forwards},
        host_ms_per_token=Spread.of([r.host_ms_per_token for r in runs]),
        tokens_per_iteration=len(first.tokens) / first.iterations if first.iterations else None,
        acceptance_rate=(first.accepted / first.drafted) if first.drafted else None,
        other_ms_per_iteration=other)


@dataclass
class Comparison:
    job: str
    label: str
    a: str
    b: str
    prompt: str
    kind: str
    ratio: Spread | None          # per-round tokens/s of a over b; None when refused
    refused: str | None           # why no ratio was reported
    cpu_ratio: Spread | None = None   # the same ratio by CPU time (tokens per CPU-second)


def compare(job: str, label: str, a: str, b: str, prompt: BenchPrompt,
            results: dict[str, list[RunResult]]) -> Comparison:
    """The side-by-side ratio a/b (tokens/s, paired by round), refused unless the outputs are identical."""
    mismatch = output_mismatch({a: results[a], b: results[b]})
    if mismatch is not None:
        return Comparison(job, label, a, b, prompt.name, prompt.kind, None, mismatch)
    pairs = list(zip(results[a], results[b]))
    ratios = [ra.tokens_per_s / rb.tokens_per_s for ra, rb in pairs]
    cpu = [rb.cpu_seconds / ra.cpu_seconds for ra, rb in pairs if ra.cpu_seconds > 0 and rb.cpu_seconds > 0]
    return Comparison(job, label, a, b, prompt.name, prompt.kind, Spread.of(ratios), None,
                      Spread.of(cpu) if cpu else None)


@dataclass
class Aggregate:
    job: str
    label: str
    kind: str                     # "all", "extractive" or "open-ended"
    ratio: float | None           # geometric mean of the per-prompt median ratios
    lo: float | None              # min / max over every paired round of those prompts
    hi: float | None
    prompts: int
    refused: int
    goal: str = ""                # e.g. ">= 1.10"
    met: bool | None = None
    cpu_ratio: float | None = None  # geometric mean of the per-prompt median CPU-time ratios


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def aggregate(comparisons: list[Comparison], job: str, label: str, kind: str = "all",
              at_least: float | None = None) -> Aggregate:
    rows = [c for c in comparisons if c.job == job and c.label == label and kind in ("all", c.kind)]
    ok = [c for c in rows if c.ratio is not None]
    agg = Aggregate(job, label, kind, None, None, None, len(rows), len(rows) - len(ok))
    if ok:
        agg.ratio = geomean([c.ratio.median for c in ok])
        agg.lo = min(c.ratio.min for c in ok)
        agg.hi = max(c.ratio.max for c in ok)
        cpu = [c.cpu_ratio.median for c in ok if c.cpu_ratio is not None]
        agg.cpu_ratio = geomean(cpu) if len(cpu) == len(ok) else None
    if at_least is not None:
        agg.goal = f">= {at_least:.2f}"
        agg.met = None if agg.ratio is None else agg.ratio >= at_least
    return agg


# --- in-process drafts ----------------------------------------------------------------------------

def early_exit_draft(target: torch.nn.Module, n_layers: int) -> torch.nn.Module:
    """A draft made of the target's first ``n_layers`` decoder layers + its final norm and LM head,
    sharing the weights (no copy). A real model of realistic shape whose cost ratio c is about
    n_layers / layers, built without any download. Works for Llama-style models (model.layers)."""
    inner = getattr(target, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(target, "lm_head"):
        raise ValueError("early_exit_draft needs a Llama-style causal LM (model.layers, model.norm, lm_head)")
    if not 1 <= n_layers < len(layers):
        raise ValueError(f"n_layers must be between 1 and {len(layers) - 1}, got {n_layers}")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types)[:n_layers]
    with torch.device("meta"):
        draft = type(target)(cfg)
    draft.model.embed_tokens = inner.embed_tokens
    draft.model.layers = torch.nn.ModuleList(list(layers[:n_layers]))
    draft.model.norm = inner.norm
    draft.model.rotary_emb = inner.rotary_emb
    draft.lm_head = target.lm_head
    leftovers = [n for n, t in list(draft.named_parameters()) + list(draft.named_buffers()) if t.is_meta]
    if leftovers:
        raise ValueError(f"early_exit_draft: unshared tensors left on 'meta': {leftovers[:3]}")
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.eval()


def tiny_realistic_pair(vocab_size: int, seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Random-weight Llama target (12 layers, hidden 256, GQA 4/2 heads) over the real vocabulary, and an
    early-exit draft of its first 2 layers: the shape of a real pair (c ~ 0.2 before the shared head),
    small enough to make per-iteration host overhead, not matrix math, the thing being measured."""
    from transformers import LlamaConfig, LlamaForCausalLM
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=768, num_hidden_layers=12,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                          tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
        target = LlamaForCausalLM(cfg).eval()
    finally:
        torch.random.set_rng_state(gen_state)
    return target, early_exit_draft(target, 2)


# --- the benchmark --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchSettings:
    prompts: tuple[str, ...]
    repeats: int
    max_new_tokens: int
    ngram_k: int = NGRAM_K
    draft_k: int = DRAFT_K
    pairs: tuple[str, ...] = ("self", "tiny")
    early_exit_layers: int = EARLY_EXIT_LAYERS
    threads: int | None = None
    device: str = "cpu"
    dtype: str = "float32"     # float32 keeps greedy outputs comparable token for token


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
    from .drafters import NGramDrafter
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
    return Group("bundled", runners, comps)


def _draft_sides(pair: str, target: torch.nn.Module, draft: torch.nn.Module, tokenizer: Any, ids: list[int],
                 s: BenchSettings) -> dict[str, Runner]:
    from .drafters import ModelDrafter
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    n = s.max_new_tokens
    roles = {"target": target, "draft": draft}
    return {
        f"ours draft[{pair}]": ours_speculative(target, lambda: ModelDrafter(draft), ids,
                                                SpecConfig(k=s.draft_k, max_new_tokens=n), tokenizer, roles),
        f"ours draft[{pair}] min-trace": ours_speculative(
            target, lambda: ModelDrafter(draft), ids, SpecConfig(k=s.draft_k, max_new_tokens=n, full_trace=False),
            tokenizer, roles),
        f"hf assisted[{pair}]": hf_generate(target, ids, n, eos, roles, assistant_model=draft,
                                            num_assistant_tokens=s.draft_k, num_assistant_tokens_schedule="constant",
                                            assistant_confidence_threshold=0.0),
    }


def _draft_comparisons(pair: str, ours_base: str, hf_base: str) -> list[tuple[str, str, str, str]]:
    job = f"draft[{pair}]"
    return [(job, "ours vs transformers (assisted)", f"ours draft[{pair}]", f"hf assisted[{pair}]"),
            (job, "ours: speedup vs ours target-only", f"ours draft[{pair}]", ours_base),
            (job, "transformers: speedup vs plain generate", f"hf assisted[{pair}]", hf_base),
            (job, "full trace vs minimal trace", f"ours draft[{pair}]", f"ours draft[{pair}] min-trace")]


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


TARGETS: tuple[tuple[str, str, str, float], ...] = (
    # (job, label, prompt kind, minimum ratio)
    ("ngram", "ours vs transformers (prompt lookup)", "all", 1.10),
    ("draft[self]", "ours vs transformers (assisted)", "all", 1.05),
    ("draft[early-exit]", "ours vs transformers (assisted)", "all", 1.05),
    ("ngram", "full trace vs minimal trace", "all", 0.95),
    ("draft[self]", "full trace vs minimal trace", "all", 0.95),
    ("draft[early-exit]", "full trace vs minimal trace", "all", 0.95),
    ("ngram", "ours: speedup vs ours target-only", "extractive", 3.5),
)


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
    from .engine import warm_up
    from .models import encode_prompt, load_bundled_model
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
    tiny = None
    if "tiny" in s.pairs:
        tiny = tuple(m.to(device=s.device, dtype=getattr(torch, s.dtype)) for m in tiny_realistic_pair(len(tok)))
    warm_up(target, *([tiny[0], tiny[1]] if tiny else []))
    rows: list[dict] = []
    comparisons: list[Comparison] = []
    warmed: set[str] = set()
    by_name = {p.name: p for p in PROMPTS}
    for name in s.prompts:
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
    bad_pairs = [p for p in s.pairs if p not in ("self", "early-exit", "tiny")]
    if bad_pairs:
        raise ValueError(f"unknown pair(s) {bad_pairs}; choose from self, early-exit, tiny")
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


def side_rows(prompt: BenchPrompt, group: str, prompt_tokens: int, results: dict[str, list[RunResult]]) -> list[dict]:
    """One JSON row per side: the summary plus every measured run."""
    return [{"prompt": prompt.name, "kind": prompt.kind, "group": group, "prompt_tokens": prompt_tokens,
             **asdict(summarize(side, runs)),
             "runs": [{"seconds": r.seconds, "tokens_per_s": r.tokens_per_s, "forward_s": r.forward_s,
                       "cpu_seconds": r.cpu_seconds, "others_cores": r.others_cores,
                       "new_tokens": len(r.tokens)} for r in runs]}
            for side, runs in results.items()]


def make_report(s: BenchSettings, machine: dict, started: str, rows: list[dict],
                comparisons: list[Comparison]) -> dict:
    return {"settings": asdict(s), "machine": machine, "started": started,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "load_average_end": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "command": "python -m specdec_core.bench " + " ".join(sys.argv[1:]),
            "sides": rows, "comparisons": [asdict(c) for c in comparisons],
            "aggregates": [asdict(a) for a in _aggregates(comparisons)]}


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


# --- report ---------------------------------------------------------------------------------------

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
           f"Settings: greedy, {s.get('dtype', 'float32')} on {s.get('device', 'cpu')}; "
           f"max_new_tokens={s['max_new_tokens']}, n-gram K={s['ngram_k']}, "
           f"draft K={s['draft_k']} (pairs: {', '.join(s['pairs']) or 'none'}), {s['repeats']} measured rounds "
           f"per prompt after one warm-up round"
           + (f"; early-exit draft = first {s['early_exit_layers']} layers of the bundled model" if "early-exit"
              in s["pairs"] else "") + ".",
           f"Command: `{report['command'].strip()}`", ""]
    out += ["Ratios, tokens/s of A over B: geometric mean over prompts of each prompt's median per-round ratio, "
            "[min–max] over all rounds; reported only where both sides' outputs were token-for-token identical "
            "in every round. Tracing overhead = 1 − (full trace / minimal trace). The last column is the same "
            "ratio by this process's CPU time (tokens per CPU-second), steadier when the machine is shared.", "",
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
    return f"{a['ratio']:.2f}x [{a['lo']:.2f}–{a['hi']:.2f}]{refused}"


def write_json(report: dict, path: str) -> None:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


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


# --- command line ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench",
                                 description="Interleaved, output-checked benchmark of this engine against "
                                             "transformers' prompt lookup and assisted generation.")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 prompts, 32 new tokens, 2 rounds")
    ap.add_argument("--json", metavar="PATH", default="bench-results/bench.json",
                    help="where to write the JSON results (default: bench-results/bench.json)")
    ap.add_argument("--repeats", type=int, default=None, help="measured rounds per prompt (default 3; quick 2)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 96; quick 32")
    ap.add_argument("--prompts", default=None,
                    help=f"comma-separated subset of: {', '.join(p.name for p in PROMPTS)}")
    ap.add_argument("--pairs", default="self,tiny",
                    help="model-draft pairs, comma-separated ('' for none): self (the bundled model drafting for "
                         "itself), tiny (random-weight 12-layer target, 2-layer early-exit draft), early-exit "
                         "(the bundled model's first --early-exit-layers layers; off by default: its acceptance "
                         "is only a few percent)")
    ap.add_argument("--ngram-k", type=int, default=NGRAM_K)
    ap.add_argument("--draft-k", type=int, default=DRAFT_K)
    ap.add_argument("--early-exit-layers", type=int, default=EARLY_EXIT_LAYERS)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda or mps")
    ap.add_argument("--dtype", default="float32",
                    help="float32 (default; greedy outputs then match token for token), bfloat16 or float16 "
                         "(batched and 1-token forwards may then differ in the last bits: ratios get refused)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one n-gram run of each side with torch.profiler and print the top ops")
    return ap


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    prompts = tuple(p.strip() for p in args.prompts.split(",") if p.strip()) if args.prompts else (
        QUICK_PROMPTS if args.quick else tuple(p.name for p in PROMPTS))
    s = BenchSettings(
        prompts=prompts, repeats=args.repeats if args.repeats is not None else (2 if args.quick else 3),
        max_new_tokens=args.max_new_tokens if args.max_new_tokens is not None else (32 if args.quick else 96),
        ngram_k=args.ngram_k, draft_k=args.draft_k, pairs=tuple(p.strip() for p in args.pairs.split(",") if p.strip()),
        early_exit_layers=args.early_exit_layers, threads=args.threads, device=args.device, dtype=args.dtype)
    validate_settings(s)
    return s


def profile_section(target: torch.nn.Module, tokenizer: Any, s: BenchSettings) -> str:
    """torch.profiler over one run of each n-gram and self-draft side, on the first prompt."""
    from .drafters import ModelDrafter, NGramDrafter
    from .models import encode_prompt
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


def main(argv: list[str] | None = None) -> int:
    from transformers.utils import logging as hf_logging
    args = build_parser().parse_args(argv)
    try:
        s = settings_from_args(args)
        hf_logging.set_verbosity_error()
        report = run_benchmark(s, log=lambda msg: print(msg, file=sys.stderr, flush=True), profile=args.profile)
        text = render_report(report)
        report["markdown"] = text
        write_json(report, args.json)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    print(f"\nJSON written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
