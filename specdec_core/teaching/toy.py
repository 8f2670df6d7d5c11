"""Toy language models over a ten-word vocabulary, for the simulator and the exactness lab.

A ``BigramLM`` is a real ``torch.nn.Module`` whose next-token logits depend only on the previous token
(one row of a 10 x 10 logit table). It answers the same call the engine makes of a transformers causal
LM (``model(input_ids=..., past_key_values=..., use_cache=True, logits_to_keep=n).logits``), so it runs
through the SAME ``stream_speculative`` loop and produces the same ``Trace`` as the real models.
It never writes to the KV cache it is handed (a bigram model needs no memory beyond the token it is
fed); cropping an untouched ``DynamicCache`` is a no-op, so the engine's rollback works unchanged.

The target's table is a small hand-written grammar ("the big cat sat on a mat ."). The draft's table
mixes the target's logits with a seeded random table: ``agreement`` = 1 makes q == p, 0 makes q
unrelated to p (as in the NumPy simulator of seed 002, here through the real engine).
Notation: p = target, q = draft.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..sampling import residual_distribution, warp_logits
from ..trace import Trace

WORDS: tuple[str, ...] = ("the", "a", "big", "cat", "dog", "sat", "ran", "on", "mat", ".")

# Target grammar: previous word -> {next word: weight}. Every other word keeps a small weight, so
# that no probability is exactly zero before top-k/top-p warping.
_GRAMMAR: dict[str, dict[str, float]] = {
    "the": {"big": 2, "cat": 4, "dog": 4, "mat": 3},
    "a": {"big": 3, "cat": 4, "dog": 3, "mat": 2},
    "big": {"cat": 4, "dog": 4, "mat": 2},
    "cat": {"sat": 5, "ran": 3, ".": 1},
    "dog": {"ran": 5, "sat": 3, ".": 1},
    "sat": {"on": 6, ".": 2},
    "ran": {"on": 3, ".": 4},
    "on": {"the": 5, "a": 3},
    "mat": {".": 6, "on": 1},
    ".": {"the": 5, "a": 3},
}
_FLOOR = 0.05            # weight of the words a row does not name
DRAFT_NOISE = 1.5        # standard deviation of the draft's random logit table


class ToyConfig(PretrainedConfig):
    """Just enough config for ``DynamicCache(config=...)``: one (unused) layer."""
    model_type = "toy-bigram"

    def __init__(self, vocab_size: int = len(WORDS), num_hidden_layers: int = 1, **kwargs) -> None:
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers
        super().__init__(**kwargs)


class BigramLM(torch.nn.Module):
    """next-token logits = table[previous token]. ``table``: (V, V) float, row = previous token."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        if table.dim() != 2 or table.shape[0] != table.shape[1]:
            raise ValueError(f"the logit table must be square (V, V), got {tuple(table.shape)}")
        v = table.shape[0]
        self.config = ToyConfig(vocab_size=v)
        # lm_head(one_hot(prev)) = weight[:, prev] = table[prev]; weight is (V_out, V_in) like any LM head
        self.lm_head = torch.nn.Linear(v, v, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(table.t().float())
        self.lm_head.weight.requires_grad_(False)
        self.eval()

    @property
    def table(self) -> torch.Tensor:
        return self.lm_head.weight.t()

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, past_key_values: object = None, use_cache: bool | None = None,
                logits_to_keep: int = 0, **kwargs: object) -> CausalLMOutputWithPast:
        v = self.lm_head.weight.shape[0]
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, n), got {tuple(input_ids.shape)}")
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= v):
            raise ValueError(f"token ids must be in [0, {v}) for this {v}-word model")
        x = torch.nn.functional.one_hot(input_ids, v).to(self.lm_head.weight.dtype)   # (B, n, V)
        logits = self.lm_head(x)                                                          # (B, n, V)
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return CausalLMOutputWithPast(logits=logits, past_key_values=past_key_values)


class ToyTokenizer:
    """Words in, ids out; ``decode`` puts a space before every word except '.'."""

    def __init__(self, words: tuple[str, ...] = WORDS) -> None:
        self.words = tuple(words)
        self._ids = {w: i for i, w in enumerate(self.words)}
        self.eos_token_id = None
        self.bos_token_id = None
        self.pad_token_id = None
        self.unk_token_id = None
        self.chat_template = None

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        pieces = re.findall(r"[^\s.]+|\.", text.lower())
        unknown = [w for w in pieces if w not in self._ids]
        if unknown:
            raise ValueError(f"unknown word(s) {', '.join(repr(w) for w in unknown[:5])}: "
                             f"the toy vocabulary is {' '.join(self.words)}")
        return [self._ids[w] for w in pieces]

    def decode(self, ids: list[int] | torch.Tensor, skip_special_tokens: bool = False) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.reshape(-1).tolist()
        return "".join(self.words[i] if self.words[i] == "." else " " + self.words[i] for i in ids)


def target_table(words: tuple[str, ...] = WORDS) -> torch.Tensor:
    """(V, V) target logits: log of the grammar weights (rows = previous word)."""
    idx = {w: i for i, w in enumerate(words)}
    weights = torch.full((len(words), len(words)), _FLOOR)
    for prev, row in _GRAMMAR.items():
        for nxt, w in row.items():
            weights[idx[prev], idx[nxt]] = w
    return weights.log()


def draft_table(agreement: float, seed: int = 0, noise: float = DRAFT_NOISE) -> torch.Tensor:
    """(V, V) draft logits = agreement * target + (1 - agreement) * seeded random logits."""
    if not isinstance(agreement, (int, float)) or not 0.0 <= agreement <= 1.0:
        raise ValueError(f"agreement must be between 0 and 1, got {agreement!r}")
    t = target_table()
    gen = torch.Generator().manual_seed(int(seed))
    other = torch.randn(t.shape, generator=gen) * noise
    return agreement * t + (1.0 - agreement) * other


@dataclass
class ToyPair:
    target: BigramLM
    draft: BigramLM
    tokenizer: ToyTokenizer
    agreement: float
    seed: int


def make_toy_pair(agreement: float = 0.5, seed: int = 0) -> ToyPair:
    """The simulator's target and draft over the ten words; agreement in [0, 1]."""
    return ToyPair(BigramLM(target_table()), BigramLM(draft_table(agreement, seed)), ToyTokenizer(),
                   float(agreement), int(seed))


def next_distributions(pair: ToyPair, prev_token: int, temperature: float, top_k: int = 0,
                       top_p: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q): the warped target and draft distributions after ``prev_token``, all ten words."""
    if not 0 <= prev_token < len(pair.tokenizer):
        raise ValueError(f"token id {prev_token} is outside the toy vocabulary")
    with torch.no_grad():
        p = warp_logits(pair.target.table[prev_token], temperature, top_k, top_p)
        q = warp_logits(pair.draft.table[prev_token], temperature, top_k, top_p)
    return p, q


def overlap(p: torch.Tensor, q: torch.Tensor) -> float:
    """sum_x min(p(x), q(x)): the probability that a draft token drawn from q is accepted (alpha)."""
    return float(torch.minimum(p, q).sum())


def pair_meta(pair: ToyPair) -> dict:
    """What a trace needs in its config to rebuild the pair (``stream_speculative(meta=...)``)."""
    return {"target": "toy bigram target (10 words)", "draft": f"toy bigram draft (agreement {pair.agreement:g})",
            "toy_agreement": pair.agreement, "toy_seed": pair.seed}


def pair_from_config(config: dict) -> ToyPair:
    """The toy pair a trace was generated with, from the keys ``pair_meta`` put in its config."""
    if "toy_agreement" not in config:
        raise ValueError("this trace was not generated by the toy models")
    return make_toy_pair(float(config["toy_agreement"]), int(config.get("toy_seed", 0)))


@dataclass
class StepView:
    """Everything about one draft position of one iteration of a toy run, all ten words included."""
    words: list[str]
    p: list[float]                     # warped target distribution at this position
    q: list[float]                     # warped draft distribution at this position
    residual: list[float] | None       # norm(max(0, p - q)) where the draft was rejected
    context: str                       # the word before this position
    iteration: int
    position: int                      # 0-based; == number of drafts for the bonus position
    drafted: int | None                # the drafted word's id (None at the bonus position)
    verdict: str                       # "accepted" | "rejected" | "not tested" | "bonus position"
    alpha: float | None
    u: float | None
    emitted: int | None                # the word emitted here instead of the draft (resampled / bonus)
    emitted_how: str
    overlap: float                     # sum min(p, q)


def step_view(pair: ToyPair, trace: Trace, iteration: int, position: int) -> StepView:
    """The distributions behind one decision of a toy ``Trace``. ``position`` is clamped to
    0 .. len(drafts) (the last one is the bonus position), ``iteration`` to the run."""
    if not trace.iterations:
        raise ValueError("the trace has no iterations")
    i = min(max(int(iteration), 0), len(trace.iterations) - 1)
    it = trace.iterations[i]
    j = min(max(int(position), 0), len(it.drafts))
    seq = list(trace.prompt_ids) + list(trace.new_token_ids)
    context = seq[:it.start_len] + [d.token_id for d in it.drafts[:j]]
    cfg = trace.config
    p, q = next_distributions(pair, context[-1], cfg["temperature"], cfg.get("top_k", 0), cfg.get("top_p", 1.0))
    residual = emitted = None
    how = ""
    if j < len(it.drafts):
        d = it.drafts[j]
        drafted, alpha, u = d.token_id, (d.alpha if d.tested else None), d.u
        verdict = "accepted" if d.accepted else ("rejected" if d.tested else "not tested")
        if verdict == "rejected" and it.resampled is not None:
            if cfg["temperature"] > 0:
                residual = residual_distribution(p, q).tolist()
                emitted, how = it.resampled.token_id, "resampled from the residual"
            else:
                emitted, how = it.resampled.token_id, "the target's argmax (greedy)"
    else:
        drafted, alpha, u, verdict = None, None, None, "bonus position"
        if it.bonus is not None:
            emitted, how = it.bonus.token_id, "bonus, sampled from p"
    return StepView(list(pair.tokenizer.words), p.tolist(), q.tolist(), residual,
                    pair.tokenizer.words[context[-1]], i, j, drafted, verdict, alpha, u, emitted, how, overlap(p, q))
