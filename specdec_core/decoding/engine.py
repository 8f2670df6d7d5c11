"""The speculative decoding loop and the target-only baseline, both traced and timed the same way.

One iteration, in order:
 1. draft   - the drafter proposes up to K tokens and the q each was drawn from;
 2. verify  - ONE target forward over the unseen tokens (last token + drafts) gives K+1 distributions p
              (and, for a feature-reading drafter, the target's last hidden states at those positions);
 3. accept  - left to right, draft i is accepted iff u_i < alpha_i = min(1, p_i(x_i) / q_i(x_i));
 4. fix up  - first rejection: sample from norm(max(0, p - q)); all accepted: bonus from p_{K+1};
 5. rollback - crop both KV caches to the accepted prefix (the drafter absorbs the new token next time);
 6. record  - append the iteration to the trace (the streaming form yields here).
Greedy (temperature 0): accept iff the draft is the target's argmax; on mismatch emit the argmax.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..bugs import NO_BUGS, InjectedBugs
from ..config import SpecConfig
from ..drafters.base import DraftPolicy, Proposal, outlook_of
from ..policy.kpolicy import make_k_policy
from .proposal_check import checked_proposal
from ..sampling import acceptance_probs, point_mass, residual_distribution, sample, warp_logits
from ..timing import now_ms
from ..trace import BonusRecord, DraftRecord, IterationRecord, ResampledRecord, Trace
from .target import TargetModel, _resolve_eos, as_drafter, normalize_input_ids

TOP_N = 10


def _decoder(tokenizer: Any) -> Callable[[int], str]:
    if tokenizer is None:
        return lambda t: ""
    cache: dict[int, str] = {}

    def text(t: int) -> str:
        if t not in cache:
            cache[t] = tokenizer.decode([t])
        return cache[t]
    return text


def _top(probs: torch.Tensor, text: Callable[[int], str], n: int = TOP_N) -> list[list]:
    vals, idx = torch.topk(probs.float(), min(n, probs.shape[-1]))
    return [[i, text(i), v] for v, i in zip(vals.tolist(), idx.tolist()) if v > 0]


def _unwarped(cfg: SpecConfig) -> bool:
    """True when warping is the plain softmax (temperature 1, no top-k, no top-p): warped == unwarped."""
    return cfg.temperature == 1 and cfg.top_k == 0 and cfg.top_p >= 1.0


def _to_host(*parts: torch.Tensor | None) -> list[list[float] | None]:
    """Several small tensors copied to the host in ONE transfer (one device sync): flattened, joined as
    float32 (exact for float32 values and for token ids below 2**24), split again. None stays None."""
    present = [t.reshape(-1).to(torch.float32) for t in parts if t is not None]
    flat = torch.cat(present).tolist() if present else []
    out: list[list[float] | None] = []
    at = 0
    for t in parts:
        if t is None:
            out.append(None)
        else:
            out.append(flat[at:at + t.numel()])
            at += t.numel()
    return out


def _first_rejection(u: list[float], alpha: list[float]) -> int:
    """Index of the first draft with u >= alpha (rejected), or len(alpha) if all are accepted."""
    return next((i for i, (ui, ai) in enumerate(zip(u, alpha)) if ui >= ai), len(alpha))


def _sampled_to_host(tok: torch.Tensor, p_row: torch.Tensor, residual: torch.Tensor | None,
                     top_rows: list[torch.Tensor], text: Callable[[int], str]) -> tuple[int, float, float | None, list]:
    """The sampled token, its p and residual probability, and the top-10 lists of ``top_rows``, in ONE
    transfer. ``p_row`` is p at the position the token was drawn for."""
    tops = [torch.topk(r.float(), min(TOP_N, r.shape[-1])) for r in top_rows]
    host = _to_host(tok, p_row[tok], None if residual is None else residual[tok],
                    *[t.values for t in tops], *[t.indices for t in tops])
    new_tok = int(host[0][0])
    lists = [[[int(i), text(int(i)), v] for v, i in zip(vals, idx) if v > 0]
             for vals, idx in zip(host[3:3 + len(tops)], host[3 + len(tops):])]
    return new_tok, host[1][0], None if host[2] is None else host[2][0], lists or [[], [], []]


def stream_speculative(target: torch.nn.Module, draft: Any, input_ids: Any, cfg: SpecConfig,
                       tokenizer: Any = None, eos_token_id: int | None = None, *,
                       bugs: InjectedBugs = NO_BUGS, prompt: str = "",
                       meta: dict | None = None) -> Iterator[Trace]:
    """Speculative decoding, yielding the same (growing) Trace after every iteration.
    Closing the generator early leaves a consistent trace of what was produced."""
    ids = normalize_input_ids(input_ids)
    drafter = as_drafter(draft, target)
    eos = _resolve_eos(eos_token_id, tokenizer)
    text = _decoder(tokenizer)
    reads_features = bool(getattr(drafter, "reads_features", False))
    outlook_fn = outlook_of(drafter)
    tgt = TargetModel(target, keep_features=reads_features)
    device = tgt.device
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    policy = DraftPolicy(cfg.temperature, cfg.top_k, cfg.top_p, gen, eos, bugs, raw_probs=cfg.full_trace,
                         confidence_stop=cfg.confidence_stop)
    warp = lambda logits: warp_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # noqa: E731
    prompt_len = len(ids)
    trace = Trace(config={**cfg.to_dict(), "drafter": getattr(drafter, "name", type(drafter).__name__),
                          "device": str(device), "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
                          **(meta or {})},
                  prompt=prompt, prompt_ids=list(ids))
    st = trace.stats
    k_policy = make_k_policy(cfg, target, drafter)   # "cost" calibrates here (once per process), before the clock
    trace.calibration = k_policy.calibration

    t_run = now_ms(device)
    # prefill both caches with all but the last prompt token (the first iteration feeds that one)
    st.draft_forwards += drafter.start(ids)
    if prompt_len > 1:
        tgt.forward(ids[:-1])
        if reads_features:
            drafter.observe_features(tgt.features_from, tgt.features)
    st.prefill_ms = now_ms(device) - t_run
    st.target_forwards = tgt.forwards

    while True:
        remaining = cfg.max_new_tokens - (len(ids) - prompt_len)
        outlook = outlook_fn(ids, eos) if outlook_fn else None           # free: e.g. prompt lookup's match
        k_iter, k_reason = k_policy.choose(remaining - 1, outlook)     # 0. how many drafts (kpolicy)
        t_iter = now_ms(device)
        # 1. draft
        prop: Proposal = (checked_proposal(drafter, ids, k_iter, policy, target, device)  # refuses bad proposals
                          if k_iter > 0 else Proposal([], None))
        drafts = prop.tokens
        n = len(drafts)
        # 2. verify: one target forward over [unseen tokens] + drafts -> n+1 distributions
        t_v = now_ms(device)
        logits = tgt.forward(ids, drafts, logits_to_keep=n + 1)          # (n+1, V)
        verify_ms = now_ms(device) - t_v
        if reads_features:   # the drafter keeps what survives the rollback in step 5
            drafter.observe_features(tgt.features_from, tgt.features)
        # 3. accept / reject. Greedy: p is one-hot at the argmax, so p(x) = alpha = [x == argmax] and no
        #    (n+1, V) one-hot is built. Everything the decision and the trace need from this step is copied
        #    to the host in ONE transfer (one device sync per iteration, not one per token).
        d_idx = torch.tensor(drafts, device=device, dtype=torch.long)
        rows = torch.arange(n, device=device)
        q_x = prop.draft_probs[rows, d_idx] if prop.draft_probs is not None else torch.ones(n, device=device)
        p = argmax = u = raw_p = raw_q = None
        if cfg.greedy:
            argmax = logits.argmax(-1)                                     # (n+1,)
            p_x = alpha = (d_idx == argmax[:n]).float()
        else:
            p = warp(logits)                                               # (n+1, V)
            p_x = p[rows, d_idx]
            alpha = acceptance_probs(p_x, q_x)
            u = torch.rand(n, generator=gen, device=device)
        if cfg.full_trace:  # unwarped p(x); at temperature 1 without top-k/top-p the warped p already is it
            raw_p = p_x if (p is not None and _unwarped(cfg)) else logits[:n].float().softmax(-1)[rows, d_idx]
            raw_q = prop.raw_probs[rows, d_idx] if prop.raw_probs is not None else None
        p_list, q_list, a_list, u_list, raw_p_list, raw_q_list, argmax_list = _to_host(
            p_x, q_x, alpha, u, raw_p, raw_q, argmax)
        n_acc = _first_rejection([0.0] * n if u_list is None else u_list, a_list)
        # 4. resample on the first rejection, or bonus when all were accepted
        rejected = n_acc < n
        tops: list[list] = [[], [], []]                                    # residual, p, q top-10 at n_acc
        if cfg.greedy:  # the residual is p itself: the one-hot at the argmax
            new_tok, p_new, res_new = int(argmax_list[n_acc]), 1.0, 1.0
            if rejected and cfg.full_trace:
                one = [[new_tok, text(new_tok), 1.0]]
                tops = [one, one, _top(prop.draft_probs[n_acc], text) if prop.draft_probs is not None
                        else [[drafts[n_acc], text(drafts[n_acc]), 1.0]]]
        else:
            residual = None
            if rejected:
                q_row = prop.draft_probs[n_acc] if prop.draft_probs is not None else point_mass(drafts[n_acc], p.shape[-1], device)
                residual = p[n_acc] if bugs.resample_from_p else residual_distribution(p[n_acc], q_row)
            tok_t = sample(residual if rejected else p[n], gen)
            new_tok, p_new, res_new, tops = _sampled_to_host(
                tok_t, p[n_acc], residual, [residual, p[n_acc], q_row] if (rejected and cfg.full_trace) else [], text)
        emitted = drafts[:n_acc] + [new_tok] if rejected else drafts + ([] if (bugs.drop_bonus and n > 0) else [new_tok])
        if eos is not None and eos in emitted:
            emitted = emitted[: emitted.index(eos) + 1]
        # 5. rollback both caches to the accepted prefix (at least one token stays unseen)
        new_ids = ids + emitted
        valid = min(len(ids) + n_acc, len(new_ids) - 1)
        tgt.rollback(valid)
        drafter.rollback(valid)
        # 6. record
        records = []
        for i, tok in enumerate(drafts):
            tested = i <= n_acc
            records.append(DraftRecord(
                token_id=tok, text=text(tok) if cfg.full_trace else "", q=q_list[i], p=p_list[i], alpha=a_list[i],
                u=u_list[i] if (tested and u_list is not None) else None, accepted=i < n_acc, tested=tested,
                p_raw=None if raw_p_list is None else raw_p_list[i], q_raw=None if raw_q_list is None else raw_q_list[i]))
        resampled = bonus = None
        if rejected:
            if new_tok in emitted:
                resampled = ResampledRecord(
                    token_id=new_tok, text=text(new_tok), p=p_new, position=n_acc, residual_prob=res_new,
                    residual_top=tops[0], p_top=tops[1], q_top=tops[2])
        elif len(emitted) > n:
            bonus = BonusRecord(token_id=new_tok, text=text(new_tok), p=p_new)
        it_end = now_ms(device)
        draft_ms = prop.forward_ms
        busy = sum(draft_ms) + prop.catchup_ms + verify_ms
        trace.iterations.append(IterationRecord(
            index=len(trace.iterations), start_len=len(ids), k=k_iter, drafts=records, resampled=resampled,
            bonus=bonus, emitted=emitted, draft_ms=draft_ms, verify_ms=verify_ms,
            other_ms=max(0.0, it_end - t_iter - busy), t_start_ms=t_iter - t_run,
            k_reason=k_reason, catchup_ms=prop.catchup_ms, draft_stop=prop.stop))
        ids = new_ids
        trace.new_token_ids.extend(emitted)
        st.draft_forwards += prop.forwards
        st.target_forwards = tgt.forwards
        st.drafted += n
        st.accepted += n_acc
        _finish_stats(trace, it_end - t_run)
        k_policy.observe(trace.iterations[-1])
        done = "eos" if (eos is not None and emitted and emitted[-1] == eos) else (
            "length" if len(ids) - prompt_len >= cfg.max_new_tokens else "")
        if done:
            trace.finish_reason = done
        if tokenizer is not None:
            trace.text = tokenizer.decode(trace.new_token_ids)
        t_yield = now_ms(device)
        yield trace
        t_run += now_ms(device) - t_yield  # time the consumer held the generator is not generation time
        if done:
            return


def _finish_stats(trace: Trace, wall_ms: float) -> None:
    st = trace.stats
    st.new_tokens = len(trace.new_token_ids)
    st.iterations = len(trace.iterations)
    st.acceptance_rate = st.accepted / st.drafted if st.drafted else 0.0
    st.mean_tokens_per_iteration = st.new_tokens / st.iterations if st.iterations else 0.0
    st.wall_ms = wall_ms
    st.tokens_per_s = st.new_tokens / (wall_ms / 1000) if wall_ms > 0 else 0.0


def speculative_generate(target: torch.nn.Module, draft: Any, input_ids: Any, cfg: SpecConfig,
                         tokenizer: Any = None, eos_token_id: int | None = None, *,
                         bugs: InjectedBugs = NO_BUGS, prompt: str = "", meta: dict | None = None,
                         on_iteration: Callable[[Trace], None] | None = None) -> Trace:
    """Run speculative decoding to the end and return the Trace (``on_iteration`` sees it grow)."""
    trace = None
    for trace in stream_speculative(target, draft, input_ids, cfg, tokenizer, eos_token_id,
                                    bugs=bugs, prompt=prompt, meta=meta):
        if on_iteration is not None:
            on_iteration(trace)
    assert trace is not None
    return trace
