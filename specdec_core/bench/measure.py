"""Benchmark measurement: one timed run (wall, CPU time, forwards by model role, how busy the rest of
the machine was), the runners for our engine and transformers' generate, interleaved rounds, the
output-identity check that refuses a ratio, and the statistics (medians, min-max, geometric means).
Used by ``bench`` (the command) and ``bench_theory`` (the cost-model sections).
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import SpecConfig
from ..stats.intervals import rounds_interval, verdict


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    kind: str          # "extractive" (the answer copies the prompt) or "open-ended"
    text: str



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
                     tokenizer: Any, meter_modules: dict[str, torch.nn.Module], keep: list | None = None) -> Runner:
    """Our engine as the app runs it (tokenizer given, so the trace carries token texts); ``keep``: a list each
    run's trace is appended to."""
    from ..decoding.engine import speculative_generate

    def run() -> RunResult:
        drafter = make_drafter()
        with ForwardMeter(meter_modules) as meter, Stopwatch(target) as clock:
            trace = speculative_generate(target, drafter, ids, cfg, tokenizer)
        if keep is not None:
            keep.append(trace)
        st = trace.stats
        return _result(list(trace.new_token_ids), clock, meter, iterations=st.iterations, drafted=st.drafted,
                       accepted=st.accepted, other_ms=[it.other_ms for it in trace.iterations])
    return run


def ours_baseline(target: torch.nn.Module, ids: list[int], cfg: SpecConfig, tokenizer: Any,
                  keep: list | None = None) -> Runner:
    """Our target-only decoding; ``keep``: a list each run's ``BaselineResult`` is appended to."""
    from ..decoding.baseline import baseline_generate

    def run() -> RunResult:
        with ForwardMeter({"target": target}) as meter, Stopwatch(target) as clock:
            res = baseline_generate(target, ids, cfg, tokenizer)
        if keep is not None:
            keep.append(res)
        return _result(list(res.new_token_ids), clock, meter)
    return run


def hf_generate(target: torch.nn.Module, ids: list[int], max_new_tokens: int, eos_token_id: int | None,
                meter_modules: dict[str, torch.nn.Module],
                context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                **generate_kwargs: Any) -> Runner:
    """transformers' ``generate``, greedy, with whatever extra kwargs select its assisted modes; ``context``
    is entered around each run (untimed), for a mode that needs set-up (``mtp_peer.mtp_generation``)."""
    device = next(target.parameters()).device
    x = torch.tensor([ids], device=device)
    mask = torch.ones_like(x)

    def run() -> RunResult:
        with context(), ForwardMeter(meter_modules) as meter, _assistant_settings(generate_kwargs), \
                Stopwatch(target) as clock:
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
    ci: list[float] | None = None     # 95 % t interval of the ratio's geometric mean over the rounds (>= 2 rounds)


def compare(job: str, label: str, a: str, b: str, prompt: BenchPrompt,
            results: dict[str, list[RunResult]]) -> Comparison:
    """The side-by-side ratio a/b (tokens/s, paired by round), refused unless the outputs are identical."""
    mismatch = output_mismatch({a: results[a], b: results[b]})
    if mismatch is not None:
        return Comparison(job, label, a, b, prompt.name, prompt.kind, None, mismatch)
    pairs = list(zip(results[a], results[b]))
    ratios = [ra.tokens_per_s / rb.tokens_per_s for ra, rb in pairs]
    cpu = [rb.cpu_seconds / ra.cpu_seconds for ra, rb in pairs if ra.cpu_seconds > 0 and rb.cpu_seconds > 0]
    iv = rounds_interval(ratios)
    return Comparison(job, label, a, b, prompt.name, prompt.kind, Spread.of(ratios), None,
                      Spread.of(cpu) if cpu else None, iv.to_list() if iv else None)


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
    ci: list[float] | None = None   # 95 % t interval of that geometric mean over the prompts (>= 2 prompts)
    verdict: str = ""               # "pays here: …" / "does not pay here: …" / "can't tell yet …" from it


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
        iv = rounds_interval([c.ratio.median for c in ok])
        agg.ci, agg.verdict = (iv.to_list(), verdict(iv)) if iv else (None, "")
    if at_least is not None:
        agg.goal = f">= {at_least:.2f}"
        agg.met = None if agg.ratio is None else agg.ratio >= at_least
    return agg
