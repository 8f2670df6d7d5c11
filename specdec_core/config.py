"""Run settings, validated on construction so every caller (CLI, UI, tests) gets the same errors.

The ceilings here (K, new tokens, tree nodes) are the engine's own, wider than what an entrance of the app or
the CLI accepts (``limits``, checked first), so the library's long statistical runs fit; a seed has one bound
everywhere (``limits.MAX_SEED``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .limits import K_POLICIES, MAX_TREE_TOP_K, SAMPLERS, check_seed

MAX_K = 64
MAX_NEW_TOKENS = 2048
MAX_TREE_NODES = 64   # drafted nodes of a token tree per iteration (the trace's bound on drafts, like MAX_K)
DEFAULT_TREE_TOP_K = 4

# The recommended settings (``recommended_config``): what the app's Live tab starts with, /generate's defaults
# and the CLI's; the measurements behind them are in docs/cost-model.md and docs/trained-drafts.md.
RECOMMENDED_K_POLICY = "cost"      # K chosen each iteration for the most predicted tokens/s
RECOMMENDED_K_CAP = 10             # the cost policy's largest K; 10 = transformers' prompt-lookup default
RECOMMENDED_CONFIDENCE_STOP = 0.3  # a model draft stops once its confidence that all its drafts so far are
                                   # accepted falls below this: fewer rejected drafts, as fast or faster


@dataclass(frozen=True)
class SpecConfig:
    k: int = 4                  # draft tokens per iteration (fixed), the upper bound otherwise
    temperature: float = 0.0    # 0 = greedy; otherwise the softmax temperature of p and q
    top_k: int = 0              # keep the k most likely tokens; 0 = off
    top_p: float = 1.0          # nucleus: keep the smallest set with mass >= top_p; 1.0 = off
    max_new_tokens: int = 64    # hard stop; K is clipped to what remains
    seed: int = 0               # seeds a private torch.Generator: same seed => same trace
    adaptive_k: bool = False    # shorthand for k_policy="heuristic" (kept for old callers and traces)
    full_trace: bool = True     # False keeps only what the stats need (token texts, top-10 lists skipped)
    k_policy: str = ""          # "fixed" | "heuristic" (+2/-1) | "cost" (calibrated costs); "" = heuristic
                                # if adaptive_k else fixed (the library's plain default: SpecConfig(k=K) runs
                                # K drafts per iteration). Resolved on construction.
    confidence_stop: float = 0.0  # a model draft stops after a draft that takes its own confidence that every
                                # draft so far is accepted (drafters.chain_confidence) below this; 0 = off (K drafts)
    tree_nodes: int = 0         # > 0: draft a token tree of up to this many nodes per iteration (depth <= k), verified
                                # in one target forward (decoding.tree_verify), where the drafter can; 0 = a chain
    tree_top_k: int = DEFAULT_TREE_TOP_K  # a tree's most children per node
    sampler: str = "standard"   # "standard": speculative sampling (accept iff u < min(1, p/q), the residual on a
                                # rejection), the run's generator; "coupled": drafter-invariant sampling
                                # (docs/coupled-sampling.md): noise keyed by (seed, absolute position), accept iff
                                # the draft equals the target's Gumbel-max sample, so the text equals the coupled
                                # target-only run's for the same seed whatever the drafter, K or tree

    def __post_init__(self) -> None:
        if not isinstance(self.sampler, str) or self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        policy = self.k_policy
        if not isinstance(policy, str) or policy not in K_POLICIES + ("",):
            raise ValueError(f"k_policy must be one of {', '.join(K_POLICIES)}, got {policy!r}")
        if not isinstance(self.adaptive_k, bool):
            raise ValueError(f"adaptive_k must be true or false, got {self.adaptive_k!r}")
        if self.adaptive_k and policy not in ("", "heuristic"):
            raise ValueError(f"adaptive_k=True means k_policy='heuristic'; it cannot be combined with "
                             f"k_policy={policy!r}")
        if not policy:
            policy = "heuristic" if self.adaptive_k else "fixed"
        object.__setattr__(self, "k_policy", policy)
        object.__setattr__(self, "adaptive_k", policy == "heuristic")
        _check_int("k", self.k)
        if not 1 <= self.k <= MAX_K:
            raise ValueError(f"k must be between 1 and {MAX_K}, got {self.k}")
        if not isinstance(self.temperature, (int, float)) or self.temperature != self.temperature:
            raise ValueError(f"temperature must be a number, got {self.temperature!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        _check_int("top_k", self.top_k)
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")
        stop = self.confidence_stop
        if isinstance(stop, bool) or not isinstance(stop, (int, float)) or not 0 <= stop < 1:
            raise ValueError(f"confidence_stop must be a number in [0, 1) (0 = off), got {stop!r}")
        _check_int("tree_nodes", self.tree_nodes)
        if not 0 <= self.tree_nodes <= MAX_TREE_NODES:
            raise ValueError(f"tree_nodes must be between 0 (a chain) and {MAX_TREE_NODES}, got {self.tree_nodes}")
        _check_int("tree_top_k", self.tree_top_k)
        if not 1 <= self.tree_top_k <= MAX_TREE_TOP_K:
            raise ValueError(f"tree_top_k (children per tree node) must be between 1 and {MAX_TREE_TOP_K}, "
                             f"got {self.tree_top_k}")
        _check_int("max_new_tokens", self.max_new_tokens)
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS}, got {self.max_new_tokens}")
        _check_int("seed", self.seed)
        check_seed(self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)

    def trace_dict(self) -> dict:
        """What a trace records of the settings: ``to_dict`` without the tree settings when no tree is asked for,
        and without the sampler when it is "standard", so chain runs with the standard sampler are recorded as
        before trees and coupling existed (a trace without ``sampler`` reads as "standard": ``trace.sampler_of``)."""
        d = self.to_dict()
        if not self.tree_nodes:
            del d["tree_nodes"], d["tree_top_k"]
        if self.sampler == "standard":
            del d["sampler"]
        return d


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")


def recommended_config(**overrides: object) -> SpecConfig:
    """The recommended settings for a real run, the one definition behind the Live tab's first values,
    /generate's defaults and the CLI's: the cost-aware K policy capped at RECOMMENDED_K_CAP, a model draft's
    confidence stop at RECOMMENDED_CONFIDENCE_STOP (prompt lookup has no confidence: it is unaffected), and
    SpecConfig's own sampling defaults (greedy, 64 new tokens, seed 0). ``overrides`` win; ``k_policy=""``
    means "not given", and ``adaptive_k=True`` selects the heuristic."""
    kw: dict = {"k": RECOMMENDED_K_CAP, "confidence_stop": RECOMMENDED_CONFIDENCE_STOP,
                **{k: v for k, v in overrides.items() if not (k == "k_policy" and v == "")}}
    if "k_policy" not in kw and not kw.get("adaptive_k"):
        kw["k_policy"] = RECOMMENDED_K_POLICY
    return SpecConfig(**kw)
