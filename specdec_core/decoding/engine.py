"""The speculative decoding loop, traced and timed like the target-only baseline (``baseline``).

One iteration, in order:
 0. K      - the K policy chooses how many drafts to ask for (or, for a tree, how many nodes and how deep);
 1. draft  - the drafter proposes up to K tokens and the q each was drawn from;
 2. target - ONE target forward over the unseen tokens (last token + drafts) gives K+1 rows of logits
             (and, for a feature-reading drafter, the target's last hidden states at those positions);
 3. verify - ``verify.verify``: accept draft i iff u_i < alpha_i = min(1, p_i(x_i) / q_i(x_i)), left to
             right; on the first rejection sample from norm(max(0, p - q)), else a bonus from p_{K+1}
             (greedy: keep the drafts that agree with the target's argmax, then emit the argmax); with
             ``SpecConfig(sampler="coupled")`` ``coupled_verify.verify_coupled``: accept draft i iff it equals the
             target's sample y_i = argmax(p_i / E_i) with noise keyed by (seed, absolute position), emit y
             where they stop (the drafts were drawn with the same noise: ``DraftPolicy.draw``);
 4. rollback - crop both KV caches to the accepted prefix (the drafter absorbs the new token next time);
 5. record - append the iteration to the trace (``record``); the streaming form yields here.
With ``SpecConfig.tree_nodes`` > 0 and a drafter that drafts token trees (``propose_tree``), steps 1-4 draft a
tree, verify all its nodes in ONE target forward with a tree attention mask and keep the accepted path
(``tree_step``, ``tree_verify``); 0 nodes (the default) is the chain above, traced exactly as before.
Step 0 reads no clock: the cost-aware policy's prices are fixed before the run (``prices``; recorded in the
trace as ``calibration``, and given back as ``prices=`` they replay its K choices), so a run is a function of
its settings, its seed, the models' numerics and those prices, whatever the machine's load.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..config import SpecConfig
from ..sampling.coupled import make_sampler
from ..drafters.base import DraftPolicy, Proposal, outlook_of
from ..policy.kpolicy import make_k_policy
from ..policy.roofline import shape_meta
from ..sampling import Warping
from ..timing import now_ms
from ..trace import Trace
from .coupled_verify import verify_coupled
from .prices import run_prices
from .proposal_check import checked_proposal
from .record import (RunningText, Step, add_iteration, cut_at_eos, finish_reason, new_records, timed_iteration,
    token_texts)
from .run_state import RunState
from .target import TargetModel, _resolve_eos, as_drafter, normalize_input_ids
from .tree_step import tree_step
from .verify import verify


def stream_speculative(target: torch.nn.Module, draft: Any, input_ids: Any, cfg: SpecConfig,
                       tokenizer: Any = None, eos_token_id: int | None = None, *,
                       bugs: InjectedBugs = NO_BUGS, prompt: str = "",
                       meta: dict | None = None, prices: Any = None) -> Iterator[Trace]:
    """Speculative decoding, yielding the same (growing) Trace after every iteration.
    Closing the generator early leaves a consistent trace of what was produced. ``prices`` (a
    ``calibration.Prices`` or a trace's ``calibration`` dict) price the cost-aware policy instead of this
    process's calibration: a recorded run's K choices, replayed."""
    ids = normalize_input_ids(input_ids)
    r = _set_up(target, draft, ids, cfg, tokenizer, eos_token_id, bugs, prompt, meta, prices)
    trace, tgt, device, prompt_len = r.trace, r.tgt, r.tgt.device, len(ids)
    t_run = now_ms(device)
    _prefill(r, ids)
    trace.stats.prefill_ms = now_ms(device) - t_run
    done = ""
    try:
        while True:
            # 0. how many drafts, or tree nodes and depth (kpolicy), priced with what the drafter tells for free
            nodes, k, k_reason = _choose(r, cfg.max_new_tokens - (len(ids) - prompt_len) - 1, ids)
            t_iter = now_ms(device)
            r.sampler.start_iteration(len(trace.iterations), len(ids))
            # 1-4: draft, ONE target forward, verify, keep the accepted prefix (_chain_step, or tree_step)
            step = (tree_step(r, ids, nodes, k, r.tree_top_k, bugs, target, cfg.full_trace) if nodes
                    else _chain_step(r, ids, k, bugs, target, cfg.full_trace))
            # 5. record
            t_end = now_ms(device)
            it = timed_iteration(trace, step, start_len=len(ids), k=nodes or k, k_reason=k_reason, t_iter=t_iter,
                                 t_run=t_run, t_end=t_end)
            add_iteration(trace, it, step.n_accepted, step.prop.forwards, tgt.forwards, t_end - t_run)
            r.k_policy.observe(it)
            ids = ids + step.emitted
            done = finish_reason(step.emitted, r.eos, len(ids) - prompt_len, cfg.max_new_tokens)
            if done:
                trace.finish_reason = done
                trace.text = r.running_text.final(trace.new_token_ids)
            elif cfg.full_trace:   # the text as it grows (else decoded once, at the end)
                trace.text = r.running_text.update(trace.new_token_ids)
            t_yield = now_ms(device)
            yield trace
            t_run += now_ms(device) - t_yield  # time the consumer held the generator is not generation time
            if done:
                return
    finally:   # closed early (or failed): the text of what was produced
        if not done:
            trace.text = r.running_text.final(trace.new_token_ids)


def _chain_step(r: RunState, ids: list[int], k: int, bugs: InjectedBugs, target: torch.nn.Module,
                show: bool) -> Step:
    """Steps 1-4 for a chain of up to k drafts (the module docstring)."""
    tgt, drafter, device = r.tgt, r.drafter, r.tgt.device
    # 1. draft (checked: a proposal that breaks the protocol is refused)
    prop = checked_proposal(drafter, ids, k, r.policy.at(len(ids)), target, device) if k > 0 else Proposal([], None)
    # 2. one target forward over [unseen tokens] + drafts -> n + 1 rows of logits
    t_v = now_ms(device)
    logits = tgt.forward(ids, prop.tokens, logits_to_keep=len(prop.tokens) + 1)
    verify_ms = now_ms(device) - t_v
    if r.reads_features:   # the drafter keeps what survives the rollback in step 4
        drafter.observe_features(tgt.features_from, tgt.features)
    # 3. verify: accept / reject left to right, then the resampled or bonus token (coupled: the target's own sample)
    noise = r.noise_from(len(ids), logits.shape[-1])
    verdict = (verify(logits, prop, r.warping, r.gen, bugs, show=show) if noise is None
               else verify_coupled(logits, prop, r.warping, noise, bugs, show=show))
    emitted = cut_at_eos(verdict.emitted, r.eos)
    # 4. rollback both caches to the accepted prefix (at least one token stays unseen)
    valid = min(len(ids) + verdict.n_accepted, len(ids) + len(emitted) - 1)
    tgt.rollback(valid)
    drafter.rollback(valid)
    drafts, resampled, bonus = new_records(verdict, prop.tokens, emitted, r.text, show)
    return Step(prop=prop, verify_ms=verify_ms, n_accepted=verdict.n_accepted, emitted=emitted, drafts=drafts,
                resampled=resampled, bonus=bonus)


def _set_up(target: torch.nn.Module, draft: Any, ids: list[int], cfg: SpecConfig, tokenizer: Any,
            eos_token_id: int | None, bugs: InjectedBugs, prompt: str, meta: dict | None,
            prices: Any = None) -> RunState:
    drafter = as_drafter(draft, target)
    eos = _resolve_eos(eos_token_id, tokenizer)
    reads_features = bool(getattr(drafter, "reads_features", False))
    tgt = TargetModel(target, keep_features=reads_features)
    gen = torch.Generator(device=tgt.device).manual_seed(cfg.seed)
    sampler = make_sampler(cfg.sampler, cfg.seed, gen, bugs)
    policy = DraftPolicy(cfg.temperature, cfg.top_k, cfg.top_p, gen, eos, bugs, raw_probs=cfg.full_trace,
                         confidence_stop=cfg.confidence_stop, sampler=sampler)
    trace = Trace(config={**cfg.trace_dict(), "drafter": getattr(drafter, "name", type(drafter).__name__),
                          "device": str(tgt.device),
                          "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
                          **shape_meta(target, drafter), **(meta or {})},
                  prompt=prompt, prompt_ids=list(ids))
    if cfg.k_policy == "cost" and prices is None:   # measured once per process, before the clock starts
        prices = run_prices(cfg, target, drafter, speculative_generate)
    k_policy = make_k_policy(cfg, target, drafter, prices)
    trace.calibration = k_policy.calibration
    return RunState(drafter=drafter, tgt=tgt, gen=gen, policy=policy,
                    warping=Warping(cfg.temperature, cfg.top_k, cfg.top_p), k_policy=k_policy,
                    outlook=outlook_of(drafter), tree_nodes=cfg.tree_nodes if hasattr(drafter, "propose_tree") else 0,
                    tree_top_k=cfg.tree_top_k, eos=eos, reads_features=reads_features, trace=trace,
                    text=token_texts(tokenizer), running_text=RunningText(tokenizer), sampler=sampler)


def _choose(r: RunState, max_k: int, ids: list[int]) -> tuple[int, int, str]:
    """(tree nodes, K or the tree's depth cap, the one-line reason); 0 nodes = a chain of K drafts. A tree only
    when one is asked for and the drafter can draft one; its size from the K policy where it prices trees."""
    outlook = r.outlook(ids, r.eos) if r.outlook else None
    choose_tree = getattr(r.k_policy, "choose_tree", None)
    if r.tree_nodes and choose_tree is not None:
        nodes, depth, reason = choose_tree(max_k, r.tree_nodes, r.tree_top_k, outlook)
        return (nodes if depth > 0 else 0), depth, reason
    k, reason = r.k_policy.choose(max_k, outlook)
    return (r.tree_nodes if k > 0 else 0), k, reason


def _prefill(r: RunState, ids: list[int]) -> None:
    """Both caches get all but the last prompt token (the first iteration feeds that one)."""
    st = r.trace.stats
    st.draft_forwards += r.drafter.start(ids)
    if len(ids) > 1:
        r.tgt.forward(ids[:-1])
        if r.reads_features:
            r.drafter.observe_features(r.tgt.features_from, r.tgt.features)
    st.target_forwards = r.tgt.forwards


def speculative_generate(target: torch.nn.Module, draft: Any, input_ids: Any, cfg: SpecConfig,
                         tokenizer: Any = None, eos_token_id: int | None = None, *,
                         bugs: InjectedBugs = NO_BUGS, prompt: str = "", meta: dict | None = None,
                         on_iteration: Callable[[Trace], None] | None = None, prices: Any = None) -> Trace:
    """Run speculative decoding to the end and return the Trace (``on_iteration`` sees it grow; ``prices``:
    see ``stream_speculative``)."""
    trace = None
    for trace in stream_speculative(target, draft, input_ids, cfg, tokenizer, eos_token_id,
                                    bugs=bugs, prompt=prompt, meta=meta, prices=prices):
        if on_iteration is not None:
            on_iteration(trace)
    assert trace is not None
    return trace
