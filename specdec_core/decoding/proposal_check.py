"""What a drafter returns, checked before the target scores it.

The drafter protocol is public (``drafters.Drafter``), so the engine does not trust a proposal: a token
id outside the vocabulary would be scored as some other token (negative ids index from the end) or
crash the target's embedding, and a q that is not a distribution breaks α = min(1, p/q) and the residual
norm(max(0, p − q)) silently. ``checked_proposal`` calls the drafter and refuses a bad proposal with a
``ProposalError`` naming the problem; an exception raised inside the drafter becomes a ``DrafterError``
naming the drafter. Both are RuntimeErrors, so a UI that reports engine failures reports these too.
``checked_tree_proposal`` does the same for a token tree (``drafters.tree.TreeProposal``).
All numeric checks of q run on the device and come back to the host in one transfer.
"""
from __future__ import annotations

from typing import Any

import torch

from ..drafters.base import DraftPolicy, Proposal
from ..drafters.tree import TreeProposal, check_tree, depths
from ..trace import MAX_REASON

ROW_SUM_TOL = {torch.float16: 2e-2, torch.bfloat16: 2e-2}   # others: 1e-3


class DrafterError(RuntimeError):
    """The drafter raised while proposing."""


class ProposalError(RuntimeError):
    """The drafter returned something the engine cannot score."""


def vocab_size_of(target: torch.nn.Module) -> int:
    return int(target.get_output_embeddings().weight.shape[0])


def checked_proposal(drafter: Any, ids: list[int], k: int, policy: DraftPolicy, target: torch.nn.Module,
                     device: torch.device) -> Proposal:
    """``drafter.propose(ids, k, policy)``, checked by ``check_proposal`` against the target's vocabulary."""
    name = getattr(drafter, "name", type(drafter).__name__)
    try:
        prop = drafter.propose(ids, k, policy)
    except Exception as e:  # noqa: BLE001 - any failure of third-party code ends the run with its name
        raise DrafterError(f"the drafter {name!r} failed while proposing: {type(e).__name__}: {e}") from e
    check_proposal(prop, k, vocab_size_of(target), device, sampling=not policy.greedy, name=name)
    return prop


def checked_tree_proposal(drafter: Any, ids: list[int], n_nodes: int, top_k: int, max_depth: int,
                          policy: DraftPolicy, target: torch.nn.Module, device: torch.device) -> TreeProposal:
    """``drafter.propose_tree(ids, n_nodes, top_k, policy, max_depth)``, checked by ``check_tree_proposal``."""
    name = getattr(drafter, "name", type(drafter).__name__)
    try:
        prop = drafter.propose_tree(ids, n_nodes, top_k, policy, max_depth)
    except Exception as e:  # noqa: BLE001 - any failure of third-party code ends the run with its name
        raise DrafterError(f"the drafter {name!r} failed while proposing a tree: {type(e).__name__}: {e}") from e
    check_tree_proposal(prop, n_nodes, top_k, max_depth, vocab_size_of(target), device,
                        sampling=not policy.greedy, name=name)
    return prop


def check_tree_proposal(prop: Any, n_nodes: int, top_k: int, max_depth: int, vocab_size: int,
                        device: torch.device, *, sampling: bool, name: str = "drafter") -> None:
    """Raise ProposalError unless ``prop`` is a TreeProposal of at most ``n_nodes`` nodes, at most ``top_k``
    children per node, at most ``max_depth`` deep, whose tokens and q pass ``check_proposal``'s checks
    (q(x) > 0 asked of independently drawn siblings only: distinct ones are chosen, not drawn)."""
    def fail(what: str) -> None:
        raise ProposalError(f"the drafter {name!r} returned a bad tree: {what}")

    if not isinstance(prop, TreeProposal):
        fail(f"expected a TreeProposal, got {type(prop).__name__}")
    try:
        check_tree(prop.parents)
    except ValueError as e:
        fail(str(e))
    if len(prop.parents) != len(prop.tokens):
        fail(f"{len(prop.tokens)} tokens but {len(prop.parents)} parents")
    if prop.parents:
        widest = max(prop.parents.count(p) for p in set(prop.parents))
        if widest > top_k:
            fail(f"a node has {widest} children, more than top_k = {top_k}")
        if max(depths(prop.parents)) > max_depth:
            fail(f"the tree is {max(depths(prop.parents))} deep, more than the depth cap {max_depth}")
    _check_tokens_and_q(prop, n_nodes, vocab_size, device, sampling and prop.siblings == "independent", fail,
                        "nodes asked")


def check_proposal(prop: Any, k: int, vocab_size: int, device: torch.device, *, sampling: bool,
                   name: str = "drafter") -> None:
    """Raise ProposalError unless ``prop`` is a Proposal of at most ``k`` token ids in [0, vocab_size) whose
    ``draft_probs`` is None (a point mass) or a (len(tokens), vocab_size) float tensor on ``device`` whose
    rows are distributions (finite, non-negative, summing to 1) and, when sampling, give each drafted token
    q(x) > 0 (a token cannot be drawn from a distribution that gives it no mass)."""
    def fail(what: str) -> None:
        raise ProposalError(f"the drafter {name!r} returned a bad proposal: {what}")

    if not isinstance(prop, Proposal):
        fail(f"expected a Proposal, got {type(prop).__name__}")
    _check_tokens_and_q(prop, k, vocab_size, device, sampling, fail)


def _check_tokens_and_q(prop: Proposal | TreeProposal, k: int, vocab_size: int, device: torch.device,
                        sampling: bool, fail: Any, limit_name: str = "K") -> None:
    tokens = prop.tokens
    if not isinstance(tokens, (list, tuple)):
        fail(f"tokens must be a list of ints, got {type(tokens).__name__}")
    if len(tokens) > k:
        fail(f"{len(tokens)} tokens for {limit_name} = {k}")
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int):
            fail(f"token {i} is {t!r} ({type(t).__name__}), not an int token id")
        if not 0 <= t < vocab_size:
            fail(f"token id {t} at position {i} is outside the vocabulary [0, {vocab_size})")
    if not isinstance(prop.stop, str) or len(prop.stop) > MAX_REASON:
        fail(f"stop must be a string of at most {MAX_REASON} characters, got {type(prop.stop).__name__}"
             + (f" of {len(prop.stop)}" if isinstance(prop.stop, str) else ""))
    for field in ("draft_probs", "raw_probs"):
        q = getattr(prop, field)
        if q is None:
            continue
        if not isinstance(q, torch.Tensor):
            fail(f"{field} must be a tensor or None, got {type(q).__name__}")
        if tuple(q.shape) != (len(tokens), vocab_size):
            fail(f"{field} has shape {tuple(q.shape)}, expected (len(tokens), V) = ({len(tokens)}, {vocab_size})")
        if not q.is_floating_point():
            fail(f"{field} must be floating point, got {q.dtype}")
        if q.device != device:
            fail(f"{field} is on {q.device}, the target on {device}")
    q = prop.draft_probs
    if q is None or len(tokens) == 0:
        return
    qf = q.float()
    q_x = qf[torch.arange(len(tokens), device=q.device), torch.tensor(tokens, device=q.device)]
    sums = qf.sum(-1)
    worst = sums[(sums - 1).abs().argmax()]                     # the row sum furthest from 1
    finite, low, worst_sum, low_x = torch.stack([torch.isfinite(qf).all().float(), qf.min(), worst,
                                                 q_x.min()]).tolist()
    if not finite:
        fail("draft_probs holds NaN or infinite values")
    if low < 0:
        fail(f"draft_probs holds negative values (min {low:.3g})")
    if abs(worst_sum - 1) > ROW_SUM_TOL.get(q.dtype, 1e-3):
        fail(f"a draft_probs row sums to {worst_sum:.4g}, not 1 (each row must be a distribution)")
    if sampling and low_x <= 0:
        fail("a drafted token has q(x) = 0 in its own draft_probs row: it cannot have been drawn from it")
