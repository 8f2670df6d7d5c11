"""The speculative decoding loop and the target-only baseline, both traced and timed the same way.

One iteration, in order:
 1. draft   - the drafter proposes up to K tokens and the q each was drawn from;
 2. verify  - ONE target forward over the unseen tokens (last token + drafts) gives K+1 distributions p;
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

from .bugs import NO_BUGS, InjectedBugs
from .config import SpecConfig
from .drafters import DraftPolicy, Drafter, ModelDrafter, Proposal
from .sampling import acceptance_probs, first_rejection, point_mass, residual_distribution, sample, warp_logits
from .timing import now_ms
from .trace import (BaselineResult, BonusRecord, DraftRecord, IterationRecord, ResampledRecord, Stats, Trace)

TOP_N = 10


class TargetModel:
    """The target LM with its KV cache; ``forward(ids)`` feeds whatever the cache has not seen."""

    def __init__(self, model: torch.nn.Module) -> None:
        from transformers import DynamicCache
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.cache_len = 0
        self.forwards = 0

    @torch.inference_mode()
    def forward(self, ids: list[int], extra: list[int] = (), logits_to_keep: int = 1) -> torch.Tensor:
        feed = ids[self.cache_len:] + list(extra)
        x = torch.tensor([feed], device=self.device)
        out = self.model(input_ids=x, past_key_values=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        self.cache_len += len(feed)
        self.forwards += 1
        return out.logits[0]                                   # (logits_to_keep, V)

    def rollback(self, valid_len: int) -> None:
        if self.cache_len > valid_len:
            self.cache.crop(valid_len - self.cache_len)
            self.cache_len = valid_len


def normalize_input_ids(input_ids: Any) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2 and input_ids.shape[0] == 1:
            input_ids = input_ids[0]
        if input_ids.dim() != 1:
            raise ValueError(f"input_ids must have shape (n,) or (1, n), got {tuple(input_ids.shape)}")
        input_ids = input_ids.tolist()
    if not isinstance(input_ids, (list, tuple)) or not all(isinstance(t, int) for t in input_ids):
        raise ValueError("input_ids must be a list of ints or a LongTensor")
    if len(input_ids) == 0:
        raise ValueError("the prompt is empty: give at least one token")
    return list(input_ids)


def as_drafter(draft: Any, target: torch.nn.Module) -> Drafter:
    if isinstance(draft, torch.nn.Module):
        draft = ModelDrafter(draft)
    if not isinstance(draft, Drafter):
        raise ValueError(f"draft must be a causal LM or a drafter object, got {type(draft).__name__}")
    vocab = getattr(draft, "vocab_size", None)
    target_vocab = int(target.get_output_embeddings().weight.shape[0])
    if vocab is not None and vocab != target_vocab:
        raise ValueError(f"the draft's vocabulary size ({vocab}) differs from the target's ({target_vocab}): "
                         "speculative decoding needs one shared vocabulary")
    return draft


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


def _resolve_eos(eos_token_id: int | None, tokenizer: Any) -> int | None:
    if eos_token_id is None and tokenizer is not None:
        eos_token_id = getattr(tokenizer, "eos_token_id", None)
    return eos_token_id


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
    tgt = TargetModel(target)
    device = tgt.device
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    policy = DraftPolicy(cfg.temperature, cfg.top_k, cfg.top_p, gen, eos, bugs)
    warp = lambda logits: warp_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # noqa: E731
    prompt_len = len(ids)
    trace = Trace(config={**cfg.to_dict(), "drafter": getattr(drafter, "name", type(drafter).__name__),
                          "device": str(device), "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
                          **(meta or {})},
                  prompt=prompt, prompt_ids=list(ids))
    st = trace.stats

    t_run = now_ms(device)
    # prefill both caches with all but the last prompt token (the first iteration feeds that one)
    if prompt_len > 1:
        tgt.forward(ids[:-1])
    st.draft_forwards += drafter.start(ids)
    st.prefill_ms = now_ms(device) - t_run
    st.target_forwards = tgt.forwards
    k_now = cfg.k

    while True:
        remaining = cfg.max_new_tokens - (len(ids) - prompt_len)
        k_iter = min(k_now, remaining - 1)
        t_iter = now_ms(device)
        # 1. draft
        prop: Proposal = drafter.propose(ids, k_iter, policy) if k_iter > 0 else Proposal([], None)
        drafts = prop.tokens
        n = len(drafts)
        # 2. verify: one target forward over [unseen tokens] + drafts -> n+1 distributions
        t_v = now_ms(device)
        logits = tgt.forward(ids, drafts, logits_to_keep=n + 1)          # (n+1, V)
        verify_ms = now_ms(device) - t_v
        # 3. accept / reject
        p = warp(logits)                                                   # (n+1, V)
        d_idx = torch.tensor(drafts, device=device, dtype=torch.long)
        rows = torch.arange(n, device=device)
        p_x = p[rows, d_idx]
        q_x = prop.draft_probs[rows, d_idx] if prop.draft_probs is not None else torch.ones(n, device=device)
        if cfg.greedy:
            argmax = logits.argmax(-1)
            alpha = (d_idx == argmax[:n]).float()
            u = None
            n_acc = first_rejection(torch.zeros(n, device=device), alpha)
        else:
            alpha = acceptance_probs(p_x, q_x)
            u = torch.rand(n, generator=gen, device=device)
            n_acc = first_rejection(u, alpha)
        # 4. resample on the first rejection, or bonus when all were accepted
        resampled = bonus = None
        if n_acc < n:
            q_row = prop.draft_probs[n_acc] if prop.draft_probs is not None else point_mass(drafts[n_acc], p.shape[-1], device)
            if cfg.greedy:
                residual = p[n_acc]
                new_tok = int(argmax[n_acc])
            else:
                residual = p[n_acc] if bugs.resample_from_p else residual_distribution(p[n_acc], q_row)
                new_tok = int(sample(residual, gen))
            emitted = drafts[:n_acc] + [new_tok]
        else:
            new_tok = int(argmax[n]) if cfg.greedy else int(sample(p[n], gen))
            emitted = drafts + ([] if (bugs.drop_bonus and n > 0) else [new_tok])
        if eos is not None and eos in emitted:
            emitted = emitted[: emitted.index(eos) + 1]
        # 5. rollback both caches to the accepted prefix (at least one token stays unseen)
        new_ids = ids + emitted
        valid = min(len(ids) + n_acc, len(new_ids) - 1)
        tgt.rollback(valid)
        drafter.rollback(valid)
        # 6. record
        p_list, q_list, a_list = p_x.tolist(), q_x.tolist(), alpha.tolist()
        u_list = u.tolist() if u is not None else [None] * n
        records = []
        if cfg.full_trace:
            raw_p = logits[:n].float().softmax(-1)[rows, d_idx].tolist()
            raw_q = (prop.raw_probs[rows, d_idx].tolist() if prop.raw_probs is not None else [None] * n)
        else:
            raw_p, raw_q = [None] * n, [None] * n
        for i, tok in enumerate(drafts):
            tested = i <= n_acc
            records.append(DraftRecord(
                token_id=tok, text=text(tok) if cfg.full_trace else "", q=q_list[i], p=p_list[i], alpha=a_list[i],
                u=u_list[i] if tested else None, accepted=i < n_acc, tested=tested, p_raw=raw_p[i], q_raw=raw_q[i]))
        if n_acc < n:
            if new_tok in emitted:
                resampled = ResampledRecord(
                    token_id=new_tok, text=text(new_tok), p=float(p[n_acc, new_tok]), position=n_acc,
                    residual_prob=float(residual[new_tok]),
                    residual_top=_top(residual, text) if cfg.full_trace else [],
                    p_top=_top(p[n_acc], text) if cfg.full_trace else [],
                    q_top=_top(q_row, text) if cfg.full_trace else [])
        elif len(emitted) > n:
            bonus = BonusRecord(token_id=new_tok, text=text(new_tok), p=float(p[n, new_tok]))
        it_end = now_ms(device)
        draft_ms = prop.forward_ms
        trace.iterations.append(IterationRecord(
            index=len(trace.iterations), start_len=len(ids), k=k_iter, drafts=records, resampled=resampled,
            bonus=bonus, emitted=emitted, draft_ms=draft_ms, verify_ms=verify_ms,
            other_ms=max(0.0, it_end - t_iter - sum(draft_ms) - verify_ms), t_start_ms=t_iter - t_run))
        ids = new_ids
        trace.new_token_ids.extend(emitted)
        st.draft_forwards += prop.forwards
        st.target_forwards = tgt.forwards
        st.drafted += n
        st.accepted += n_acc
        _finish_stats(trace, it_end - t_run)
        if cfg.adaptive_k:
            k_now = min(cfg.k, k_now + 2) if (n_acc == n and n > 0) else max(1, k_now - 1)
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


def stream_baseline(target: torch.nn.Module, input_ids: Any, cfg: SpecConfig, tokenizer: Any = None,
                    eos_token_id: int | None = None) -> Iterator[BaselineResult]:
    """Target-only generation with KV cache, through the same warp/sample functions and timers.
    Yields the growing result after every token."""
    ids = normalize_input_ids(input_ids)
    eos = _resolve_eos(eos_token_id, tokenizer)
    tgt = TargetModel(target)
    device = tgt.device
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    res = BaselineResult(new_token_ids=[], text="", token_ms=[], wall_ms=0.0, tokens_per_s=0.0)
    t_run = now_ms(device)
    if len(ids) > 1:
        tgt.forward(ids[:-1])
    t_prev = t_run
    while True:
        logits = tgt.forward(ids)[-1]
        tok = int(logits.argmax()) if cfg.greedy else int(sample(warp_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p), gen))
        ids = ids + [tok]
        res.new_token_ids.append(tok)
        t = now_ms(device)
        res.token_ms.append(t - t_prev)
        t_prev = t
        res.wall_ms = t - t_run
        res.tokens_per_s = len(res.new_token_ids) / (res.wall_ms / 1000) if res.wall_ms > 0 else 0.0
        res.target_forwards = tgt.forwards
        done = tok == eos or len(res.new_token_ids) >= cfg.max_new_tokens
        if tokenizer is not None and (done or cfg.full_trace):
            res.text = tokenizer.decode(res.new_token_ids)
        t_yield = now_ms(device)
        yield res
        paused = now_ms(device) - t_yield  # time the consumer held the generator is not generation time
        t_run += paused
        t_prev += paused
        if done:
            return


def baseline_generate(target: torch.nn.Module, input_ids: Any, cfg: SpecConfig, tokenizer: Any = None,
                      eos_token_id: int | None = None) -> BaselineResult:
    res = None
    for res in stream_baseline(target, input_ids, cfg, tokenizer, eos_token_id):
        pass
    assert res is not None
    return res


@torch.inference_mode()
def warm_up(*models: torch.nn.Module, n_tokens: int = 8) -> None:
    """A few throw-away forwards so that one-time costs (allocations, kernel selection) are not timed."""
    for m in models:
        dev = next(m.parameters()).device
        x = torch.zeros((1, n_tokens), dtype=torch.long, device=dev)
        m(input_ids=x)
        m(input_ids=x[:, :1])
        now_ms(dev)
