"""One iteration's steps 1-4 for a token tree (``engine`` runs them when ``SpecConfig.tree_nodes`` > 0 and
the drafter can draft a tree), and the iteration's records.

 1. draft  - the drafter proposes a tree of up to N nodes, at most ``tree_top_k`` children per node and
             the depth the K policy allows (``checked_tree_proposal``);
 2. target - ONE target forward over the unseen tokens and every node, with the tree attention mask
             (``TargetModel.tree_forward``): N + 1 rows of logits;
 3. verify - ``tree_verify.verify_tree``: the accepted path, then a replacement or a bonus token;
 4. keep   - the accepted path's keys/values moved into place in the target's cache (and its features
             handed to a feature-reading drafter), the drafter told the path (``rollback_tree``).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..bugs import InjectedBugs
from ..drafters.tree import TreeProposal
from ..timing import now_ms
from ..trace import BonusRecord, DraftRecord, ResampledRecord, TreeNodeRecord, TreeRecord
from .proposal_check import checked_tree_proposal
from .record import Step, cut_at_eos, with_text
from .run_state import RunState
from .tree_verify import TreeVerdict, verify_tree


def tree_step(r: RunState, ids: list[int], n_nodes: int, depth: int, top_k: int, bugs: InjectedBugs,
              target: torch.nn.Module, show: bool) -> Step:
    """Steps 1-4 (module docstring) from ``ids``, with the run's drafter, target, generator, ... (``r``)."""
    tgt, drafter, device = r.tgt, r.drafter, r.tgt.device
    # 1. draft a tree (checked: a proposal that breaks the protocol is refused)
    prop = checked_tree_proposal(drafter, ids, n_nodes, top_k, depth, r.policy.at(len(ids)), target, device)
    # 2. one target forward over [unseen tokens] + the nodes -> N + 1 rows of logits
    t_v = now_ms(device)
    logits = tgt.tree_forward(ids, prop.tokens, prop.parents)
    verify_ms = now_ms(device) - t_v
    # 3. verify: the accepted path, then the replacement or bonus token
    verdict = verify_tree(logits, prop, r.warping, r.gen, bugs, show=show,
                          noise=r.noise_from(len(ids), logits.shape[-1]))
    emitted = cut_at_eos(verdict.emitted, r.eos)
    # 4. keep the accepted path in both caches (at least one token stays unseen)
    valid = len(ids) + min(verdict.n_accepted, len(emitted) - 1)
    tgt.keep_path(verdict.path, valid)
    if r.reads_features:   # the chain's rows, then the path's: as if the path had been verified as a chain
        drafter.observe_features(tgt.features_from, tgt.features)
    rollback_tree = getattr(drafter, "rollback_tree", None)
    if rollback_tree is not None:
        rollback_tree(valid, verdict.path)
    else:
        drafter.rollback(valid)
    drafts, resampled, bonus, tree = tree_records(verdict, prop, emitted, r.text, show)
    return Step(prop=prop, verify_ms=verify_ms, n_accepted=len(drafts), emitted=emitted, drafts=drafts,
                resampled=resampled, bonus=bonus, tree=tree)


def tree_records(v: TreeVerdict, prop: TreeProposal, emitted: list[int], text: Callable[[int], str],
                 show: bool) -> tuple[list[DraftRecord], ResampledRecord | None, BonusRecord | None, TreeRecord]:
    """The accepted path as the iteration's drafts (cut where an EOS cut the emitted tokens), the replacement
    (every child of the path's last node failed) or the bonus (the path reached a leaf) when it was emitted,
    and the whole tree."""
    kept = v.path[:len(emitted)]
    coupled = v.rule == "coupled"
    drafts = [DraftRecord(token_id=prop.tokens[i], text=text(prop.tokens[i]) if show else "", q=v.q[i], p=v.p[i],
                          alpha=v.accept_prob(i), u=v.u[i], accepted=True, tested=True,
                          p_raw=None if v.p_raw is None else v.p_raw[i],
                          q_raw=None if v.q_raw is None else v.q_raw[i],
                          target_token=prop.tokens[i] if coupled else None) for i in kept]
    resampled = bonus = None
    if len(emitted) > len(v.path):
        if v.rejected:
            resampled = ResampledRecord(
                token_id=v.token, text=text(v.token), p=v.token_p, position=len(v.path),
                residual_prob=v.token_residual_prob, residual_top=with_text(v.residual_top, text),
                p_top=with_text(v.p_top, text), q_top=with_text(v.q_top, text), q=v.token_q)
        else:
            bonus = BonusRecord(token_id=v.token, text=text(v.token), p=v.token_p)
    nodes = [TreeNodeRecord(token_id=t, text=text(t) if show else "", parent=prop.parents[i], q=v.q[i], p=v.p[i],
                            status=v.status[i], alpha=v.alpha[i], u=v.u[i]) for i, t in enumerate(prop.tokens)]
    return drafts, resampled, bonus, TreeRecord(nodes=nodes, siblings=prop.siblings, rule=v.rule, path=list(v.path))
