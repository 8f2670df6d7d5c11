"""The prices of a cost-aware run, fixed before it starts (``calibration.Prices``): the target's verify curve
(``calibration.calibrate``) and what its drafter costs beside it (``DraftCosts``), each measured once per
process and never changed after, so the same settings and seed give the same K choices, and so the same trace,
whatever the machine's load while the run goes.

A drafter's costs come from short engine runs of the drafter with its target at a fixed K on a synthetic prompt
(``measure_draft_costs``): an untimed warm-up run, then a greedy and a sampled chain of ``CAL_K`` drafts and,
for a drafter that drafts token trees, a tree of ``CAL_TREE_NODES`` nodes. Read off them: a draft step's ms (or
a lookup's), a catch-up forward's ms per token fed, the host time per iteration greedy and sampling, a tree
level's draft forward and a tree iteration's host time. The same runs time their verifies, and every cost is
divided by how much slower those verifies were than the calibrated curve says: a draft's price is in the
curve's level, the one the curve's sizes are compared in (a machine that slowed between the two measurements
changes neither the drafts' share nor K).

``run_prices`` measures what is missing (one measurement at a time in the process: ``calibration.measuring``);
``cached_prices`` looks without measuring (the app's session asks it whether a run would have to wait for its
prices). ``run_fingerprint`` names what a run depends on besides its settings and seed: the models, their
device, dtype and the libraries' versions and, for the cost-aware policy, the prices.
"""
from __future__ import annotations

import hashlib
import statistics
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ..config import SpecConfig
from ..drafters.base import outlook_of
from ..policy import calibration
from ..policy.calibration import DraftCosts, Prices, VerifyCurve, model_key
from ..policy.costs import fed_tokens
from ..trace import IterationRecord, Trace

Generate = Callable[[torch.nn.Module, Any, list[int], SpecConfig], Trace]   # the engine's run (speculative_generate)

CAL_K = 3                 # drafts per iteration in the timed runs
CAL_TOKENS = 12           # new tokens of each timed run
CAL_WARM_TOKENS = 4       # the untimed warm-up run (first calls: allocations, kernel selection)
CAL_TREE_NODES = 8        # the timed tree run: nodes and children per node
CAL_TREE_TOP_K = 4
CAL_PROMPT = 48           # synthetic prompt: this many random tokens, then the first half again (prompt lookup
                          # finds matches)


def draft_module(drafter: Any) -> torch.nn.Module | None:
    """The module a drafter runs (a draft model, the feature draft), or None (prompt lookup)."""
    for name in ("model", "draft"):
        mod = getattr(drafter, name, None)
        if isinstance(mod, torch.nn.Module):
            return mod
    return None


def drafter_key(drafter: Any) -> str:
    """What identifies a drafter's costs: its class and the module it runs (``calibration.model_key``: path,
    class and size, device, dtype), or its class and plain settings (prompt lookup's n-gram sizes)."""
    mod = draft_module(drafter)
    if mod is not None:
        return f"{type(drafter).__name__} of {' / '.join(model_key(mod))}"
    plain = sorted((k, v) for k, v in getattr(drafter, "__dict__", {}).items()
                   if not k.startswith("_") and k != "name" and isinstance(v, (bool, int, float, str)))
    return f"{type(drafter).__name__}({', '.join(f'{k}={v!r}' for k, v in plain)})"


def per_token(drafter: Any) -> bool:
    """Does the drafter pay per drafted token (a model) or once per iteration (a lookup)?"""
    return draft_module(drafter) is not None or bool(getattr(drafter, "draft_per_token", False))


class DraftCostCache:
    """Drafters' costs of this process, per (target, drafter); thread-safe. Entries whose target or draft
    module was built in-process (keyed by identity) die with it."""

    def __init__(self) -> None:
        self._costs: dict[tuple, tuple[DraftCosts, list[weakref.ref]]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(target: torch.nn.Module, drafter: Any) -> tuple:
        return model_key(target), drafter_key(drafter)

    def get(self, target: torch.nn.Module, drafter: Any) -> DraftCosts | None:
        entry = self._costs.get(self.key(target, drafter))
        if entry is None:
            return None
        costs, refs = entry
        return costs if all(r() is not None for r in refs) else None

    def put(self, target: torch.nn.Module, drafter: Any, costs: DraftCosts) -> None:
        mods = [m for m in (target, draft_module(drafter)) if m is not None and model_key(m)[0].startswith("#")]
        with self._lock:
            self._costs[self.key(target, drafter)] = (costs, [weakref.ref(m) for m in mods])

    def clear(self) -> None:
        with self._lock:
            self._costs.clear()


_DRAFT_COSTS = DraftCostCache()


def draft_cost_cache() -> DraftCostCache:
    """The process-wide cache of drafters' costs."""
    return _DRAFT_COSTS


def sizes_needed(cfg: SpecConfig, drafter: Any) -> int:
    """The verify sizes a run can feed: K + 1, or a tree's nodes + 1 where the drafter drafts trees."""
    nodes = cfg.tree_nodes if hasattr(drafter, "propose_tree") else 0
    return max(cfg.k, nodes) + 1


def _prices(cfg: SpecConfig, curve: VerifyCurve, costs: DraftCosts, n: int) -> Prices:
    trimmed = VerifyCurve(curve.key, curve.verify_ms[:n], curve.context, curve.repeats)
    return Prices(trimmed, costs, sampled=not cfg.greedy)


def cached_prices(cfg: SpecConfig, target: torch.nn.Module, drafter: Any) -> Prices | None:
    """The run's prices if this process has measured everything they need, else None; never measures."""
    n = sizes_needed(cfg, drafter)
    curve = calibration.cached(target, n)
    costs = _DRAFT_COSTS.get(target, drafter)
    return _prices(cfg, curve, costs, n) if curve is not None and costs is not None else None


def run_prices(cfg: SpecConfig, target: torch.nn.Module, drafter: Any, generate: Generate,
               pause: Callable[[], None] | None = None) -> Prices:
    """The run's prices, measuring what this process has not yet (``generate``: the engine's run, which times
    the drafter; ``pause``: called between timed rounds and runs). A target that cannot be timed (no KV cache) is
    priced with a flat curve of 1 ms."""
    hit = cached_prices(cfg, target, drafter)
    if hit is not None:
        return hit
    n = sizes_needed(cfg, drafter)
    with calibration.measuring():
        try:
            curve = calibration.calibrate(target, max(n, CAL_K + 1), pause=pause)
        except (ValueError, RuntimeError, TypeError, AttributeError, NotImplementedError, StopIteration):
            curve = VerifyCurve(model_key(target), (1.0,) * max(n, CAL_K + 1), 0, 0)
            calibration.default_cache().put(curve, target)
        costs = drafter_costs(target, drafter, curve, generate, pause)
    return _prices(cfg, curve, costs, n)


def drafter_costs(target: torch.nn.Module, drafter: Any, curve: VerifyCurve, generate: Generate,
                  pause: Callable[[], None] | None = None) -> DraftCosts:
    """The drafter's costs from the cache, else measured (``measure_draft_costs``) and cached; a drafter that
    cannot be timed gets zero costs (``DraftCosts.measured`` False), cached as well."""
    with calibration.measuring():
        hit = _DRAFT_COSTS.get(target, drafter)
        if hit is not None:
            return hit
        try:
            costs = measure_draft_costs(target, drafter, curve, generate, pause)
        except Exception:  # noqa: BLE001 - any drafter may fail here; the run itself then reports its own failure
            costs = DraftCosts(drafter_key(drafter), 0.0, per_token(drafter), measured=False)
        _DRAFT_COSTS.put(target, drafter, costs)
        return costs


def calibration_prompt(target: torch.nn.Module, length: int = CAL_PROMPT) -> list[int]:
    """A fixed synthetic prompt: ``length`` random token ids, then their first half again (so prompt lookup
    finds a match at once and keeps finding some)."""
    vocab = int(target.get_output_embeddings().weight.shape[0])
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (length,), generator=gen).tolist()
    return ids + ids[:length // 2]


def measure_draft_costs(target: torch.nn.Module, drafter: Any, curve: VerifyCurve, generate: Generate,
                        pause: Callable[[], None] | None = None) -> DraftCosts:
    """Short runs of ``drafter`` (a fresh one) with ``target`` at a fixed K through ``generate`` (the engine's
    ``speculative_generate``): see the module docstring."""
    fresh = drafter.fresh if callable(getattr(drafter, "fresh", None)) else (lambda: drafter)
    prompt = calibration_prompt(target)
    tree = hasattr(drafter, "propose_tree")

    def run(tokens: int, temperature: float, nodes: int = 0) -> list[IterationRecord]:
        if pause is not None:
            pause()
        cfg = SpecConfig(k=CAL_K, k_policy="fixed", max_new_tokens=tokens, temperature=temperature, seed=0,
                         full_trace=False, tree_nodes=nodes, tree_top_k=CAL_TREE_TOP_K)
        return generate(target, fresh(), prompt, cfg).iterations

    run(CAL_WARM_TOKENS, 0.0)
    greedy, sampled = run(CAL_TOKENS, 0.0), run(CAL_TOKENS, 1.0)
    trees = run(CAL_TOKENS, 1.0, CAL_TREE_NODES) if tree else []
    level = _level(greedy + sampled + trees, curve)
    pays_per_token = per_token(drafter)

    def draft(its: list[IterationRecord]) -> float:
        steps = [x for it in its for x in it.draft_ms] if pays_per_token else [sum(it.draft_ms)
                                                                                for it in its if it.draft_ms]
        return _median(steps) / level

    def host(its: list[IterationRecord]) -> float:
        return _median([it.other_ms for it in its[1:] or its]) / level

    d = fresh()
    d.start(prompt)
    look = outlook_of(d)
    unseen = getattr(look(prompt, None), "unseen", None) if look else None
    first = sampled[0] if sampled else None          # the second timed run: warm
    catchup = (first.catchup_ms / (unseen - 1) / level
               if first is not None and first.catchup_ms > 0 and unseen and unseen > 1 else 0.0)
    return DraftCosts(drafter_key(drafter), draft(greedy + sampled), pays_per_token, catchup, host(greedy),
                      host(sampled), draft(trees) if trees else None, host(trees) if trees else None)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _level(its: list[IterationRecord], curve: VerifyCurve) -> float:
    """How much slower the runs' verifies were than the curve says (the median ratio; 1 without any)."""
    ratios = [it.verify_ms / curve.verify_ms[fed_tokens(it) - 1] for it in its
              if fed_tokens(it) <= len(curve.verify_ms) and curve.verify_ms[fed_tokens(it) - 1] > 0]
    level = _median(ratios)
    return level if level > 0 else 1.0


def numerics(target: torch.nn.Module, drafter: Any) -> dict:
    """What decides a run's numbers besides its settings: the models (path, class, size, device, dtype) and
    the versions of torch and transformers."""
    import transformers
    return {"target": " / ".join(model_key(target)), "drafter": drafter_key(drafter), "torch": torch.__version__,
            "transformers": transformers.__version__}


def run_fingerprint(cfg: SpecConfig, target: torch.nn.Module, drafter: Any, prices: Prices | dict | None = None
                    ) -> str | None:
    """8 hex digits naming what a run of ``cfg`` depends on besides its settings and seed: ``numerics`` and,
    for the cost-aware policy, its prices (given, or this process's; None when they are not measured yet).
    Two runs of the same settings and seed with the same fingerprint give the same trace (timings aside)."""
    parts = numerics(target, drafter)
    if cfg.k_policy == "cost":
        if prices is None:
            prices = cached_prices(cfg, target, drafter)
            if prices is None:
                return None
        parts["prices"] = (prices.to_dict() if isinstance(prices, Prices) else prices).get("prices")
    text = repr(sorted(parts.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


__all__ = ["run_prices", "cached_prices", "drafter_costs", "measure_draft_costs", "drafter_key", "draft_module",
           "draft_cost_cache", "sizes_needed", "run_fingerprint", "numerics", "calibration_prompt"]
