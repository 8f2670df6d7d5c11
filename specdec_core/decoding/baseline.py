"""Target-only generation: the baseline every speedup is measured against, through the same warp/sample
functions, the same KV cache and the same clocks as the speculative loop. With ``SpecConfig(sampler="coupled")``
each token is the Gumbel-max sample with the noise keyed by (seed, its absolute position) (``coupling``): the
token a coupled speculative run with the same seed emits there, whatever its drafter."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any
import torch
from ..config import SpecConfig
from ..sampling.coupled import make_sampler
from ..sampling import warp_logits
from ..timing import now_ms
from ..trace import BaselineResult
from .record import RunningText
from .target import TargetModel, _resolve_eos, normalize_input_ids


def stream_baseline(target: torch.nn.Module, input_ids: Any, cfg: SpecConfig, tokenizer: Any = None,
                    eos_token_id: int | None = None) -> Iterator[BaselineResult]:
    """Target-only generation with KV cache, through the same warp/sample functions and timers.
    Yields the growing result after every token."""
    ids = normalize_input_ids(input_ids)
    eos = _resolve_eos(eos_token_id, tokenizer)
    tgt = TargetModel(target)
    device = tgt.device
    sampler = make_sampler(cfg.sampler, cfg.seed, torch.Generator(device=device).manual_seed(cfg.seed))
    res = BaselineResult(new_token_ids=[], text="", token_ms=[], wall_ms=0.0, tokens_per_s=0.0)
    text = RunningText(tokenizer)
    t_run = now_ms(device)
    if len(ids) > 1:
        tgt.forward(ids[:-1])
    t_prev = t_run
    done = False
    try:
        while True:
            logits = tgt.forward(ids)[-1]
            sampler.start_iteration(len(res.new_token_ids), len(ids))   # one token per "iteration": keeps no noise
            tok = (int(logits.argmax()) if cfg.greedy
                   else int(sampler.draw(warp_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p), len(ids))))
            ids = ids + [tok]
            res.new_token_ids.append(tok)
            t = now_ms(device)
            res.token_ms.append(t - t_prev)
            t_prev = t
            res.wall_ms = t - t_run
            res.tokens_per_s = len(res.new_token_ids) / (res.wall_ms / 1000) if res.wall_ms > 0 else 0.0
            res.target_forwards = tgt.forwards
            done = tok == eos or len(res.new_token_ids) >= cfg.max_new_tokens
            if done:                   # as the speculative loop does: the whole text at the end ...
                res.text = text.final(res.new_token_ids)
            elif cfg.full_trace:       # ... and, for a full trace, as it grows
                res.text = text.update(res.new_token_ids)
            t_yield = now_ms(device)
            yield res
            paused = now_ms(device) - t_yield  # time the consumer held the generator is not generation time
            t_run += paused
            t_prev += paused
            if done:
                return
    finally:   # closed early (or failed): the text of what was produced
        if not done:
            res.text = text.final(res.new_token_ids)


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
