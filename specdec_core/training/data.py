"""Training data for the draft: the target answers chat prompts, and we keep what it thought.

For every prompt the target generates a response (batched, KV-cached ``generate``), and at every
response position we keep the target's top-``top_n`` log-probabilities at temperature 1 — the soft
label the draft is distilled towards (KL(p‖q) restricted to the target's top tokens). Batches
alternate between greedy responses (the contexts greedy acceptance is measured on) and sampled ones
(temperature 0.8, top-k 256, top-p 0.95: more varied contexts). Seeded: one seed per batch.

With ``compute_dtype`` bfloat16 the target's decoder layers run under autocast (about 1.8× faster generation
on a CPU with native bf16) while its LM head stays float32, so the labels are exact log-probabilities of the
features the draft reads.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from transformers import LogitsProcessorList

from ..models.loading import encode_prompt


@dataclass
class Example:
    ids: list[int]               # prompt + response token ids
    prompt_len: int              # response positions are ids[prompt_len:]
    top_ids: torch.Tensor        # (len(ids) - prompt_len, top_n) int32: target's top tokens at each response position
    top_logp: torch.Tensor       # (len(ids) - prompt_len, top_n) float16: their log-probabilities (temperature 1)


SAMPLING = {"temperature": 0.8, "top_k": 256, "top_p": 0.95}


class NucleusSampler:
    """A logits processor that draws the next token at ``temperature`` from the ``top_k`` most likely tokens cut to
    their smallest prefix holding ``top_p`` of the mass — transformers' temperature, top-k and top-p warpers and
    its multinomial draw, in distribution — and returns scores whose argmax is the drawn token, so that greedy
    search carries it out. Over a 49k vocabulary and a batch of 128 on this project's CPU, transformers' top-p
    (a full sort) and draw cost more per step than the target's forward; this works on the top-k alone."""

    def __init__(self, temperature: float, top_k: int, top_p: float):
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        vals, idx = torch.topk(scores.float(), min(self.top_k, scores.shape[-1]), dim=-1)    # descending
        probs = torch.softmax(vals / self.temperature, dim=-1)
        before = probs.cumsum(-1) - probs                    # mass of the more likely tokens
        probs = probs.masked_fill(before >= self.top_p, 0.0)  # the first token always stays
        token = idx.gather(1, torch.multinomial(probs, 1))
        return torch.full_like(scores, float("-inf")).scatter_(1, token, 0.0)


@contextlib.contextmanager
def decoder_autocast(target: torch.nn.Module, dtype: torch.dtype) -> Iterator[None]:
    """Run ``target``'s decoder layers under autocast to ``dtype`` (nothing changes for float32); the LM head,
    outside the decoder, keeps float32."""
    if dtype == torch.float32:
        yield
        return
    decoder = target.get_decoder()
    plain = decoder.forward

    def forward(*args, **kwargs):
        with torch.autocast(target.device.type, dtype=dtype):
            return plain(*args, **kwargs)

    decoder.forward = forward
    try:
        yield
    finally:
        del decoder.forward                               # the class's forward again


@torch.inference_mode()
def generate_batch(target: torch.nn.Module, tokenizer, prompts: list[str], max_new_tokens: int, sampled: bool,
                   seed: int, top_n: int = 32, features: list[torch.Tensor] | None = None,
                   compute_dtype: torch.dtype = torch.float32) -> list[Example]:
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
    kwargs = dict(logits_processor=LogitsProcessorList([NucleusSampler(**SAMPLING)])) if sampled else {}
    try:
        with decoder_autocast(target, compute_dtype):
            out = target.generate(input_ids=ids, attention_mask=mask, pad_token_id=pad, do_sample=False,
                                  max_new_tokens=max_new_tokens + (features is not None),
                                  eos_token_id=tokenizer.eos_token_id, output_logits=True,
                                  return_dict_in_generate=True, **kwargs)
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
                     features: list[torch.Tensor] | None = None,
                     compute_dtype: torch.dtype = torch.float32) -> list[Example]:
    """Responses to all ``prompts``; batch b is greedy when b is even, sampled when odd.
    ``on_batch(n_new_tokens)`` is called after each batch (progress); ``features``, ``compute_dtype``: see
    ``generate_batch``."""
    data: list[Example] = []
    for b, start in enumerate(range(0, len(prompts), batch_size)):
        batch = generate_batch(target, tokenizer, prompts[start:start + batch_size], max_new_tokens,
                               sampled=b % 2 == 1, seed=seed * 100_003 + b, features=features,
                               compute_dtype=compute_dtype)
        data.extend(batch)
        if on_batch is not None:
            on_batch(sum(len(ex.ids) - ex.prompt_len for ex in batch))
    return data
