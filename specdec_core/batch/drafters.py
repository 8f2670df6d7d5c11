"""Drafters for a batch: ONE draft pass per iteration for every row.

A batched drafter proposes for all rows at once (``propose(rows, ks, policies)``): a model draft runs one
batched forward per draft step (the first feeds each row what its cache has not seen, ragged; the later ones
one token per row still drafting), each row drawing its drafts with its own ``DraftPolicy`` (its own random
stream or keyed noise) through the same ``DraftChain`` a single sequence uses. Then ``rollback(valid)`` keeps
each row's own prefix and ``select(rows)`` lets finished rows leave.

- ``BatchLookup``: prompt lookup, one ``NGramDrafter`` per row (no model: the pass is the rows' lookups);
- ``BatchModelDrafter``: any transformers causal LM (the shipped token-only draft, a hub draft, the target itself);
- ``BatchFeatureDrafter``: the shipped feature-reading draft, which reads each row's target features.
``batch_drafter(drafter)`` builds the batched form of a single-sequence drafter.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..drafters.base import DraftChain, DraftOutlook, DraftPolicy, Proposal
from ..drafters.feature import FeatureDraft, FeatureDrafter
from ..drafters.model import ModelDrafter
from ..drafters.ngram import NGramDrafter
from ..models.ragged_cache import RaggedCache, ragged_decode
from ..timing import now_ms


@dataclass
class BatchProposal:
    """Each row's proposal (its ``forward_ms``: the batched steps it took part in) and the pass's step times."""
    rows: list[Proposal]
    step_ms: list[float] = field(default_factory=list)   # one entry per batched draft step (lookup: one pass)
    forwards: int = 0                                     # batched draft forwards run


class BatchDrafter(Protocol):
    name: str
    reads_features: bool

    def start(self, prompts: list[list[int]]) -> None: ...
    def outlooks(self, rows: list[list[int]], eos: int | None) -> list[DraftOutlook] | None: ...  # None: nothing told
    def propose(self, rows: list[list[int]], ks: list[int], policies: list[DraftPolicy]) -> BatchProposal: ...
    def rollback(self, valid: list[int]) -> None: ...
    def select(self, rows: list[int]) -> None: ...


def drive_chains(chains: list[DraftChain], step: Callable[[int, list[int], list[torch.Tensor | None]], torch.Tensor],
                 device: torch.device) -> BatchProposal:
    """Draw every row's chain, one batched ``step(i, rows, previous tokens)`` per draft step i for the rows still
    drafting (it returns their (len(rows), V) draft logits, in that order); each row's step times are the steps
    it took part in."""
    prev: list[torch.Tensor | None] = [None] * len(chains)
    step_ms: list[float] = []
    i = 0
    while rows := [b for b, c in enumerate(chains) if not c.done]:
        t0 = now_ms(device)
        logits = step(i, rows, [prev[b] for b in rows])
        for j, b in enumerate(rows):
            prev[b] = chains[b].add(logits[j])
        step_ms.append(now_ms(device) - t0)
        for b in rows:
            chains[b].times.append(step_ms[-1])
        i += 1
    return BatchProposal([c.proposal() for c in chains], step_ms, len(step_ms))


class BatchLookup:
    """Prompt lookup for every row (``NGramDrafter``, one per row)."""
    reads_features = False

    def __init__(self, drafter: NGramDrafter) -> None:
        self.proto = drafter
        self.name = drafter.name
        self.rows: list[NGramDrafter] = []

    def start(self, prompts: list[list[int]]) -> None:
        self.rows = [self.proto.fresh() for _ in prompts]
        for d, ids in zip(self.rows, prompts):
            d.start(ids)

    def outlooks(self, rows: list[list[int]], eos: int | None) -> list[DraftOutlook]:
        """Each row's match before it drafts, for free (``NGramDrafter.outlook``)."""
        return [d.outlook(ids, eos_token_id=eos) for d, ids in zip(self.rows, rows)]

    def propose(self, rows: list[list[int]], ks: list[int], policies: list[DraftPolicy]) -> BatchProposal:
        t0 = now_ms(torch.device("cpu"))
        props = [d.propose(ids, k, pol) if k > 0 else Proposal([], None)
                 for d, ids, k, pol in zip(self.rows, rows, ks, policies)]
        return BatchProposal(props, [now_ms(torch.device("cpu")) - t0], 0)

    def rollback(self, valid: list[int]) -> None:
        for d, v in zip(self.rows, valid):
            d.rollback(v)

    def select(self, rows: list[int]) -> None:
        self.rows = [self.rows[r] for r in rows]


class BatchModelDrafter:
    """A transformers causal LM drafting for every row, with one ragged KV cache."""
    reads_features = False

    def __init__(self, model: torch.nn.Module, name: str = "model") -> None:
        self.model, self.name = model, name
        self.device = next(model.parameters()).device
        self.cache: RaggedCache | None = None
        self.fed: list[int] = []

    def outlooks(self, rows: list[list[int]], eos: int | None) -> list[DraftOutlook]:
        """Each row's tokens its cache has not seen (a catch-up after K = 0 iterations)."""
        return [DraftOutlook(unseen=len(ids) - f) for ids, f in zip(rows, self.fed)]

    def start(self, prompts: list[list[int]]) -> None:
        self.cache = RaggedCache(self.model.config, len(prompts))
        self.fed = [0] * len(prompts)

    def propose(self, rows: list[list[int]], ks: list[int], policies: list[DraftPolicy]) -> BatchProposal:
        head = self.model.get_output_embeddings()

        def step(i: int, drafting: list[int], prev: list[torch.Tensor | None]) -> torch.Tensor:
            feeds: list[list[int]] = [[] for _ in rows]
            for b, tok in zip(drafting, prev):       # the first step: what the row's cache has not seen
                feeds[b] = rows[b][self.fed[b]:] if tok is None else [int(tok)]
            hidden = ragged_decode(self.model, self.cache, feeds)
            for b in drafting:
                self.fed[b] += len(feeds[b])
            with torch.inference_mode():
                return head(torch.stack([hidden[b, len(feeds[b]) - 1] for b in drafting]))

        return drive_chains([DraftChain(k, pol) for k, pol in zip(ks, policies)], step, self.device)

    def rollback(self, valid: list[int]) -> None:
        self.fed = [min(f, v) for f, v in zip(self.fed, valid)]
        self.cache.truncate(self.fed)

    def select(self, rows: list[int]) -> None:
        self.cache.select(rows)
        self.fed = [self.fed[r] for r in rows]


class BatchFeatureDrafter:
    """The feature-reading draft (``drafters.feature``) for every row: one ragged cache that holds only positions
    computed from the target's real features (the positions drafted from its own guesses go at the rollback),
    and each row's features as the target hands them over (``observe_features``)."""
    reads_features = True

    def __init__(self, draft: FeatureDraft, name: str = "feature draft") -> None:
        self.draft, self.name = draft, name
        self.device = draft.lm_head.weight.device
        self.cache: RaggedCache | None = None
        self.true_len: list[int] = []
        self.features: list[torch.Tensor | None] = []
        self.n_features: list[int] = []

    def outlooks(self, rows: list[list[int]], eos: int | None) -> list[DraftOutlook]:
        """Each row's positions its cache has not read from the target's features (a catch-up after K = 0)."""
        return [DraftOutlook(unseen=len(ids) - 1 - t) for ids, t in zip(rows, self.true_len)]

    def start(self, prompts: list[list[int]]) -> None:
        self.cache = RaggedCache(self.draft.config, len(prompts))
        self.true_len = [0] * len(prompts)
        self.features = [None] * len(prompts)
        self.n_features = [0] * len(prompts)

    def observe_features(self, row: int, start: int, features: torch.Tensor) -> None:
        """Row ``row``'s target features for positions start … start + len(features) − 1."""
        end = start + features.shape[0]
        buf = self.features[row]
        if buf is None or end > buf.shape[0]:
            grown = features.new_empty((max(2 * end, 256), features.shape[-1]))
            if buf is not None:
                grown[:self.n_features[row]] = buf[:self.n_features[row]]
            self.features[row] = buf = grown
        buf[start:end] = features
        self.n_features[row] = end

    @torch.inference_mode()
    def propose(self, rows: list[list[int]], ks: list[int], policies: list[DraftPolicy]) -> BatchProposal:
        hidden_last: dict[int, torch.Tensor] = {}
        ks, stops = list(ks), {}
        for b, ids in enumerate(rows):             # a one-token prompt: the target has read nothing yet
            if ks[b] > 0 and (len(ids) < 2 or self.n_features[b] < len(ids) - 1):
                ks[b], stops[b] = 0, "no target features to read yet"
        width = self.draft.config.hidden_size

        def step(i: int, drafting: list[int], prev: list[torch.Tensor | None]) -> torch.Tensor:
            n = len(rows)
            tokens: list[list[int]] = [[] for _ in range(n)]
            feats: list[torch.Tensor | None] = [None] * n
            roots = [b for b, tok in zip(drafting, prev) if tok is None]
            for b, tok in zip(drafting, prev):
                last = len(rows[b]) - 1
                if tok is None:    # the root: positions true_len … last − 1, (x_{t+1}, f_t) all from the target
                    tokens[b] = rows[b][self.true_len[b] + 1:last + 1]
                    feats[b] = self.features[b][self.true_len[b]:last]
                else:              # later steps feed the draft's own feature back in
                    tokens[b], feats[b] = [int(tok)], hidden_last[b][None]
            counts = [len(t) for t in tokens]
            t = max(counts)
            x = torch.tensor([tk + [0] * (t - len(tk)) for tk in tokens], device=self.device)
            f = torch.zeros((n, t, width), dtype=self.draft.lm_head.weight.dtype, device=self.device)
            for b in drafting:
                f[b, :counts[b]] = feats[b]
            mask, positions = self.cache.layout(counts, f.dtype, self.device)
            hidden = self.draft(x, f, positions, self.cache.cache, attention_mask=mask)
            self.cache.appended(counts)
            for b in drafting:
                hidden_last[b] = hidden[b, counts[b] - 1]
            for b in roots:
                self.true_len[b] = len(rows[b]) - 1
            return self.draft.full_logits(torch.stack([hidden_last[b] for b in drafting]))

        out = drive_chains([DraftChain(k, pol) for k, pol in zip(ks, policies)], step, self.device)
        for b, why in stops.items():
            out.rows[b].stop = why
        return out

    def rollback(self, valid: list[int]) -> None:
        self.true_len = [min(t, v) for t, v in zip(self.true_len, valid)]
        self.cache.truncate(self.true_len)
        self.n_features = [min(n, v) for n, v in zip(self.n_features, valid)]

    def select(self, rows: list[int]) -> None:
        self.cache.select(rows)
        for name in ("true_len", "features", "n_features"):
            setattr(self, name, [getattr(self, name)[r] for r in rows])


def batch_drafter(drafter: Any) -> BatchDrafter:
    """The batched form of a single-sequence drafter: prompt lookup, a causal LM draft or the feature draft."""
    if isinstance(drafter, NGramDrafter):
        return BatchLookup(drafter)
    if isinstance(drafter, FeatureDrafter):
        return BatchFeatureDrafter(drafter.draft, drafter.name)
    if isinstance(drafter, ModelDrafter):
        return BatchModelDrafter(drafter.model, drafter.name)
    raise ValueError(f"a batch runs prompt lookup, a causal LM draft or the feature draft, not "
                     f"{getattr(drafter, 'name', type(drafter).__name__)!r}")
