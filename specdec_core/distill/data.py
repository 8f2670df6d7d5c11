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
                   seed: int, top_n: int = 32, features: list[torch.Tensor] | None = None) -> list[Example]:
    """One batch of responses with the target's top-``top_n`` log-probs at every response position.

    With a ``features`` list, the target's post-norm last hidden state at every position of each example
    ((len(ids), hidden) float16, what its LM head reads) is appended to it, recorded by a hook on the final
    norm while generating: no second pass over the data. One token more than ``max_new_tokens`` is
    generated so that the last kept token has been read too (a response whose EOS ends the whole batch
    keeps its text up to the EOS, without it)."""
    encoded = [encode_prompt(tokenizer, p, chat=True) for p in prompts]
    width = max(len(e) for e in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(encoded):                      # left padding
        ids[i, width - len(e):] = torch.tensor(e)
        mask[i, width - len(e):] = 1
    ids, mask = ids.to(target.device), mask.to(target.device)
    recorded: list[torch.Tensor] = []                    # (B, fed tokens, hidden) per forward: prefill, then 1 each
    norm = target.get_decoder().norm
    hook = norm.register_forward_hook(lambda m, i, o: recorded.append(o.to(torch.float16).cpu())) \
        if features is not None else None
    torch.manual_seed(seed)
    kwargs = dict(do_sample=True, temperature=0.8, top_p=0.95, top_k=0) if sampled else dict(do_sample=False)
    try:
        out = target.generate(input_ids=ids, attention_mask=mask, pad_token_id=pad,
                              max_new_tokens=max_new_tokens + (features is not None),
                              eos_token_id=tokenizer.eos_token_id, output_logits=True, return_dict_in_generate=True,
                              **kwargs)
    finally:
        if hook is not None:
            hook.remove()
    logits = torch.stack(out.logits, dim=1)              # (B, steps, V) raw logits, before any warping
    logp = torch.log_softmax(logits.float(), dim=-1)
    top_logp, top_ids = (t.cpu() for t in torch.topk(logp, top_n, dim=-1))  # (B, steps, top_n)
    new = out.sequences[:, width:].cpu()
    hidden = torch.cat(recorded, dim=1) if features is not None else None    # (B, width + forwards - 1, hidden)
    examples = []
    for i, e in enumerate(encoded):
        resp = new[i, :max_new_tokens].tolist()
        if tokenizer.eos_token_id in resp:                # keep the EOS itself, drop the padding after it
            resp = resp[: resp.index(tokenizer.eos_token_id) + 1]
        if hidden is not None:                            # positions the target has read: width - len(e) + j < columns
            resp = resp[: hidden.shape[1] - width]
        n = len(resp)
        if n == 0:
            continue
        examples.append(Example(e + resp, len(e), top_ids[i, :n].to(torch.int32).clone(),
                                top_logp[i, :n].to(torch.float16).clone()))
        if features is not None:
            features.append(hidden[i, width - len(e): width + n].clone())
    return examples


def generate_dataset(target: torch.nn.Module, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int,
                     seed: int, on_batch: Callable[[int], None] | None = None,
                     features: list[torch.Tensor] | None = None) -> list[Example]:
    """Responses to all ``prompts``; batch b is greedy when b is even, sampled when odd.
    ``on_batch(n_new_tokens)`` is called after each batch (progress); ``features``: see ``generate_batch``."""
    data: list[Example] = []
    for b, start in enumerate(range(0, len(prompts), batch_size)):
        batch = generate_batch(target, tokenizer, prompts[start:start + batch_size], max_new_tokens,
                               sampled=b % 2 == 1, seed=seed * 100_003 + b, features=features)
        data.extend(batch)
        if on_batch is not None:
            on_batch(sum(len(ex.ids) - ex.prompt_len for ex in batch))
    return data
