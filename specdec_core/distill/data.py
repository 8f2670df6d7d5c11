"""Training data for the draft: the target answers chat prompts, and we keep what it thought.

For every prompt the target generates a response (batched, KV-cached ``generate``), and at every
response position we keep the target's top-``top_n`` log-probabilities at temperature 1 — the soft
label the draft is distilled towards (KL(p‖q) restricted to the target's top tokens). Batches
alternate between greedy responses (the contexts greedy acceptance is measured on) and sampled ones
(temperature 0.8, top-p 0.95: more varied contexts). Seeded: one seed per batch.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..models import encode_prompt


@dataclass
class Example:
    ids: list[int]               # prompt + response token ids
    prompt_len: int              # response positions are ids[prompt_len:]
    top_ids: torch.Tensor        # (len(ids) - prompt_len, top_n) int32: target's top tokens at each response position
    top_logp: torch.Tensor       # (len(ids) - prompt_len, top_n) float16: their log-probabilities (temperature 1)


@torch.inference_mode()
def generate_batch(target: torch.nn.Module, tokenizer, prompts: list[str], max_new_tokens: int, sampled: bool,
                   seed: int, top_n: int = 32) -> list[Example]:
    """One batch of responses with the target's top-``top_n`` log-probs at every response position."""
    encoded = [encode_prompt(tokenizer, p, chat=True) for p in prompts]
    width = max(len(e) for e in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(encoded):                      # left padding
        ids[i, width - len(e):] = torch.tensor(e)
        mask[i, width - len(e):] = 1
    torch.manual_seed(seed)
    kwargs = dict(do_sample=True, temperature=0.8, top_p=0.95, top_k=0) if sampled else dict(do_sample=False)
    out = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, pad_token_id=pad,
                          eos_token_id=tokenizer.eos_token_id, output_logits=True, return_dict_in_generate=True,
                          **kwargs)
    logits = torch.stack(out.logits, dim=1)              # (B, steps, V) raw logits, before any warping
    logp = torch.log_softmax(logits.float(), dim=-1)
    top_logp, top_ids = torch.topk(logp, top_n, dim=-1)  # (B, steps, top_n)
    new = out.sequences[:, width:]
    examples = []
    for i, e in enumerate(encoded):
        resp = new[i].tolist()
        if tokenizer.eos_token_id in resp:                # keep the EOS itself, drop the padding after it
            resp = resp[: resp.index(tokenizer.eos_token_id) + 1]
        n = len(resp)
        if n == 0:
            continue
        examples.append(Example(e + resp, len(e), top_ids[i, :n].to(torch.int32).clone(),
                                top_logp[i, :n].to(torch.float16).clone()))
    return examples


def generate_dataset(target: torch.nn.Module, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int,
                     seed: int, on_batch: Callable[[int], None] | None = None) -> list[Example]:
    """Responses to all ``prompts``; batch b is greedy when b is even, sampled when odd.
    ``on_batch(n_new_tokens)`` is called after each batch (progress)."""
    data: list[Example] = []
    for b, start in enumerate(range(0, len(prompts), batch_size)):
        batch = generate_batch(target, tokenizer, prompts[start:start + batch_size], max_new_tokens,
                               sampled=b % 2 == 1, seed=seed * 100_003 + b)
        data.extend(batch)
        if on_batch is not None:
            on_batch(sum(len(ex.ids) - ex.prompt_len for ex in batch))
    return data
