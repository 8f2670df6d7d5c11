"""What the speculative loop works with, set up once per run (``engine._set_up``) and read by each iteration's
steps 1-4 (``engine._chain_step`` for a chain, ``tree_step.tree_step`` for a tree)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..sampling.coupled import CoupledSampler, Sampler
from ..drafters.base import DraftOutlook, Drafter, DraftPolicy
from ..policy.kpolicy import KPolicy
from ..sampling import Warping
from ..trace import Trace
from .coupled_verify import Noise
from .record import RunningText
from .target import TargetModel


@dataclass
class RunState:
    """One run's drafter, target, randomness, policies and trace."""
    drafter: Drafter
    tgt: TargetModel
    gen: torch.Generator
    policy: DraftPolicy                  # how drafts are drawn
    warping: Warping                     # how the target's logits become p
    k_policy: KPolicy
    outlook: Callable[[list[int], int | None], DraftOutlook] | None
    tree_nodes: int                      # > 0: draft token trees of up to this many nodes (the drafter can)
    tree_top_k: int                      # a tree's most children per node
    eos: int | None
    reads_features: bool
    trace: Trace
    text: Callable[[int], str]           # one token's text (display)
    running_text: RunningText            # the output text so far
    sampler: Sampler                     # how sampled tokens are drawn (``coupling``); the drafts' too, via ``policy``

    def noise_from(self, start: int, vocab_size: int) -> Noise | None:
        """Coupled sampling at a temperature above 0: the keyed noise by offset from absolute position ``start``
        (what the coupled verify reads); None otherwise (the standard rule, or greedy)."""
        sampler = self.sampler
        if not isinstance(sampler, CoupledSampler) or self.warping.greedy:
            return None
        device = self.tgt.device
        return lambda offset: sampler.noise(start + offset, vocab_size, device)
