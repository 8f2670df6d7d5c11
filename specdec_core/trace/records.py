"""The Trace's records: what one iteration drafted, tested, resampled and emitted, the run's statistics, and
the measured baseline, as plain dataclasses (DESIGN.md §4), with the limits a trace file must respect."""
from __future__ import annotations

from dataclasses import dataclass, field


SCHEMA = "specdec-trace/1"
MAX_ITERATIONS = 10_000
MAX_TOKENS = 20_000
MAX_TOP = 64
MAX_TEXT = 200_000
MAX_REASON = 500          # an iteration's one-line reasons (k_reason, draft_stop)
ALPHA_TOL = 1e-4
OPTIONAL_STATS = ("prefill_ms", "acceptance_ci", "speedup", "speedup_ci", "speedup_ci_method", "verdict")
TREE_SIBLINGS = ("independent", "distinct")                        # drafters.tree.SIBLING_MODES
TREE_RULES = ("greedy", "recursive_rejection", "target_draw", "coupled")   # decoding.tree_verify
NODE_STATUSES = ("accepted", "rejected", "untested")


@dataclass
class DraftRecord:
    token_id: int
    text: str
    q: float                     # warped draft probability of this token (1.0 for a point-mass drafter)
    p: float                     # warped target probability of this token
    alpha: float                 # min(1, p/q)
    u: float | None              # the uniform draw; None when untested or greedy
    accepted: bool
    tested: bool = True          # False for drafts after the first rejection (never looked at)
    p_raw: float | None = None   # unwarped (temperature 1) target probability, for display
    q_raw: float | None = None   # unwarped draft probability (None for a point-mass drafter)
    # coupled sampling only (T > 0; tested drafts; None otherwise, left out of to_dict): docs/coupled-sampling.md
    target_token: int | None = None     # y, the target's keyed sample here: accepted iff y == token_id
    coupled_alpha: float | None = None  # P(y = x | x drafted) (``coupling.coupled_accept_prob``), <= alpha
    tv: float | None = None             # total variation between p and q here

    @property
    def accept_prob(self) -> float:
        """The probability this draft was accepted with, once reached: ``coupled_alpha`` under coupling, else
        ``alpha`` (K policies and acceptance estimates read this)."""
        return self.alpha if self.coupled_alpha is None else self.coupled_alpha


@dataclass
class ResampledRecord:
    token_id: int
    text: str
    p: float                                  # warped target probability of the replacement
    residual_top: list[list] = field(default_factory=list)   # [[token_id, text, prob], ...] top-10
    position: int = 0                         # index of the rejected draft it replaces
    residual_prob: float | None = None        # probability of the replacement under the residual
    p_top: list[list] = field(default_factory=list)   # top-10 of p at that position
    q_top: list[list] = field(default_factory=list)   # top-10 of q at that position
    q: float | None = None                    # coupled sampling: the draft's q of this token (the target's y; no
                                              # residual). None otherwise, and left out of to_dict


@dataclass
class BonusRecord:
    token_id: int
    text: str
    p: float


@dataclass
class TreeNodeRecord:
    """One drafted node of a token tree (``TreeRecord``)."""
    token_id: int
    text: str
    parent: int                  # index of the parent node; -1 = the root (the token the tree hangs under)
    q: float                     # warped draft probability of this token at its parent (1.0 for a point mass)
    p: float                     # warped target probability of this token at its parent
    status: str                  # "accepted" (on the accepted path) | "rejected" (tested, failed) | "untested"
    alpha: float | None = None   # the acceptance probability it was tested with; None when the rule has none
                                 # (greedy, the target-draw rule) or untested
    u: float | None = None       # its uniform draw; None when the rule draws none or untested


@dataclass
class TreeRecord:
    """An iteration's token tree: every node, how siblings were chosen, the rule that verified them, and the
    accepted path. The iteration's ``drafts`` list the accepted path as a chain, so chain figures still read it."""
    nodes: list[TreeNodeRecord]
    siblings: str                # "independent" (drawn i.i.d. from q) | "distinct" (the draft's top candidates)
    rule: str                    # the verification rule's name (decoding.tree_verify)
    path: list[int]              # accepted node indices, root to leaf


@dataclass
class IterationRecord:
    index: int
    start_len: int               # sequence length (prompt + generated) when the iteration began
    k: int                       # drafts asked for this iteration (after clipping / adaptation)
    drafts: list[DraftRecord]
    resampled: ResampledRecord | None
    bonus: BonusRecord | None
    emitted: list[int]
    draft_ms: list[float]        # one entry per draft forward (n-gram: the lookup)
    verify_ms: float             # the one target forward over last token + drafts
    other_ms: float              # sampling math, bookkeeping, cache rollback, trace building
    t_start_ms: float = 0.0      # since the run started (prefill included), for a real time axis
    k_reason: str = ""           # why this K (the K policy's one-line reason); "" in older traces
    catchup_ms: float = 0.0      # a draft model's forward over > 2 tokens it had not seen (its prompt, or what
                                 # was emitted while it sat out), before its first draft step; 0 in older traces
    draft_stop: str = ""         # why the drafter proposed fewer than k drafts (one line); "" = k, or older traces
    tree: TreeRecord | None = None  # the token tree this iteration verified; None for a chain (and older traces)


@dataclass
class Stats:
    new_tokens: int = 0
    iterations: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance_rate: float = 0.0           # accepted / drafted
    mean_tokens_per_iteration: float = 0.0
    target_forwards: int = 0               # prefill included
    draft_forwards: int = 0                # prefill included; 0 for the n-gram drafter
    wall_ms: float = 0.0
    tokens_per_s: float = 0.0
    prefill_ms: float = 0.0
    # 95 % intervals (``intervals.fill_stats``); empty / 0 / "" in older traces and before they are filled
    acceptance_ci: list[float] = field(default_factory=list)   # Wilson [low, high] of acceptance_rate
    speedup: float = 0.0                   # tokens/s over the same run's baseline's (0: no baseline)
    speedup_ci: list[float] = field(default_factory=list)      # [low, high]
    speedup_ci_method: str = ""            # how speedup_ci was obtained ("bootstrap over iterations")
    verdict: str = ""                      # "pays here: ×1.42 (95 % CI …)", "does not pay here: …", …


@dataclass
class BaselineResult:
    new_token_ids: list[int]
    text: str
    token_ms: list[float]        # one target forward per token (the first includes the prefill)
    wall_ms: float
    tokens_per_s: float
    target_forwards: int = 0
