"""A small tree-drafting drafter for the engine's tree tests: any causal LM, re-run over the whole sequence
for every expansion (no cache of its own, so nothing to roll back), breadth first. Siblings "distinct" (the
draft's top candidates) or "independent" (drawn i.i.d. from q at the parent)."""
from __future__ import annotations

import torch

from specdec_core.drafters.base import DraftPolicy, Proposal
from specdec_core.drafters.tree import TreeProposal
from specdec_core.sampling import sample, warp_logits


def path_to(parents: list[int], node: int) -> list[int]:
    """Node indices from the root's child down to ``node`` (empty for the root, -1)."""
    out = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


def chain_parents(k: int) -> list[int]:
    """The parents of a chain of k drafts: [-1, 0, 1, …, k-2]."""
    return list(range(-1, k - 1))


class TreeTestDrafter:
    name = "tree-test"

    def __init__(self, model: torch.nn.Module, siblings: str = "distinct") -> None:
        self.model, self.siblings = model, siblings
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.device = next(model.parameters()).device

    def start(self, prompt_ids: list[int]) -> int:
        return 0

    @torch.inference_mode()
    def propose_tree(self, ids: list[int], n_nodes: int, top_k: int, policy: DraftPolicy,
                     max_depth: int) -> TreeProposal:
        tokens: list[int] = []
        parents: list[int] = []
        rows: list[torch.Tensor] = []
        frontier = [(-1, [])]
        forwards = 0
        while frontier and len(tokens) < n_nodes:
            node, path = frontier.pop(0)
            if len(path) >= max_depth:
                continue
            logits = self.model(input_ids=torch.tensor([ids + path], device=self.device)).logits[0, -1]
            forwards += 1
            q = warp_logits(logits, policy.temperature, policy.top_k, policy.top_p)
            if self.siblings == "distinct":
                order = torch.argsort(q if not policy.greedy else logits, descending=True, stable=True)
                kids = [int(t) for t in order[:top_k] if q[t] > 0 or policy.greedy]
            else:
                kids = [int(sample(q, policy.generator)) for _ in range(top_k)]
            for t in kids[:n_nodes - len(tokens)]:
                tokens.append(t)
                parents.append(node)
                rows.append(q)
                if t != policy.eos_token_id:
                    frontier.append((len(tokens) - 1, path + [t]))
        probs = None if (policy.greedy or not rows) else torch.stack(rows)
        return TreeProposal(tokens, parents, self.siblings, probs, forward_ms=[0.0] * forwards, forwards=forwards)

    def propose(self, ids: list[int], k: int, policy: DraftPolicy) -> Proposal:
        t = self.propose_tree(ids, k, 1, policy, k)
        return Proposal(t.tokens, t.draft_probs, forward_ms=t.forward_ms, forwards=t.forwards)

    def rollback(self, valid_len: int) -> None:
        pass

    def rollback_tree(self, valid_len: int, path: list[int]) -> None:
        pass
