"""Measured sweeps: acceptance vs. agreement on the toy models, K = 1..K_max on a real prompt, and
draft comparison / automatic draft selection. Everything here runs the real engine and reports
what it measured; the closed forms of ``theory`` are only ever drawn next to the measurements.

Cost model of the simulator's speedup table: the toy models cost next to nothing on a CPU, so their
wall clock says nothing about a real deployment. Instead the table counts the forwards the engine
actually ran and prices them: a target forward costs 1, a draft forward costs c, target-only decoding
costs 1 per token. Speedup = new tokens / (target forwards + c * draft forwards), prefill excluded.
Notation: p = target, q = draft.
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import MAX_K, SpecConfig
from ..drafters.model import ModelDrafter, model_drafter
from ..drafters.ngram import NGramDrafter
from ..decoding.target import as_drafter
from ..decoding.baseline import baseline_generate, stream_baseline, warm_up
from ..decoding.engine import speculative_generate, stream_speculative
from ..models.pool import LoadedModel, ModelPool
from ..models.loading import check_tokenizer_compat
from ..policy.hindsight import hindsight_tokens_per_s
from ..decoding.lockstep import run_lockstep
from ..policy.costmodel import Costs, acceptance_profile, costs_from_traces, predicted_tokens_per_s
from ..policy.closed_form import estimate_alpha, speedup
from .toy import ToyPair, make_toy_pair, next_distributions, overlap
from ..trace import BaselineResult, Trace
from ..stats.intervals import Interval, rounds_interval, speedup_interval

Progress = Callable[[int, int], None]
MAX_SWEEP_POINTS = 32


# --- 1. simulator: acceptance vs agreement -------------------------------------------------------

@dataclass
class AgreementPoint:
    agreement: float
    tested: int                  # drafts the target tested
    accepted: int
    measured_alpha: float        # accepted / tested
    exact_alpha: float           # mean over the tested drafts of sum_x min(p, q) in their context
    drafted: int
    iterations: int
    new_tokens: int
    draft_forwards: int          # in the loop (prefill excluded)
    tokens_per_iteration: float


def exact_alphas(pair: ToyPair, trace: Trace) -> list[float]:
    """sum_x min(p(x|prev), q(x|prev)) for every tested draft of a toy run: its acceptance probability
    before the draw (the toy models are bigrams, so the context is the previous token)."""
    cfg = trace.config
    seq = list(trace.prompt_ids) + list(trace.new_token_ids)
    out = []
    for it in trace.iterations:
        for j, d in enumerate(it.drafts):
            if d.tested:
                prev = seq[it.start_len - 1 + j]
                p, q = next_distributions(pair, prev, cfg["temperature"], cfg["top_k"], cfg["top_p"])
                out.append(overlap(p, q))
    return out


def agreement_point(pair: ToyPair, trace: Trace) -> AgreementPoint:
    tested = sum(d.tested for it in trace.iterations for d in it.drafts)
    st = trace.stats
    alphas = exact_alphas(pair, trace)
    return AgreementPoint(
        agreement=pair.agreement, tested=tested, accepted=st.accepted,
        measured_alpha=st.accepted / tested if tested else 0.0,
        exact_alpha=sum(alphas) / len(alphas) if alphas else 0.0, drafted=st.drafted, iterations=st.iterations,
        new_tokens=st.new_tokens, draft_forwards=sum(len(it.draft_ms) for it in trace.iterations),
        tokens_per_iteration=st.mean_tokens_per_iteration)


def acceptance_vs_agreement(agreements: Sequence[float], k: int = 4, temperature: float = 1.0, top_k: int = 0,
                            top_p: float = 1.0, n_tokens: int = 400, seed: int = 0, prompt: str = "the",
                            on_progress: Progress | None = None) -> list[AgreementPoint]:
    """One toy run of ``n_tokens`` per agreement level (same draft noise table throughout)."""
    if not agreements or len(agreements) > MAX_SWEEP_POINTS:
        raise ValueError(f"give between 1 and {MAX_SWEEP_POINTS} agreement levels")
    if temperature == 0:
        raise ValueError("the acceptance sweep needs sampling (temperature > 0): in greedy mode a draft is "
                         "accepted iff it is the target's argmax, and sum min(p, q) does not apply")
    points = []
    for i, a in enumerate(agreements):
        pair = make_toy_pair(a, seed)
        cfg = SpecConfig(k=k, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=n_tokens,
                         seed=seed + i, full_trace=False)
        ids = pair.tokenizer.encode(prompt)
        if not ids:
            raise ValueError("the prompt is empty: give at least one word")
        trace = speculative_generate(pair.target, pair.draft, ids, cfg, pair.tokenizer)
        points.append(agreement_point(pair, trace))
        if on_progress is not None:
            on_progress(i + 1, len(agreements))
    return points


def simulated_speedup(point: AgreementPoint, c: float) -> float:
    """Measured speedup under the cost model: target forward = 1, draft forward = c."""
    cost = point.iterations + c * point.draft_forwards
    return point.new_tokens / cost if cost > 0 else 0.0


def speedup_table(points: Sequence[AgreementPoint], c_values: Sequence[float],
                  k: int) -> tuple[list[str], list[list[str]]]:
    """Rows = agreement levels (with measured and exact alpha), columns = c; each cell
    "measured (closed form)" speedup."""
    headers = ["agreement", "α measured", "α exact"] + [f"c = {c:g}" for c in c_values]
    rows = []
    for pt in points:
        cells = [f"×{simulated_speedup(pt, c):.2f} (×{speedup(min(1.0, pt.exact_alpha), k, c):.2f})"
                 for c in c_values]
        rows.append([f"{pt.agreement:.2f}", f"{pt.measured_alpha:.3f}", f"{pt.exact_alpha:.3f}"] + cells)
    return headers, rows


# --- 2. K sweep ----------------------------------------------------------------------------------

@dataclass
class KRun:
    k: int
    tokens_per_s: float
    acceptance_rate: float       # accepted / drafted (the engine's stat)
    alpha: float | None          # mean min(1, p/q) of the tested drafts
    tokens_per_iteration: float
    drafts_per_iteration: float  # below K when the drafter proposes fewer (prompt lookup without a match)
    new_tokens: int
    wall_ms: float
    target_forwards: int
    draft_forwards: int
    draft_ms: list[float]        # every draft forward (or lookup) of the run
    same_as_baseline: bool | None  # greedy only: identical tokens to the baseline
    speedup: Interval | None = None  # over the sweep's baseline, with its bootstrap interval over iterations


@dataclass
class KSweep:
    drafter: str
    runs: list[KRun]
    baseline_tokens_per_s: float
    baseline_token_ms: float     # mean one-token target forward (first token, with the prefill, excluded)
    alpha: float | None          # pooled over all runs
    c: float | None              # mean draft forward / mean baseline one-token forward
    best_k: int                  # measured
    theory_tokens_per_s: list[float | None] = field(default_factory=list)  # baseline * speedup(alpha, K, c)
    predicted_tokens_per_s: list[float | None] = field(default_factory=list)  # calibrated cost model, per K
    predicted_flat_tokens_per_s: list[float | None] = field(default_factory=list)  # the same, verify made flat
    verify_ms: list[float] = field(default_factory=list)   # the t_verify(n) curve used, n = 1..K_max + 1
    hindsight_tokens_per_s: float | None = None   # greedy prompt lookup: the best K schedule in hindsight, priced
    hindsight_ks: list[int] = field(default_factory=list)  # … and its K per iteration (``hindsight``)
    tree_runs: list[KRun] = field(default_factory=list)   # ``tree_top_k`` > 0: a token tree of N = K nodes per K
                                                          # (depth <= K), the same node budget as the chain

    def theory_k(self) -> int | None:
        """K with the highest closed-form speedup for the measured alpha and c (ties: smallest)."""
        vals = [(t, -r.k) for t, r in zip(self.theory_tokens_per_s, self.runs) if t is not None]
        return -max(vals)[1] if vals else None


def _check_k_values(k_values: Sequence[int]) -> list[int]:
    ks = list(k_values)
    if not ks or len(ks) > MAX_SWEEP_POINTS:
        raise ValueError(f"give between 1 and {MAX_SWEEP_POINTS} values of K")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise ValueError(f"K must be an integer between 1 and {MAX_K}, got {k!r}")
    return ks


def k_sweep(target: torch.nn.Module, draft: Any, ids: list[int], cfg: SpecConfig, k_values: Sequence[int],
            tokenizer: Any = None, on_progress: Progress | None = None, tree_top_k: int = 0) -> KSweep:
    """The baseline and one speculative run per K (same prompt, settings and seed, fixed K), advanced in
    lockstep (``lockstep``: one step at a time, the run that has used the least time first) so that every
    run meets the machine's speed of the same moments: a drafter with ``fresh()`` (all of this project's)
    gives each run its own state; another drafter's runs go one after the other. ``on_progress`` counts
    tokens over all runs. The closed-form curve uses alpha pooled over the runs and c = draft forward time /
    baseline token time; the calibrated curve prices each K with the cost model of ``theory`` (see
    ``calibrated_curves``). ``tree_top_k`` > 0 adds, for each K, a run drafting a token tree of N = K nodes
    (at most ``tree_top_k`` children per node, depth <= K) in the same lockstep: chain vs tree at the same node
    budget (``KSweep.tree_runs``; the pooled α, c and the curves stay the chains')."""
    ks = _check_k_values(k_values)
    models = [target] + ([draft] if isinstance(draft, torch.nn.Module) and draft is not target else [])
    warm_up(*models)
    drafter = as_drafter(draft, target)
    fresh = getattr(drafter, "fresh", None)
    total = (len(ks) * (2 if tree_top_k else 1) + 1) * cfg.max_new_tokens
    streams: dict[str, Iterator[Any]] = {"baseline": stream_baseline(target, ids, cfg, tokenizer)}
    for k in ks:
        run_cfg = SpecConfig(**{**cfg.to_dict(), "k": k, "full_trace": False, "k_policy": "fixed",
                                "adaptive_k": False})
        streams[f"K={k}"] = stream_speculative(target, fresh() if fresh else drafter, ids, run_cfg, tokenizer)
        if tree_top_k:
            tree_cfg = SpecConfig(**{**run_cfg.to_dict(), "tree_nodes": k, "tree_top_k": tree_top_k})
            streams[f"tree N={k}"] = stream_speculative(target, fresh() if fresh else drafter, ids, tree_cfg,
                                                        tokenizer)
    groups = [streams] if fresh else [{name: stream} for name, stream in streams.items()]   # one state: in turn
    out: dict[str, Any] = {}
    for group in groups:
        step = None if on_progress is None else (lambda last: on_progress(_tokens(out) + _tokens(last), total))
        out.update(run_lockstep(group, step))
    if on_progress is not None:
        on_progress(total, total)
    base: BaselineResult = out["baseline"]
    traces: list[Trace] = [out[f"K={k}"] for k in ks]
    runs = [_k_run(k, t, base, cfg.greedy) for k, t in zip(ks, traces)]
    name = traces[-1].config.get("drafter", "")
    alphas = [d.accept_prob for t in traces for it in t.iterations if it.tree is None for d in it.drafts if d.tested]
    alpha = sum(alphas) / len(alphas) if alphas else None
    token_ms = base.token_ms[1:] or base.token_ms
    base_ms = sum(token_ms) / len(token_ms) if token_ms else 0.0
    draft_ms = [ms for r in runs for ms in r.draft_ms]
    c = (sum(draft_ms) / len(draft_ms)) / base_ms if draft_ms and base_ms > 0 else None
    theory = [base.tokens_per_s * speedup(alpha, r.k, c) if alpha is not None and c is not None else None
              for r in runs]
    best = max(runs, key=lambda r: (r.tokens_per_s, -r.k)).k
    sweep = KSweep(name, runs, base.tokens_per_s, base_ms, alpha, c, best, theory)
    if tree_top_k:
        sweep.tree_runs = [_k_run(k, out[f"tree N={k}"], base, cfg.greedy) for k in ks]
    costs = calibrated_curves(sweep, traces, base, target)
    if costs is not None and cfg.greedy:
        best_run = hindsight_tokens_per_s(drafter, ids, base.new_token_ids, max(ks), costs,
                                          getattr(tokenizer, "eos_token_id", None), cfg.max_new_tokens)
        if best_run is not None:
            sweep.hindsight_tokens_per_s, sweep.hindsight_ks = best_run
    return sweep


def _tokens(results: dict[str, Any]) -> int:
    return sum(len(r.new_token_ids) for r in results.values())


def calibrated_curves(sweep: KSweep, traces: Sequence[Trace], base: Any,
                      target: torch.nn.Module | None) -> Costs | None:
    """Fill the sweep's calibrated prediction: one acceptance profile and one set of costs pooled over
    all the runs (verify curve = the runs' own verify times merged with the target's calibration pass,
    timed here if this process has none yet), each K priced for a job of the baseline's length. The
    flat variant gives every verify the cost of a one-token forward (GPU-like). Returns the costs (None
    when the runs have none to read)."""
    from ..policy.calibration import calibrate
    n_max = max(r.k for r in sweep.runs) + 1
    curve = None
    if target is not None:
        try:
            curve = calibrate(target, n_max).verify_ms
        except (ValueError, RuntimeError, TypeError, AttributeError):
            curve = None
    with_base = []
    for t in traces:
        t.baseline = base
        with_base.append(t)
    try:
        costs = costs_from_traces(with_base, curve, n_max)
    except ValueError:
        return None
    prof = acceptance_profile(traces)
    n = len(base.new_token_ids)
    sweep.verify_ms = list(costs.verify_ms)
    sweep.predicted_tokens_per_s = [predicted_tokens_per_s(costs, prof, r.k, n) for r in sweep.runs]
    flat = costs.flat()
    sweep.predicted_flat_tokens_per_s = [predicted_tokens_per_s(flat, prof, r.k, n) for r in sweep.runs]
    return costs


def _k_run(k: int, trace: Trace, base: BaselineResult, greedy: bool) -> KRun:
    st = trace.stats
    same = trace.new_token_ids == base.new_token_ids if greedy else None
    return KRun(k, st.tokens_per_s, st.acceptance_rate, estimate_alpha(trace), st.mean_tokens_per_iteration,
                st.drafted / st.iterations if st.iterations else 0.0, st.new_tokens, st.wall_ms, st.target_forwards, st.draft_forwards,
                [ms for it in trace.iterations for ms in it.draft_ms], same, _against(trace, base))


def _against(trace: Trace, base: BaselineResult) -> Interval | None:
    """The run's speedup over ``base`` with its bootstrap interval (the trace itself is left as it is)."""
    own = trace.baseline
    trace.baseline = base
    try:
        return speedup_interval(trace)
    finally:
        trace.baseline = own


# --- 3. draft comparison and automatic selection ----------------------------------------------------

@dataclass
class Candidate:
    name: str
    draft: Any = None            # a causal LM or a drafter object for the engine
    tokenizer: Any = None        # its own tokenizer, checked against the target's; None = the target's
    error: str | None = None     # building it failed (e.g. the model could not be loaded)


@dataclass
class Rejected:
    name: str
    check: str                   # the check it failed: "vocab size", "special tokens", "tokenization", ...
    message: str


@dataclass
class DraftRun:
    name: str
    prompt_index: int
    tokens_per_s: float
    speedup: float               # tokens/s over the same prompt's baseline tokens/s
    acceptance_rate: float
    alpha: float | None
    tokens_per_iteration: float
    target_forwards: int
    draft_forwards: int
    new_tokens: int
    same_as_baseline: bool | None
    interval: Interval | None = None   # its speedup's bootstrap interval over iterations


@dataclass
class Ranked:
    name: str
    mean_speedup: float
    mean_tokens_per_s: float
    mean_acceptance: float
    mean_target_forwards: float
    mean_draft_forwards: float
    runs: list[DraftRun]

    @property
    def interval(self) -> Interval | None:
        """The speedup over the prompts (each prompt a round: its baseline and this draft back to back) with a
        t interval on the logs; one prompt: that run's bootstrap interval over iterations."""
        if len(self.runs) >= 2:
            return rounds_interval([r.speedup for r in self.runs])
        return self.runs[0].interval if self.runs else None


@dataclass
class Selection:
    prompts: list[str]
    baseline_tokens_per_s: list[float]
    baseline_forwards: list[int]
    ranking: list[Ranked]        # best first, by mean measured speedup
    rejected: list[Rejected]

    @property
    def best(self) -> str | None:
        return self.ranking[0].name if self.ranking else None

    @property
    def mean_baseline_tokens_per_s(self) -> float:
        return statistics.fmean(self.baseline_tokens_per_s) if self.baseline_tokens_per_s else 0.0


def check_candidate(target: torch.nn.Module, target_tokenizer: Any, cand: Candidate) -> Rejected | None:
    """None if the candidate can draft for this target, else the check it failed and why."""
    if cand.error is not None:
        return Rejected(cand.name, "load", cand.error)
    if cand.tokenizer is not None and target_tokenizer is not None:
        try:
            check_tokenizer_compat(target_tokenizer, cand.tokenizer)
        except ValueError as e:
            m = re.search(r"check '([^']+)'", str(e))
            return Rejected(cand.name, m.group(1) if m else "tokenizer", str(e))
    try:
        as_drafter(cand.draft, target)
    except ValueError as e:
        return Rejected(cand.name, "vocab size" if "vocabulary" in str(e) else "drafter", str(e))
    return None


def evaluate_drafts(target: torch.nn.Module, tokenizer: Any, candidates: Sequence[Candidate],
                    prompts: Sequence[str], prompt_ids: Sequence[list[int]], cfg: SpecConfig,
                    on_progress: Progress | None = None) -> Selection:
    """Check every candidate, then run the baseline and each compatible candidate on every prompt
    (same settings and seed) and rank the candidates by mean measured speedup."""
    if not prompt_ids or len(prompt_ids) != len(prompts):
        raise ValueError("give at least one prompt (and its token ids)")
    if not candidates:
        raise ValueError("no candidate drafts to evaluate")
    rejected, ok = [], []
    for cand in candidates:
        r = check_candidate(target, tokenizer, cand)
        (rejected.append(r) if r is not None else ok.append(cand))
    warm_up(target, *[c.draft for c in ok if isinstance(c.draft, torch.nn.Module) and c.draft is not target])
    total = len(prompt_ids) * (1 + len(ok))
    done = 0
    base_tps, base_fw = [], []
    runs: dict[str, list[DraftRun]] = {c.name: [] for c in ok}
    for i, ids in enumerate(prompt_ids):
        base = baseline_generate(target, ids, cfg, tokenizer)
        base_tps.append(base.tokens_per_s)
        base_fw.append(base.target_forwards)
        done += 1
        if on_progress is not None:
            on_progress(done, total)
        for cand in ok:
            trace = speculative_generate(target, cand.draft, ids, SpecConfig(**{**cfg.to_dict(), "full_trace": False}),
                                         tokenizer)
            st = trace.stats
            runs[cand.name].append(DraftRun(
                cand.name, i, st.tokens_per_s, st.tokens_per_s / base.tokens_per_s if base.tokens_per_s else 0.0,
                st.acceptance_rate, estimate_alpha(trace), st.mean_tokens_per_iteration, st.target_forwards,
                st.draft_forwards, st.new_tokens, trace.new_token_ids == base.new_token_ids if cfg.greedy else None,
                _against(trace, base)))
            done += 1
            if on_progress is not None:
                on_progress(done, total)
    ranking = [Ranked(name, statistics.fmean(r.speedup for r in rs), statistics.fmean(r.tokens_per_s for r in rs),
                      statistics.fmean(r.acceptance_rate for r in rs),
                      statistics.fmean(r.target_forwards for r in rs), statistics.fmean(r.draft_forwards for r in rs),
                      rs) for name, rs in runs.items()]
    ranking.sort(key=lambda r: -r.mean_speedup)
    return Selection(list(prompts), base_tps, base_fw, ranking, rejected)


def pool_candidates(pool: ModelPool, target: LoadedModel, include_toy: bool = True) -> list[Candidate]:
    """The drafts available for ``target`` without downloading anything: prompt lookup, the target
    drafting for itself, every other model already loaded in the pool, and (to show the compatibility
    check at work) the toy ten-word model, whose tokenizer cannot match a real one."""
    cands = [Candidate("prompt lookup (n-gram)", NGramDrafter()),
             Candidate("self (the target drafts for itself)", ModelDrafter(target.model, name="self"))]
    if target.key == "bundled":
        from ..drafters.registry import SHIPPED, shipped_draft_for
        from ..drafters.trained import DraftFilesError
        for key, label in SHIPPED.items():
            try:
                cands.append(Candidate(label, model_drafter(shipped_draft_for(key, target.model), name=key)))
            except DraftFilesError as e:
                cands.append(Candidate(label, error=str(e)))
    for key in pool.loaded():
        if key == target.key:
            continue
        try:
            lm = pool.get(key)
        except (RuntimeError, ValueError, OSError) as e:
            cands.append(Candidate(key, error=str(e)))
            continue
        cands.append(Candidate(lm.label, lm.model, lm.tokenizer))
    if include_toy:
        toy = make_toy_pair(0.5)
        cands.append(Candidate("toy 10-word bigram model", toy.draft, toy.tokenizer))
    return cands
