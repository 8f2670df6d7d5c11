"""Tree drafting (``drafters.tree_build``, ``propose_tree`` / ``rollback_tree`` on every drafter kind): the trees
are valid, within their budget, depth cap and branching; q rows are the draft's distribution at each node's
parent, computed as a chain forward over the path would; the greedy tree holds the greedy chain; after a
verify the draft's cache holds the accepted path and nothing else."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec_core.decoding.target import TargetModel
from specdec_core.drafters.base import DraftPolicy
from specdec_core.drafters.feature import FeatureDraft, FeatureDrafter
from specdec_core.drafters.model import ModelDrafter
from specdec_core.drafters.ngram import NGramDrafter, find_matches, lookup_tree
from specdec_core.drafters.tree import check_tree, children, depths
from tests.tree_helpers import path_to
from specdec_core.drafters.tree_build import best_subtree, grow_tree
from specdec_core.sampling import warp_logits
from tests.conftest import make_tiny_lm

pytestmark = pytest.mark.usefixtures("one_thread")

V = 16
IDS = [1, 5, 7, 2, 9, 4, 3]
GREEDY = DraftPolicy(0.0, 0, 1.0, None)


def sampling(temperature: float = 0.7, top_k: int = 0, top_p: float = 0.9, seed: int = 0) -> DraftPolicy:
    return DraftPolicy(temperature, top_k, top_p, torch.Generator().manual_seed(seed))


def assert_shape(prop, n_nodes: int, top_k: int, max_depth: int) -> None:
    check_tree(prop.parents)
    assert 0 < len(prop.tokens) <= n_nodes
    assert max(depths(prop.parents)) <= max_depth
    for node in [-1] + list(range(len(prop.parents))):
        kids = children(prop.parents, node)
        assert len(kids) <= top_k
        if prop.siblings == "distinct":
            assert len({prop.tokens[k] for k in kids}) == len(kids)


def top_path(prop) -> list[int]:
    """Tokens of the path that always takes the first (best) child."""
    out, node = [], -1
    while kids := children(prop.parents, node):
        node = kids[0]
        out.append(prop.tokens[node])
    return out


# --- shared pieces ------------------------------------------------------------------------------------------

def test_best_subtree_keeps_the_best_nodes_with_their_ancestors_breadth_first():
    #            0(.5)         1(.4)
    #        2(.3)  3(.1)      4(.4)
    #        5(.2)
    parents = [-1, -1, 0, 0, 1, 2]
    scores = [0.5, 0.4, 0.3, 0.1, 0.4, 0.2]
    layout, new_parents = best_subtree(parents, scores, 4)
    assert layout == [0, 1, 2, 4]                      # 4 (0.4) and 2 (0.3) beat 5 and 3; by level, parent order
    assert new_parents == [-1, -1, 0, 1]
    assert best_subtree(parents, scores, 3)[0] == [0, 1, 4]   # ties at 0.4: the shallower node (1) first
    assert best_subtree(parents, scores, 0) == ([], [])
    assert best_subtree(parents, scores, 9)[0] == [0, 1, 2, 3, 4, 5]   # siblings best first: 2 before 3


def table_step(table: dict[tuple[int, ...], torch.Tensor]):
    """A draft whose logits after a path are looked up in ``table`` (missing paths: uniform)."""
    seen = []

    def step(nodes, tokens, parents):
        seen.append(list(nodes))
        rows = []
        for n in nodes:
            path = [tokens[i] for i in path_to(parents, n)]
            rows.append(table.get(tuple(path), torch.zeros(V)))
        return torch.stack(rows)
    return step, seen


def peaked(*pairs: tuple[int, float]) -> torch.Tensor:
    """Logits whose softmax puts ``mass`` on each listed token (the rest spread over the others)."""
    probs = torch.full((V,), 1e-3)
    for tok, mass in pairs:
        probs[tok] = mass
    return (probs / probs.sum()).log()


def test_grow_tree_expands_the_most_confident_frontier_and_keeps_the_best_n():
    table = {(): peaked((3, 0.6), (4, 0.3)),
             (3,): peaked((5, 0.9)), (4,): peaked((6, 0.5), (7, 0.4)),
             (3, 5): peaked((8, 0.9))}
    step, seen = table_step(table)
    prop, layout = grow_tree(table[()], step, n_nodes=5, top_k=2, max_depth=4, policy=GREEDY,
                             device=torch.device("cpu"))
    assert_shape(prop, 5, 2, 4)
    assert prop.siblings == "distinct" and prop.draft_probs is None
    assert prop.tokens[:2] == [3, 4]                   # the root's top two, best first
    assert top_path(prop) == [3, 5, 8]                 # joint 0.6, 0.54, 0.49: deeper beats 4's children (0.15)
    assert sorted(prop.tokens) == [3, 4, 5, 6, 8]      # 3,5,8 + 4 (0.3) + 6 (0.15) over 7 (0.12)
    assert prop.forwards == len(prop.forward_ms) == 1 + len(seen)
    assert len(layout) == len(prop.tokens)


def test_grow_tree_respects_depth_budget_and_branching():
    step, seen = table_step({})
    prop, _ = grow_tree(torch.zeros(V), step, n_nodes=30, top_k=3, max_depth=2, policy=GREEDY,
                        device=torch.device("cpu"))
    assert_shape(prop, 30, 3, 2)
    assert len(prop.tokens) == 3 + 9 and len(seen) == 1 and len(seen[0]) == 3   # one level of 3 fed
    prop, _ = grow_tree(torch.zeros(V), step, n_nodes=1, top_k=3, max_depth=5, policy=GREEDY,
                        device=torch.device("cpu"))
    assert len(prop.tokens) == 1


def test_grow_tree_stops_at_the_end_of_sequence_and_below_the_confidence_stop():
    table = {(): peaked((3, 0.9), (4, 0.05)), (3,): peaked((5, 0.3), (6, 0.3))}
    step, seen = table_step(table)
    eos = DraftPolicy(0.0, 0, 1.0, None, eos_token_id=3)
    prop, _ = grow_tree(table[()], step, 6, 2, 4, eos, torch.device("cpu"))
    assert seen[0] == [1] and not children(prop.parents, 0)   # nothing after the end-of-sequence token ...
    stop = DraftPolicy(0.0, 0, 1.0, None, confidence_stop=0.5)
    step, seen = table_step(table)
    prop, _ = grow_tree(table[()], step, 6, 2, 4, stop, torch.device("cpu"))
    assert seen == [[0]]                                 # ... nor below the stop: only 3 (0.9) is expanded
    assert sorted(prop.tokens) == [3, 4, 5, 6]


def test_sampled_trees_carry_the_warped_q_at_each_parent():
    table = {(): peaked((3, 0.6), (4, 0.3)), (3,): peaked((5, 0.5), (6, 0.4)), (4,): peaked((7, 0.8))}
    pol = sampling(0.7, top_k=5, top_p=0.95)
    for siblings in ("distinct", "independent"):
        step, _ = table_step(table)
        prop, _ = grow_tree(table[()], step, 6, 2, 3, pol, torch.device("cpu"), siblings=siblings)
        assert prop.siblings == siblings
        assert prop.draft_probs.shape == (len(prop.tokens), V)
        for i, p in enumerate(prop.parents):
            ctx = tuple(prop.tokens[j] for j in path_to(prop.parents, p))
            q = warp_logits(table.get(ctx, torch.zeros(V)), 0.7, 5, 0.95)
            assert torch.allclose(prop.draft_probs[i], q)
            assert prop.draft_probs[i, prop.tokens[i]] > 0           # drawn or ranked from q: never q = 0
            assert torch.allclose(prop.raw_probs[i], table.get(ctx, torch.zeros(V)).softmax(-1))
        if siblings == "distinct":
            assert [prop.tokens[i] for i in children(prop.parents, -1)] == [3, 4]   # the top two of q


# --- prompt lookup ---------------------------------------------------------------------------------------------

def test_prompt_lookup_branches_where_occurrences_continue_differently():
    ids = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3, 4, 6, 0, 1, 2, 3]
    found = find_matches(np.asarray(ids), 3)
    assert [m.start for m in found] == [14, 9, 3]      # equal agreement: the most recent first
    tokens, parents = lookup_tree(ids, found, 8, 3, 5)
    check_tree(parents)
    assert tokens[:2] == [4, 7] and parents[:2] == [-1, -1]   # "4" follows two occurrences, "7" one
    assert [tokens[i] for i in children(parents, 0)] == [6, 5]  # after 1 2 3 4: 6 (most recent) or 5
    tokens, parents = lookup_tree(ids, found, 8, 1, 5)
    assert parents == [-1, 0, 1, 2, 3]                 # one child per node: the chain of the heaviest branch
    tokens, parents = lookup_tree(ids, found, 3, 3, 1)
    assert tokens == [4, 7] and parents == [-1, -1]    # depth 1: the distinct next tokens
    d = NGramDrafter()
    d.start(ids[:5])
    prop = d.propose_tree(ids, 8, 3, GREEDY, 5)
    assert_shape(prop, 8, 3, 5)
    assert prop.draft_probs is None and prop.siblings == "distinct" and prop.forwards == 0
    assert d.propose(ids, 5, GREEDY).tokens == [4, 6, 0, 1, 2]   # the chain: the best match's continuation


def test_prompt_lookup_tree_weighs_matches_by_their_length_and_stops_at_eos():
    # "8 1 2" occurs twice; the occurrence after "5 8 1 2" agrees one token further back with the end
    ids = [5, 8, 1, 2, 3, 3, 6, 8, 1, 2, 4, 0, 5, 8, 1, 2]
    found = find_matches(np.asarray(ids), 3)
    assert found[0].start == 4 and found[0].length == 4
    tokens, parents = lookup_tree(ids, found, 4, 2, 4, eos_token_id=0)
    assert tokens == [3, 3, 6, 8]                      # the longer match's continuation (weight 4 against 3)
    tokens, parents = lookup_tree(ids, found, 9, 2, 4, eos_token_id=0)
    assert tokens == [3, 4, 3, 0, 6, 8] and parents == [-1, -1, 0, 1, 2, 4]   # the other ends at its EOS (0)
    assert NGramDrafter().propose_tree([1, 2, 3], 4, 2, GREEDY, 3).stop == "no n-gram match"


# --- model drafts ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    target = make_tiny_lm(V, seed=1, layers=2, hidden=32)
    draft = make_tiny_lm(V, seed=2, layers=2, hidden=32, scale=2.0)
    return target, draft


def chain_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


def test_model_draft_tree_rows_are_chain_forwards_and_the_greedy_chain_is_in_it(tiny):
    _, draft = tiny
    d = ModelDrafter(draft)
    d.start(IDS)
    chain = d.propose(IDS, 3, GREEDY).tokens
    d = ModelDrafter(draft)
    d.start(IDS)
    prop = d.propose_tree(IDS, 14, 2, sampling(1.0, top_p=1.0), 3)
    assert_shape(prop, 14, 2, 3)
    for i, p in enumerate(prop.parents):               # each row: the draft's q after the path to the parent
        ctx = IDS + [prop.tokens[j] for j in path_to(prop.parents, p)]
        assert torch.allclose(prop.draft_probs[i], chain_logits(draft, ctx).softmax(-1), atol=1e-5)
    d = ModelDrafter(draft)
    d.start(IDS)
    greedy = d.propose_tree(IDS, 14, 2, GREEDY, 3)
    assert top_path(greedy) == chain
    assert greedy.forwards == 4                        # a catch-up over the prompt, the root's, one per level


def test_model_draft_cache_keeps_only_the_accepted_path(tiny):
    _, draft = tiny
    d = ModelDrafter(draft)
    d.start(IDS)
    prop = d.propose_tree(IDS, 10, 3, GREEDY, 3)
    path = path_to(prop.parents, max(range(len(prop.tokens)), key=lambda i: depths(prop.parents)[i]))
    accepted = [prop.tokens[i] for i in path]
    d.rollback_tree(len(IDS) + len(path), path)         # the target keeps the path; the next token is unseen
    assert d.cache_len == d.cache.get_seq_length() == len(IDS) + min(len(path), 2)   # the leaf was never fed
    nxt = IDS + accepted + [4]
    fresh = ModelDrafter(draft)
    fresh.start(nxt)
    a = d.propose(nxt, 2, sampling(1.0, top_p=1.0)).draft_probs
    b = fresh.propose(nxt, 2, sampling(1.0, top_p=1.0)).draft_probs
    assert torch.allclose(a, b, atol=1e-5)              # as if the path had been drafted as a chain


# --- the feature-reading draft ----------------------------------------------------------------------------------

def feature_drafter(target, draft) -> FeatureDrafter:
    d = FeatureDrafter(draft)
    d.start(IDS)
    tm = TargetModel(target, keep_features=True)
    tm.forward(IDS[:-1])
    d.observe_features(tm.features_from, tm.features)
    return d


def test_feature_draft_tree_holds_the_greedy_chain_and_its_q_rows(tiny):
    target, _ = tiny
    draft = FeatureDraft(target, 0, torch.arange(V - 2))     # two tokens outside the draft vocabulary
    chain = feature_drafter(target, draft).propose(IDS, 3, GREEDY)
    greedy = feature_drafter(target, draft).propose_tree(IDS, 16, 2, GREEDY, 3)
    assert_shape(greedy, 16, 2, 3)
    assert top_path(greedy) == chain.tokens                # the chain is the tree's best-first path
    pol = sampling(1.0, top_p=1.0)
    chain = feature_drafter(target, draft).propose(IDS, 3, pol)
    tree = feature_drafter(target, draft).propose_tree(IDS, 16, 1, pol, 3)   # one child per node: a chain
    assert tree.parents == [-1, 0, 1]
    assert tree.tokens[0] == int(chain.draft_probs[0].argmax())
    assert torch.allclose(tree.draft_probs[0], chain.draft_probs[0], atol=1e-6)
    assert (tree.draft_probs[:, V - 2:] == 0).all()           # q = 0 outside the draft vocabulary
    d = feature_drafter(target, draft)
    prop = d.propose_tree(IDS, 8, 4, sampling(0.7), 3)
    assert_shape(prop, 8, 4, 3)
    d.rollback_tree(len(IDS) + 1, [0])
    assert d.true_len == len(IDS) - 1 == d.cache.get_seq_length()   # the tree's guessed rows are gone


def test_shipped_feature_draft_tree_holds_its_greedy_chain(bundled):
    from specdec_core.drafters.registry import shipped_draft_for
    from specdec_core.models.loading import encode_prompt
    target, tok = bundled
    ids = encode_prompt(tok, "Explain how a refrigerator keeps food cold.", chat=True)

    def ready() -> FeatureDrafter:
        d = shipped_draft_for("feature", target).make_drafter()
        d.start(ids)
        tm = TargetModel(target, keep_features=True)
        tm.forward(ids[:-1])
        d.observe_features(tm.features_from, tm.features)
        return d
    chain = ready().propose(ids, 3, GREEDY).tokens
    tree = ready().propose_tree(ids, 16, 4, GREEDY, 3)
    assert_shape(tree, 16, 4, 3)
    assert len(tree.tokens) == 16 and top_path(tree) == chain
