"""What the cost model prices with: the per-operation costs (``Costs``: calibrated, or read off a run) and the
tokens an iteration's verify fed (``fed_tokens``). Shared by the pricing of chains (``costmodel``) and of token
trees (``tree_cost``), so that their imports run one way: costs <- tree_cost <- costmodel (which re-exports
both names).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..trace import IterationRecord


@dataclass(frozen=True)
class Costs:
    """Per-operation costs in milliseconds (calibrated, or read off a run)."""
    verify_ms: tuple[float, ...]      # verify_ms[n - 1]: one target forward over n new tokens (n >= 1)
    draft_ms: float = 0.0             # one draft forward (model draft) or one lookup (prompt lookup)
    draft_per_token: bool = True      # True: one draft forward per proposed token; False: one lookup per iteration
    overhead_ms: float = 0.0          # host time per iteration outside draft and verify
    prefill_ms: float = 0.0           # the speculative run's prefill and its draft's catch-ups (filling caches)
    baseline_prefill_ms: float = 0.0  # the baseline's prefill
    baseline_overhead_ms: float = 0.0  # host time per baseline token beyond its one-token forward
    baseline_token_ms: float | None = None  # the baseline's measured time per token (forward + overhead);
                                            # None: t1 + baseline_overhead_ms

    def __post_init__(self) -> None:
        if not self.verify_ms or any(not (v >= 0) for v in self.verify_ms):
            raise ValueError("verify_ms needs at least one non-negative time (n = 1)")
        if self.baseline_token_ms is not None and not self.baseline_token_ms >= 0:
            raise ValueError(f"baseline_token_ms must be >= 0, got {self.baseline_token_ms}")
        for name in ("draft_ms", "overhead_ms", "prefill_ms", "baseline_prefill_ms", "baseline_overhead_ms"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def t1(self) -> float:
        """One-token target forward: the baseline's unit of cost."""
        return self.verify_ms[0]

    @property
    def baseline_per_token(self) -> float:
        return self.baseline_token_ms if self.baseline_token_ms is not None else self.t1 + self.baseline_overhead_ms

    def t_verify(self, n: int) -> float:
        """One target forward over n tokens. Beyond the measured range: the last measured slope
        (never below the last value)."""
        if n < 1:
            raise ValueError(f"a verify feeds at least one token, got n = {n}")
        v = self.verify_ms
        if n <= len(v):
            return v[n - 1]
        slope = max(0.0, (v[-1] - v[-2])) if len(v) >= 2 else 0.0
        return v[-1] + slope * (n - len(v))

    def draft_cost(self, proposed: int, k: int) -> float:
        if k <= 0:
            return 0.0
        return self.draft_ms * proposed if self.draft_per_token else self.draft_ms

    def flat(self) -> "Costs":
        """The same costs with a GPU-like verify: every verify costs one one-token forward."""
        return replace(self, verify_ms=(self.t1, self.t1))   # two equal points: extrapolation stays flat


def fed_tokens(it: IterationRecord) -> int:
    """Tokens an iteration's verify fed the target: the last token and the drafts, or the tree's nodes."""
    return (len(it.tree.nodes) if it.tree is not None else len(it.drafts)) + 1
