"""The engine with token trees (SpecConfig.tree_nodes > 0) on tiny models: greedy output equals the target's,
the trace records each tree and round-trips through the validating loader, which refuses broken trees;
tree_nodes = 0 and drafters without trees keep chains."""
from __future__ import annotations

import copy

import pytest
import torch

from specdec_core import SpecConfig, speculative_generate
from specdec_core.bugs import InjectedBugs
from specdec_core.drafters.ngram import NGramDrafter
from specdec_core.trace import Trace
from tests.conftest import make_tiny_lm
from tests.tree_helpers import TreeTestDrafter

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [1, 2, 3, 1, 2, 5, 7]


@pytest.fixture(scope="module")
def pair():
    """A tiny target and a draft that is the target with a noisy head: they agree often, not always."""
    target = make_tiny_lm(vocab_size=16, seed=1, scale=3.0, layers=2)
    draft = copy.deepcopy(target)
    with torch.no_grad():
        noise = torch.randn(draft.lm_head.weight.shape, generator=torch.Generator().manual_seed(0))
        draft.lm_head.weight.add_(0.05 * noise)
    return target, draft


@torch.inference_mode()
def _greedy(model, ids, n):
    ids = list(ids)
    for _ in range(n):
        ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[-n:]


@pytest.mark.parametrize("siblings", ["distinct", "independent"])
@pytest.mark.parametrize("nodes,top_k,k", [(6, 2, 4), (12, 3, 4), (3, 3, 1)])
def test_greedy_tree_output_is_the_targets(pair, siblings, nodes, top_k, k):
    target, draft = pair
    cfg = SpecConfig(k=k, tree_nodes=nodes, tree_top_k=top_k, max_new_tokens=24)
    trace = speculative_generate(target, TreeTestDrafter(draft, siblings), PROMPT, cfg)
    assert trace.new_token_ids == _greedy(target, PROMPT, 24)
    assert all(it.tree is not None and it.tree.rule == "greedy" for it in trace.iterations if it.k > 0)
    trees = [it.tree for it in trace.iterations if it.tree is not None]
    assert max(len(t.path) for t in trees) >= min(2, k)                 # the trees were used
    assert sum(len(t.nodes) for t in trees) == trace.stats.drafted
    assert sum(len(t.path) for t in trees) == trace.stats.accepted
    assert trace.stats.target_forwards == 1 + len(trace.iterations)     # prefill, then ONE forward per tree


@pytest.mark.parametrize("siblings,rule", [("distinct", "target_draw"), ("independent", "recursive_rejection")])
def test_sampled_tree_trace_round_trips(pair, siblings, rule):
    target, draft = pair
    cfg = SpecConfig(k=3, tree_nodes=7, tree_top_k=2, temperature=0.8, top_k=8, max_new_tokens=30, seed=4)
    trace = speculative_generate(target, TreeTestDrafter(draft, siblings), PROMPT, cfg)
    assert {it.tree.rule for it in trace.iterations if it.tree} == {rule}
    assert trace.config["tree_nodes"] == 7 and trace.config["tree_top_k"] == 2
    d = trace.to_dict()
    assert Trace.from_dict(copy.deepcopy(d)).to_dict() == d
    again = speculative_generate(target, TreeTestDrafter(draft, siblings), PROMPT, cfg)
    assert again.new_token_ids == trace.new_token_ids                   # one seed, one trace


class ChainOnlyLookup:
    """Prompt lookup without ``propose_tree``: a drafter that cannot draft trees."""
    name = "chain-only lookup"

    def __init__(self) -> None:
        self.inner = NGramDrafter()

    def start(self, prompt_ids: list[int]) -> int:
        return self.inner.start(prompt_ids)

    def propose(self, ids, k, policy):
        return self.inner.propose(ids, k, policy)

    def rollback(self, valid_len: int) -> None:
        self.inner.rollback(valid_len)


def test_chains_stay_chains(pair):
    """tree_nodes = 0 writes no tree settings and no trees; with tree_nodes > 0 a drafter that cannot draft trees
    runs chains, and prompt lookup, which can, drafts a tree every iteration."""
    target, draft = pair
    trace = speculative_generate(target, TreeTestDrafter(draft), PROMPT, SpecConfig(k=3, max_new_tokens=10))
    assert "tree_nodes" not in trace.config and "tree_top_k" not in trace.config
    assert all(it.tree is None for it in trace.iterations)
    assert all("tree" not in it for it in trace.to_dict()["iterations"])
    cfg = SpecConfig(k=3, tree_nodes=8, max_new_tokens=10)
    chains = speculative_generate(target, ChainOnlyLookup(), PROMPT, cfg)
    assert all(it.tree is None for it in chains.iterations) and any(it.drafts for it in chains.iterations)
    trees = speculative_generate(target, NGramDrafter(), PROMPT, cfg)
    assert all(it.tree is not None and it.tree.siblings == "distinct" for it in trees.iterations)
    assert any(it.tree.nodes for it in trees.iterations)
    assert trees.new_token_ids == chains.new_token_ids                  # greedy: the target's text either way


@pytest.mark.parametrize("bad,value", [(-1, "tree_nodes"), (65, "tree_nodes"), (1.5, "tree_nodes"),
                                       (0, "tree_top_k"), (9, "tree_top_k"), (True, "tree_top_k")])
def test_config_refuses_bad_tree_settings(bad, value):
    with pytest.raises(ValueError, match=value):
        SpecConfig(**{value: bad})


@pytest.fixture(scope="module")
def tree_trace(pair):
    target, draft = pair
    cfg = SpecConfig(k=3, tree_nodes=6, tree_top_k=2, temperature=1.0, max_new_tokens=30, seed=1)
    trace = speculative_generate(target, TreeTestDrafter(draft, "independent"), PROMPT, cfg)
    assert any(it.tree.path and it.resampled for it in trace.iterations)
    return trace.to_dict()


def _first(d, pred):
    return next(it for it in d["iterations"] if pred(it))


def _with_rejection(it):
    return it["resampled"] is not None and it["tree"]["path"]


def _wrong_first_alpha(d):
    """The root's first child tested with an alpha other than min(1, p/q) (its u kept consistent with it)."""
    it = _first(d, lambda it: it["tree"]["nodes"])
    n = it["tree"]["nodes"][0]
    alpha = 0.5 if abs(n["alpha"] - 0.5) > 0.1 else 0.9
    n.update(alpha=alpha, u=0.0 if n["status"] == "accepted" else alpha)


def _mutations():
    """(name, mutate(trace dict), the message expected)."""
    def node(it, i):
        return it["tree"]["nodes"][i]

    def rejected_first(it):
        return next(i for i, n in enumerate(it["tree"]["nodes"]) if n["status"] == "rejected")

    return [
        ("parent after", lambda d: node(_first(d, _with_rejection), 0).update(parent=3), "parent"),
        ("parent loop", lambda d: node(_first(d, _with_rejection), 1).update(parent=1), "parent"),
        ("bad status", lambda d: node(_first(d, _with_rejection), 0).update(status="maybe"), "status"),
        ("bad rule", lambda d: _first(d, _with_rejection)["tree"].update(rule="ratio"), "rule"),
        ("bad siblings", lambda d: _first(d, _with_rejection)["tree"].update(siblings="all"), "siblings"),
        ("path not down", lambda d: _first(d, _with_rejection)["tree"].update(
            path=_first(d, _with_rejection)["tree"]["path"][::-1] + [0]), "path"),
        ("path index", lambda d: _first(d, _with_rejection)["tree"].update(path=[99]), "path"),
        ("u contradicts", lambda d: (lambda it: node(it, rejected_first(it)).update(u=0.0))(
            _first(d, _with_rejection)), "contradicts"),
        ("too many nodes", lambda d: _first(d, _with_rejection)["tree"].update(
            nodes=_first(d, _with_rejection)["tree"]["nodes"] * 20), "nodes"),
        ("not a tree", lambda d: _first(d, _with_rejection).update(tree=[1, 2]), "tree"),
        ("bonus at a rejection", lambda d: (lambda it: it.update(
            bonus={"token_id": it["resampled"]["token_id"], "text": "", "p": 0.5}, resampled=None))(
            _first(d, _with_rejection)), "bonus"),
        ("drafts not the path", lambda d: _first(d, _with_rejection)["drafts"].pop(), "path"),
        ("first alpha", _wrong_first_alpha, "alpha"),
    ]


@pytest.mark.parametrize("name,mutate,message", _mutations(), ids=[m[0] for m in _mutations()])
def test_broken_trees_are_refused(tree_trace, name, mutate, message):
    d = copy.deepcopy(tree_trace)
    mutate(d)
    with pytest.raises(ValueError, match=message):
        Trace.from_dict(d)


def test_the_topk_ratio_bug_changes_the_rule(pair):
    target, draft = pair
    cfg = SpecConfig(k=2, tree_nodes=4, tree_top_k=2, temperature=1.0, max_new_tokens=8)
    trace = speculative_generate(target, TreeTestDrafter(draft), PROMPT, cfg, bugs=InjectedBugs(topk_ratio_rule=True))
    assert {it.tree.rule for it in trace.iterations if it.tree} == {"recursive_rejection"}
    Trace.from_dict(trace.to_dict())


def test_cli_tree_flags(capsys):
    from specdec_core.cli import build_parser, config_from_args, main
    cfg = config_from_args(build_parser().parse_args(["--prompt", "x", "--tree-nodes", "12", "--tree-top-k", "3"]))
    assert (cfg.tree_nodes, cfg.tree_top_k) == (12, 3)
    for flags, message in ((["--tree-nodes", "65"], "tree nodes must be between 0 (a chain) and 32, got 65"),
                           (["--tree-top-k", "9"], "tree top-k (children per node) must be between 1 and 8, got 9")):
        assert main(["--prompt", "x", *flags]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("change,message", [
    (dict(tokens=[1] * 5, parents=[-1, -1, 0, 0, 1]), "5 tokens for nodes asked = 4"),
    (dict(tokens=[1, 2, 3], parents=[-1, -1, -1]), "3 children, more than top_k = 2"),
    (dict(tokens=[1, 2, 3, 4], parents=[-1, 0, 1, 2]), "4 deep, more than the depth cap 3"),
    (dict(tokens=[1, 99]), "outside the vocabulary"),
])
def test_bad_tree_proposals_are_refused(change, message):
    from specdec_core.decoding.proposal_check import ProposalError, check_tree_proposal
    from specdec_core.drafters.tree import TreeProposal
    prop = TreeProposal(**{**dict(tokens=[1, 2], parents=[-1, 0], siblings="distinct", draft_probs=None), **change})
    with pytest.raises(ProposalError, match=message):
        check_tree_proposal(prop, 4, 2, 3, 16, torch.device("cpu"), sampling=True)
