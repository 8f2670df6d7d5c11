"""The exactness lab: run the real speculative sampler N times for the next one or two tokens and
test the empirical frequencies against the exact target distribution (computed, not sampled).

Pieces, each usable on its own:
- ``exact_distribution``: p(t1) from one target forward, and for two tokens the joint
  p(t1) * p(t2 | t1) from one batched forward over the most likely first tokens (see its docstring
  for the cap on a large vocabulary);
- ``sample_outcomes``: N independent runs of ``stream_speculative`` (seeds seed .. seed+N-1), each
  stopped as soon as it has emitted the tokens we look at;
- ``compare``: total-variation distance, a chi-square test with small bins pooled, a verdict.

Why runs ask for ``n_tokens + k`` new tokens: the engine clips K so that the bonus still fits, so a
run asked for one token would draft nothing. The first n tokens of a longer run are distributed as
the target's first n tokens, so the prefix is what we test, after the first iteration really drafted.

With ``tree_nodes`` > 0 each run drafts a token tree (where the drafter can) and the test covers the tree's
verification rule too; the ``topk_ratio_rule`` bug verifies its top-k siblings with the p/q ratio instead.
``sampler="coupled"`` tests the coupled rule (``decoding.coupled_verify``) instead of the standard one.

Injected bugs (``specdec_core.bugs``) go through the same engine call; ``bug_notes`` says, for each
switch, whether it can bias this setup at all and why (dropping the bonus never does).
Notation: p = target, q = draft.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..config import DEFAULT_TREE_TOP_K, SpecConfig
from ..decoding.engine import stream_speculative
from ..sampling import warp_logits
from ..stats.power import pooled_chi_square

MAX_RUNS = 20_000
SUPPORT_CAP = 32          # two-token mode: first tokens whose continuation is enumerated
BIASED_P = 1e-3           # p-value below which the lab calls the sampler biased
CLEAN_P = 1e-2            # p-value above which it says "no bias detected"

SETUPS = ("toy", "ngram", "self", "trained", "feature")   # the toy draft, prompt lookup, the target itself, the two trained drafts


@dataclass(frozen=True)
class LabSettings:
    n_tokens: int = 1           # 1: the next token; 2: the next two tokens (joint)
    k: int = 3                  # drafts per iteration
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    n_runs: int = 2000          # independent runs (seeds seed .. seed + n_runs - 1)
    seed: int = 0
    support_cap: int = SUPPORT_CAP
    tree_nodes: int = 0         # > 0: each iteration drafts a token tree of up to this many nodes, depth <= k
    tree_top_k: int = DEFAULT_TREE_TOP_K   # a tree's most children per node
    sampler: str = "standard"   # "standard" (speculative sampling) or "coupled" (drafter-invariant: ``coupling``)

    def __post_init__(self) -> None:
        if self.n_tokens not in (1, 2):
            raise ValueError(f"the lab looks at the next 1 or 2 tokens, got {self.n_tokens}")
        if isinstance(self.n_runs, bool) or not isinstance(self.n_runs, int) or not 1 <= self.n_runs <= MAX_RUNS:
            raise ValueError(f"the number of runs must be an integer between 1 and {MAX_RUNS}, got {self.n_runs!r}")
        if isinstance(self.support_cap, bool) or not isinstance(self.support_cap, int) or self.support_cap < 1:
            raise ValueError(f"support_cap must be a positive integer, got {self.support_cap!r}")
        self.spec_config(0)   # validates k, temperature, top_k, top_p, seed, the tree, the sampler (SpecConfig's words)

    def spec_config(self, i: int) -> SpecConfig:
        """The engine settings of run i: long enough that the first iteration drafts k tokens."""
        return SpecConfig(k=self.k, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                          max_new_tokens=self.n_tokens + self.k, seed=self.seed + i, full_trace=False,
                          tree_nodes=self.tree_nodes, tree_top_k=self.tree_top_k, sampler=self.sampler)


@dataclass
class ExactDistribution:
    """The exact probability of every outcome we enumerate, flattened, plus the mass left out.
    One token: ``probs[t] = p(t)``. Two tokens: ``probs[i * (V + 1) + t2] = p(first[i]) p(t2 | first[i])``,
    column V standing for "generation ended" (the first token was EOS)."""
    n_tokens: int
    vocab_size: int
    probs: np.ndarray                  # float64, flattened as above
    first: list[int]                   # two tokens: the enumerated first tokens (most likely first)
    other_prob: float                  # mass of the outcomes not enumerated (two tokens: other first tokens)
    note: str = ""

    def index(self, outcome: tuple[int, ...]) -> int:
        """Flat index of an outcome, or -1 for the "other" bin."""
        if self.n_tokens == 1:
            return outcome[0]
        pos = self._pos.get(outcome[0], -1)
        if pos < 0:
            return -1
        second = outcome[1] if len(outcome) > 1 else self.vocab_size
        return pos * (self.vocab_size + 1) + second

    def outcome(self, flat: int) -> tuple[int, ...]:
        if self.n_tokens == 1:
            return (flat,)
        i, t2 = divmod(flat, self.vocab_size + 1)
        return (self.first[i],) if t2 == self.vocab_size else (self.first[i], t2)

    def __post_init__(self) -> None:
        self._pos = {t: i for i, t in enumerate(self.first)}


@dataclass
class Outcomes:
    """What N runs of the sampler emitted first, and what their first iterations did."""
    counts: Counter                    # outcome tuple -> runs
    n_runs: int                        # runs completed
    n_requested: int
    elapsed_s: float
    drafted_runs: int = 0              # runs whose first iteration drafted at least one token
    tested: int = 0                    # first-iteration drafts (or tree nodes) that were tested
    accepted: int = 0
    tree_runs: int = 0                 # runs whose first iteration drafted a token tree
    resampled: int = 0                 # first iterations that ended with a token from the residual
    bonus: int = 0                     # first iterations that ended with a bonus token

    @property
    def stopped_early(self) -> bool:
        return self.n_runs < self.n_requested


@dataclass
class Bin:
    texts: list[str]                   # the outcome's token texts (empty for the pooled bin)
    outcome: tuple[int, ...] | None    # None for the pooled "everything else" bin
    exact: float                       # exact probability
    observed: int                      # runs that produced it

    def freq(self, n: int) -> float:
        return self.observed / n if n else 0.0


@dataclass
class Comparison:
    n: int
    tv: float                          # total-variation distance, empirical vs exact
    tv_noise: float                    # typical TV of an exact sampler at this n (normal approximation)
    chi2: float | None
    p_value: float | None              # None when there is nothing to test (a point mass)
    dof: int
    impossible: int                    # runs that produced an outcome of exact probability 0
    verdict: str                       # "biased" | "exact" | "inconclusive"
    message: str
    bins: list[Bin] = field(default_factory=list)   # the largest bins, for the plot


@dataclass
class LabResult:
    settings: LabSettings
    setup: str
    bugs: list[str]                    # names of the injected bugs that were on
    exact: ExactDistribution
    outcomes: Outcomes
    comparison: Comparison
    notes: list[str]                   # why a switch cannot bias this setup, the enumeration cap, ...


# --- the exact distribution ----------------------------------------------------------------------

@torch.inference_mode()
def next_token_probs(model: torch.nn.Module, ids: list[list[int]], temperature: float, top_k: int = 0,
                     top_p: float = 1.0) -> torch.Tensor:
    """Warped next-token distributions (B, V) in float32 after each of B equal-length sequences."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor(ids, device=device), logits_to_keep=1).logits[:, -1]
    return warp_logits(logits, temperature, top_k, top_p).cpu()


def exact_distribution(model: torch.nn.Module, ids: list[int], n_tokens: int, temperature: float, top_k: int = 0,
                       top_p: float = 1.0, eos_token_id: int | None = None,
                       support_cap: int = SUPPORT_CAP) -> ExactDistribution:
    """The target's exact distribution of the next ``n_tokens`` (1 or 2), warped as the engine warps.

    Two tokens: p(t2 | t1) is computed for the ``support_cap`` most likely first tokens (all of them
    when the warped support is smaller, e.g. with top-k); the remaining first tokens are one pooled
    "other" outcome whose exact mass 1 - sum p(t1) is known, so the test stays exact."""
    if n_tokens not in (1, 2):
        raise ValueError(f"n_tokens must be 1 or 2, got {n_tokens}")
    p1 = next_token_probs(model, [ids], temperature, top_k, top_p)[0].double()
    vocab = p1.shape[0]
    if n_tokens == 1:
        return ExactDistribution(1, vocab, p1.numpy(), [], 0.0,
                                 f"exact p(t) over all {vocab} tokens, from one target forward")
    support = int((p1 > 0).sum())
    m = min(support, support_cap)
    first = torch.topk(p1, m).indices.tolist()
    rows = torch.zeros(m, vocab + 1, dtype=torch.float64)
    live = [i for i, t in enumerate(first) if t != eos_token_id]
    if live:
        rows[live, :vocab] = next_token_probs(model, [ids + [first[i]] for i in live],
                                              temperature, top_k, top_p).double()
    for i, t in enumerate(first):
        if t == eos_token_id:
            rows[i, vocab] = 1.0          # the run ends after EOS: one outcome "(EOS,)"
    joint = (p1[first].unsqueeze(1) * rows).reshape(-1)
    covered = float(p1[first].sum())
    other = max(0.0, 1.0 - covered)
    if m == support:
        note = f"exact joint p(t1) p(t2 | t1) over all {m} possible first tokens"
    else:
        note = (f"exact joint p(t1) p(t2 | t1) for the {m} most likely of {support} possible first tokens "
                f"({covered:.1%} of the mass); the other first tokens form one bin of exact mass {other:.4f}")
    return ExactDistribution(2, vocab, joint.numpy(), first, other, note)


# --- sampling through the real engine ------------------------------------------------------------

def sample_outcomes(target: torch.nn.Module, draft: Any, ids: list[int], settings: LabSettings,
                    tokenizer: Any = None, bugs: InjectedBugs = NO_BUGS,
                    on_progress: Callable[[int, int], None] | None = None,
                    time_budget_s: float | None = None) -> Outcomes:
    """Run ``stream_speculative`` ``settings.n_runs`` times (stopping each run once it has emitted
    ``n_tokens``) and count the first ``n_tokens`` emitted. Stops early past ``time_budget_s``."""
    counts: Counter = Counter()
    out = Outcomes(counts, 0, settings.n_runs, 0.0)
    t0 = time.perf_counter()
    every = max(1, settings.n_runs // 100)
    for i in range(settings.n_runs):
        trace = None
        gen = stream_speculative(target, draft, ids, settings.spec_config(i), tokenizer, bugs=bugs)
        try:
            for trace in gen:
                if len(trace.new_token_ids) >= settings.n_tokens:
                    break
        finally:
            gen.close()
        assert trace is not None and trace.iterations
        counts[tuple(trace.new_token_ids[:settings.n_tokens])] += 1
        first = trace.iterations[0]
        if first.tree is not None:
            out.tree_runs += 1
            out.drafted_runs += bool(first.tree.nodes)
            out.tested += sum(n.status != "untested" for n in first.tree.nodes)
        else:
            out.drafted_runs += bool(first.drafts)
            out.tested += sum(d.tested for d in first.drafts)
        out.accepted += sum(d.accepted for d in first.drafts)
        out.resampled += first.resampled is not None
        out.bonus += first.bonus is not None
        out.n_runs = i + 1
        elapsed = time.perf_counter() - t0
        if on_progress is not None and (out.n_runs % every == 0 or out.n_runs == settings.n_runs):
            on_progress(out.n_runs, settings.n_runs)
        if time_budget_s is not None and elapsed > time_budget_s:
            break
    out.elapsed_s = time.perf_counter() - t0
    return out


# --- statistics (the pooled chi-square: stats.power) ---------------------------------------------

def expected_tv_noise(probs: np.ndarray, n: int) -> float:
    """Typical TV distance between an exact sampler's empirical frequencies and the truth at n runs:
    0.5 * sum E|f - p|, with E|f - p| ~ sqrt(2 p (1 - p) / (pi n)) (at most 2p for rare outcomes)."""
    p = probs[probs > 0]
    per_bin = np.minimum(np.sqrt(2 * p * (1 - p) / (math.pi * n)), 2 * p)
    return float(0.5 * per_bin.sum())


def compare(exact: ExactDistribution, outcomes: Outcomes, label: Callable[[tuple[int, ...]], list[str]],
            max_bins: int = 24) -> Comparison:
    """TV distance, pooled chi-square and a plain-language verdict for N sampled outcomes."""
    n = outcomes.n_runs
    if n == 0:
        raise ValueError("no runs completed")
    observed = np.zeros(exact.probs.shape[0], dtype=np.int64)
    other_obs = 0
    for oc, c in outcomes.counts.items():
        j = exact.index(oc)
        if j < 0:
            other_obs += c
        else:
            observed[j] += c
    probs = np.append(exact.probs, exact.other_prob)
    obs_all = np.append(observed, other_obs)
    impossible = int(obs_all[probs <= 0].sum())
    tv = 0.5 * float(np.abs(obs_all / n - probs).sum())
    chi2, p_value, dof = pooled_chi_square(obs_all.astype(float), probs * n)
    noise = expected_tv_noise(probs, n)
    verdict, message = _verdict(n, tv, noise, p_value, impossible)
    return Comparison(n, tv, noise, chi2, p_value, dof, impossible, verdict, message,
                      _plot_bins(exact, observed, other_obs, label, max_bins))


def _verdict(n: int, tv: float, noise: float, p_value: float | None, impossible: int) -> tuple[str, str]:
    if impossible:
        return "biased", (f"Biased: {impossible} of {n} runs produced an outcome the target gives probability 0. "
                          "An exact sampler never does that.")
    if p_value is None:
        return "exact", (f"The target's distribution here is a single outcome, and all {n} runs produced it: "
                         "consistent with exact sampling (there is nothing else to test).")
    stats = f"TV distance {tv:.3f} (sampling noise alone gives about {noise:.3f}), chi-square p = {p_value:.2g}"
    if p_value < BIASED_P:
        return "biased", (f"Biased: the frequencies do not match the target distribution. {stats}: "
                          f"a gap this large would happen by chance less than once in {1 / max(p_value, 1e-300):,.0f} "
                          "tries if the sampler were exact." if p_value > 1e-12 else
                          f"Biased: the frequencies do not match the target distribution. {stats}: far too large "
                          "a gap to be chance.")
    if p_value >= CLEAN_P:
        return "exact", (f"No bias detected at {n:,} runs: the frequencies match the target distribution "
                         f"within sampling noise. {stats}.")
    return "inconclusive", (f"Inconclusive at {n:,} runs ({stats}): run more to decide.")


def _plot_bins(exact: ExactDistribution, observed: np.ndarray, other_obs: int,
               label: Callable[[tuple[int, ...]], list[str]], max_bins: int) -> list[Bin]:
    """The ``max_bins`` outcomes with the most exact or observed mass, then everything else as one bin."""
    n = max(1, int(observed.sum()) + other_obs)
    score = np.maximum(exact.probs, observed / n)
    nz = np.flatnonzero(score > 0)
    top = nz[np.argsort(-score[nz], kind="stable")][:max_bins]
    bins = [Bin(label(exact.outcome(int(j))), exact.outcome(int(j)), float(exact.probs[j]), int(observed[j]))
            for j in top]
    rest_exact = float(exact.probs.sum() - sum(b.exact for b in bins)) + exact.other_prob
    rest_obs = int(observed.sum() - sum(b.observed for b in bins)) + other_obs
    if rest_exact > 1e-12 or rest_obs:
        bins.append(Bin([], None, max(0.0, rest_exact), rest_obs))
    return bins


# --- what each switch can do here ----------------------------------------------------------------

def bug_notes(bugs: InjectedBugs, setup: str, temperature: float, n_tokens: int = 1, k: int = 1,
              tree_nodes: int = 0, sampler: str = "standard") -> list[str]:
    """For each injected bug that is on: can it bias this setup, and why (honest negatives included)."""
    if setup not in SETUPS:
        raise ValueError(f"unknown setup {setup!r}; expected one of {', '.join(SETUPS)}")
    notes = []
    greedy = temperature == 0
    if sampler == "coupled" and not greedy:
        return _coupled_notes(bugs) + _drop_bonus_notes(bugs, n_tokens, k)
    if bugs.coupled_noise_by_iteration:
        notes.append("Noise keyed by iteration: no effect here; it concerns coupled sampling (sampler \"coupled\", "
                     "temperature above 0).")
    if bugs.resample_from_p:
        if greedy:
            notes.append("Resample from p: no effect in greedy mode, where a mismatch emits the target's argmax.")
        elif setup == "self":
            notes.append("Resample from p: no effect here. The target drafting for itself has q = p, so every "
                         "draft is accepted and the residual is never used.")
        else:
            notes.append("Resample from p: after a rejection the replacement comes from p instead of "
                         "norm(max(0, p − q)), so tokens the draft over-proposes get too much mass. Expect a bias.")
    if bugs.greedy_draft_ratio_rule:
        if greedy:
            notes.append("Greedy drafting with the ratio rule: no effect in greedy mode (argmax drafting is the "
                         "correct greedy rule).")
        elif setup == "ngram":
            notes.append("Greedy drafting with the ratio rule: does not apply to prompt lookup, which never "
                         "samples (its q is a point mass).")
        else:
            notes.append("Greedy drafting with the ratio rule: drafts are argmax(q) but accepted with min(1, p/q) "
                         "as if sampled from q, so the draft's favourite token is over-produced. Expect a bias.")
    if bugs.draft_temperature is not None:
        if greedy:
            notes.append("Draft temperature mismatch: no effect in greedy mode.")
        elif setup == "ngram":
            notes.append("Draft temperature mismatch: does not apply to prompt lookup (no distribution to warp).")
        elif bugs.draft_temperature == temperature:
            notes.append("Draft temperature mismatch: the draft temperature equals the run's, so nothing is "
                         "mismatched.")
        else:
            notes.append(f"Draft temperature mismatch: drafts are sampled at temperature {bugs.draft_temperature:g} "
                         f"but tested with q at {temperature:g}, so the q in the ratio is not the q the token came "
                         "from. Expect a bias.")
    if bugs.topk_ratio_rule:
        notes.append(_topk_ratio_note(setup, greedy, tree_nodes))
    return notes + _drop_bonus_notes(bugs, n_tokens, k)


def _coupled_notes(bugs: InjectedBugs) -> list[str]:
    """Under coupled sampling every emitted token is the target's own keyed sample: the standard rule's bugs
    have nothing to act on, the drafting bugs only lower acceptance, and iteration keying breaks invariance
    (not exactness, which is all this lab tests)."""
    notes = []
    if bugs.resample_from_p or bugs.topk_ratio_rule:
        notes.append("Resample from p / the p/q ratio on top-k siblings: no effect under coupled sampling, which "
                     "has no residual and no ratio test (a draft is accepted iff it is the target's own sample).")
    if bugs.greedy_draft_ratio_rule or bugs.draft_temperature is not None:
        notes.append("Greedy drafting / a draft temperature mismatch: under coupled sampling these change only "
                     "which token is drafted; the emitted token is still the target's own sample, so expect "
                     "\"no bias detected\" (and lower acceptance).")
    if bugs.coupled_noise_by_iteration:
        notes.append("Noise keyed by iteration: every position still gets fresh noise, so the output stays exact: "
                     "expect \"no bias detected\". What it breaks is invariance: the text of one seed now depends "
                     "on where iterations were cut (the drafter, K), unlike the coupled target-only run's.")
    return notes


def _drop_bonus_notes(bugs: InjectedBugs, n_tokens: int, k: int) -> list[str]:
    notes = []
    if bugs.drop_bonus:
        notes.append("Drop the bonus token: wastes one token after every clean sweep, but the next token is then "
                     "drawn by an exact procedure (the next iteration), so the distribution stays exact. Expect "
                     "\"no bias detected\": this switch costs speed, not correctness.")
        if k >= n_tokens:
            notes.append(f"With K = {k} and {n_tokens} token(s) examined, a bonus token is never among the examined "
                         "tokens, so the counts equal the correct engine's. To exercise the switch, examine 2 tokens "
                         "with K = 1: after an accepted draft the second token then comes from the next iteration.")
    return notes


def _topk_ratio_note(setup: str, greedy: bool, tree_nodes: int) -> str:
    name = "The p/q ratio on top-k siblings"
    if not tree_nodes:
        return f"{name}: does not apply to a chain; it concerns the siblings of a token tree (set tree nodes > 0)."
    if greedy:
        return f"{name}: no effect in greedy mode, where the tree follows the target's argmax."
    if setup == "ngram":
        return (f"{name}: no effect with prompt lookup. Its siblings are point masses (q = 1 on the token), and "
                "the ratio rule with point masses accepts a child with probability p of it and otherwise removes "
                "it from p: that is exact. Expect \"no bias detected\".")
    return (f"{name}: the tree's siblings are the draft's top candidates, chosen, not drawn from q, yet each is "
            "accepted with min(1, p/q) and rejected into norm(max(0, p − q)) as if it had been drawn. The draft's "
            "favourites are over-produced. Expect a bias.")


def run_exactness(target: torch.nn.Module, draft: Any, ids: list[int], settings: LabSettings, setup: str,
                  tokenizer: Any = None, bugs: InjectedBugs = NO_BUGS,
                  label: Callable[[tuple[int, ...]], list[str]] | None = None,
                  on_progress: Callable[[int, int], None] | None = None,
                  time_budget_s: float | None = None) -> LabResult:
    """The whole experiment: exact distribution, N sampled runs, comparison, notes."""
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    exact = exact_distribution(target, ids, settings.n_tokens, settings.temperature, settings.top_k,
                               settings.top_p, eos, settings.support_cap)
    outcomes = sample_outcomes(target, draft, ids, settings, tokenizer, bugs, on_progress, time_budget_s)
    label = label or outcome_labeler(tokenizer)
    comparison = compare(exact, outcomes, label)
    notes = bug_notes(bugs, setup, settings.temperature, settings.n_tokens, settings.k, settings.tree_nodes,
                      settings.sampler)
    if settings.tree_nodes and outcomes.tree_runs < outcomes.n_runs:
        notes.insert(0, f"Tree nodes = {settings.tree_nodes}, but {outcomes.n_runs - outcomes.tree_runs:,} runs "
                        "drafted a chain: this drafter drafts chains only, or the policy found no tree worth it.")
    if outcomes.drafted_runs == 0:
        notes.insert(0, "The drafter proposed nothing for this prompt, so no draft was ever tested: this run only "
                        "exercised the target's own sampling. Use a prompt that repeats itself (prompt lookup "
                        "needs a match).")
    if outcomes.stopped_early:
        notes.append(f"Stopped after {outcomes.n_runs:,} of {outcomes.n_requested:,} runs (time budget); the test "
                     "uses the runs completed.")
    notes.append(exact.note + ".")
    return LabResult(settings, setup, bugs.names(), exact, outcomes, comparison, notes)


def outcome_labeler(tokenizer: Any) -> Callable[[tuple[int, ...]], list[str]]:
    """Outcome -> its tokens' texts ('#id' without a tokenizer); '⏹' marks a generation that ended (EOS)."""
    eos = getattr(tokenizer, "eos_token_id", None)

    def label(oc: tuple[int, ...]) -> list[str]:
        texts = [tokenizer.decode([t]) if tokenizer is not None else f"#{t}" for t in oc]
        return texts + (["⏹"] if oc and oc[-1] == eos and eos is not None else [])
    return label
