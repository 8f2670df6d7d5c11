"""The Learn tab's runs: small, real runs of the engine on the bundled model (≤ 32 new tokens, seconds on a
2-core CPU), each through the same path as the tab it previews, so they keep the app's limits and locks:

- ``trace_run``: one speculative run (and its baseline) through ``session.run_session``, the Live tab's run
  (its pair, run limits and fair wait for the models);
- ``forward_costs`` / ``verify_curve``: the baseline's forwards and the verify curve, with the model held like
  the teaching tabs do;
- ``exactness``: the Exactness lab's experiment on the toy pair (thousands of runs in seconds);
- ``compare_drafts``: prompt lookup and the two trained drafts, as the Draft comparison tab runs them;
- ``sweep_k``: the K sweep tab's sweep;
- ``batch_sweep``: batches of several sizes with the feature draft, each beside the batched baseline.
Every refusal or failure is a ``gr.Error`` with a message for the page.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specdec_core import InjectedBugs, NGramDrafter, SpecConfig, Trace
from specdec_core.decoding.baseline import baseline_generate
from specdec_core.drafters.model import model_drafter
from specdec_core.drafters.registry import SHIPPED, shipped_draft_for
from specdec_core.policy.calibration import measure_verify_curve
from specdec_core.teaching.lab import LabResult, LabSettings, run_exactness
from specdec_core.teaching.batches import BatchSweep, batch_size_sweep
from specdec_core.teaching.sweeps import Candidate, KSweep, Selection, evaluate_drafts, k_sweep
from specdec_core.teaching.toy import make_toy_pair

from components.serving.inputs import make_config, prompt_ids
from components.serving.messages import page_error
from components.serving.models import get_model, locked
from components.serving.pairs import Pool
from components.serving.session import run_session

MAX_NEW = 32                 # no chapter's run generates more ...
LONGER = 3                   # ... and its longer run (when one run cannot tell) at most this many times as much
LAB_RUNS = 2000              # toy exactness runs: ≈ 1–3 ms each here
LAB_BUDGET_S = 20.0
NGRAM = "prompt lookup"
TOKEN_ONLY = "the token-only draft"
FEATURE = "the feature-reading draft"


def config(k: int, temperature: float, max_new_tokens: int, seed: int = 0, tree_nodes: int = 0,
           sampler: str = "standard") -> SpecConfig:
    """A chapter's settings, checked like the Live tab's (fixed K, no top-k / top-p, no confidence stop;
    ``tree_nodes`` > 0: a token tree of that many nodes, depth <= K, the default children per node; ``sampler``:
    the standard or the coupled rule)."""
    return make_config(k, temperature, 0, 1.0, min(max_new_tokens, MAX_NEW * LONGER), seed, "fixed", 0.0, tree_nodes,
                       sampler=sampler)


def trace_run(pool: Pool, pair: str, prompt: str, cfg: SpecConfig, baseline: bool) -> Trace:
    """One run as the Live tab makes it (``session.run_session``); the finished trace."""
    trace = None
    for event in run_session(pool, pair, prompt, cfg, chat=True, with_baseline=baseline):
        trace = event.trace or trace
    if trace is None:
        raise page_error("The run produced nothing.")
    return trace


def forward_costs(pool: Pool, prompt: str, n_tokens: int = 16, n_max: int = 16,
                  repeats: int = 2) -> tuple[list[float], list[float]]:
    """(ms of each baseline forward for ``n_tokens`` tokens, ms of one forward over n = 1..n_max tokens)."""
    lm = get_model(pool, "bundled")
    ids = prompt_ids(lm, prompt, True, n_tokens)
    with locked(lm):
        base = baseline_generate(lm.model, ids, config(1, 0.0, n_tokens), lm.tokenizer)
        curve = measure_verify_curve(lm.model, n_max, repeats=repeats)
    return list(base.token_ms), list(curve.verify_ms)


def verify_curve(pool: Pool, n_max: int, repeats: int = 2) -> list[float]:
    """ms of one forward over n = 1..n_max new tokens, measured now."""
    lm = get_model(pool, "bundled")
    with locked(lm):
        return list(measure_verify_curve(lm.model, n_max, repeats=repeats).verify_ms)


BUGS: dict[str, InjectedBugs] = {
    "none (the correct sampler)": InjectedBugs(),
    "on a rejection, resample from p instead of norm(max(0, p − q))": InjectedBugs(resample_from_p=True),
    "draft greedily (argmax q), accept with min(1, p/q)": InjectedBugs(greedy_draft_ratio_rule=True),
    "sample the drafts at temperature 2 (the target at 1)": InjectedBugs(draft_temperature=2.0),
    "drop the bonus token": InjectedBugs(drop_bonus=True),
}


def exactness(bug: str, agreement: float = 0.3, seed: int = 0, runs: int = LAB_RUNS) -> LabResult:
    """The Exactness lab on the toy ten-word pair: the next token sampled ``runs`` times, with ``bug``."""
    if bug not in BUGS:
        raise page_error(f"unknown bug {bug!r:.80}")
    pair = make_toy_pair(agreement)
    ids = pair.tokenizer.encode("the cat")
    settings = LabSettings(n_tokens=1, k=3, temperature=1.0, n_runs=runs, seed=seed)
    try:
        return run_exactness(pair.target, pair.draft, ids, settings, "toy", pair.tokenizer, BUGS[bug],
                             time_budget_s=LAB_BUDGET_S * runs / LAB_RUNS)
    except (ValueError, RuntimeError) as e:
        raise page_error(str(e)) from e


def compare_drafts(pool: Pool, prompts: list[str], cfg: SpecConfig) -> Selection:
    """Prompt lookup and the two trained drafts (token-only, feature-reading) on each prompt, each against the
    prompt's baseline."""
    lm = get_model(pool, "bundled")
    cands = [Candidate(NGRAM, NGramDrafter())]
    for key, name in (("trained", TOKEN_ONLY), ("feature", FEATURE)):
        try:
            cands.append(Candidate(name, model_drafter(shipped_draft_for(key, lm.model), name=key)))
        except RuntimeError as e:
            raise page_error(f"{SHIPPED[key]}: {e}") from e
    ids = [prompt_ids(lm, prompt, True, cfg.max_new_tokens) for prompt in prompts]
    with locked(lm):
        try:
            return evaluate_drafts(lm.model, lm.tokenizer, cands, prompts, ids, cfg)
        except ValueError as e:
            raise page_error(str(e)) from e


def sweep_k(pool: Pool, prompt: str, k_max: int, cfg: SpecConfig) -> KSweep:
    """K = 1..k_max with prompt lookup on ``prompt``, side by side with the baseline (the K sweep tab's sweep)."""
    lm = get_model(pool, "bundled")
    ids = prompt_ids(lm, prompt, True, cfg.max_new_tokens)
    with locked(lm):
        try:
            return k_sweep(lm.model, NGramDrafter(), ids, cfg, list(range(1, k_max + 1)), lm.tokenizer)
        except (ValueError, RuntimeError) as e:
            raise page_error(str(e)) from e


def batch_sweep(pool: Pool, prompts: Sequence[str], sizes: Sequence[int], cfg: SpecConfig) -> BatchSweep:
    """Batches of each of ``sizes`` (the first B of ``prompts`` as chat turns, cycled) decoded with the trained
    feature-reading draft and by the batched baseline, side by side (``teaching.batches``)."""
    lm = get_model(pool, "bundled")
    try:
        drafter = model_drafter(shipped_draft_for("feature", lm.model), name="feature")
    except RuntimeError as e:
        raise page_error(f"{SHIPPED['feature']}: {e}") from e
    ids = [prompt_ids(lm, prompt, True, cfg.max_new_tokens) for prompt in prompts]
    with locked(lm):
        try:
            return batch_size_sweep(lm.model, drafter, ids, sizes, cfg, lm.tokenizer, texts=list(prompts))
        except (ValueError, RuntimeError) as e:
            raise page_error(str(e)) from e


class NeedsRun(Exception):
    """A reveal asked for what only its chapter's run provides (the page answers: run the chapter first)."""


def need(memo: Any, key: str) -> Any:
    """What a reveal needs from its chapter's run; ``NeedsRun`` when the run has not been made."""
    if not isinstance(memo, dict) or key not in memo:
        raise NeedsRun(key)
    return memo[key]


__all__ = ["MAX_NEW", "LONGER", "BUGS", "NGRAM", "TOKEN_ONLY", "FEATURE", "config", "trace_run", "forward_costs", "verify_curve", "exactness",
           "compare_drafts", "sweep_k", "batch_sweep", "need", "NeedsRun"]
