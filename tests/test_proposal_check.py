"""The engine refuses what a custom drafter should never return (ids outside the vocabulary, q rows that
are not distributions of the right shape, q(x) = 0 for a sampled draft), and a drafter or target that
raises ends the run with a message and leaves the model usable for the next run."""
from __future__ import annotations

import pytest
import torch

from conftest import fault_on_forward
from specdec_core import NGramDrafter, SpecConfig, speculative_generate
from specdec_core.drafters.base import DraftPolicy, Proposal
from specdec_core.decoding.proposal_check import DrafterError, ProposalError, check_proposal

V = 8
CPU = torch.device("cpu")


class ScriptedDrafter:
    """Returns whatever ``make(ids, k)`` builds: a stand-in for a third-party drafter."""

    name = "scripted"

    def __init__(self, make):
        self.make = make

    def start(self, prompt_ids):
        return 0

    def propose(self, ids, k, policy: DraftPolicy):
        return self.make(ids, k)

    def rollback(self, valid_len):
        pass


def _uniform(n: int) -> torch.Tensor:
    return torch.full((n, V), 1.0 / V)


@pytest.mark.parametrize("prop, message", [
    (Proposal([-1], None), "token id -1 at position 0 is outside the vocabulary [0, 8)"),
    (Proposal([3, 8], None), "token id 8 at position 1 is outside the vocabulary"),
    (Proposal([1, 2, 3, 4, 5], None), "5 tokens for K = 4"),
    (Proposal([1.0], None), "token 0 is 1.0 (float), not an int token id"),
    (Proposal([True], None), "not an int token id"),
    (Proposal("12", None), "tokens must be a list of ints"),
    ({"tokens": [1]}, "expected a Proposal, got dict"),
    (None, "expected a Proposal, got NoneType"),
    (Proposal([1, 2], _uniform(1)), "draft_probs has shape (1, 8), expected (len(tokens), V) = (2, 8)"),
    (Proposal([1], torch.full((1, V + 1), 1 / (V + 1))), "shape (1, 9)"),
    (Proposal([1], torch.ones((1, V), dtype=torch.long)), "must be floating point"),
    (Proposal([1], [[0.125] * V]), "draft_probs must be a tensor or None, got list"),
    (Proposal([1], torch.full((1, V), 0.5)), "a draft_probs row sums to 4, not 1"),
    (Proposal([1], torch.tensor([[1.5, -0.5] + [0.0] * (V - 2)])), "negative values"),
    (Proposal([1], torch.tensor([[float("nan")] * V])), "NaN or infinite"),
    (Proposal([1], torch.tensor([[1.0] + [0.0] * (V - 1)])), "q(x) = 0"),
    (Proposal([1], _uniform(1), raw_probs=_uniform(2)), "raw_probs has shape (2, 8)"),
    (Proposal([1], None, stop=None), "stop must be a string of at most 500 characters, got NoneType"),
    (Proposal([1], None, stop="x" * 501), "got str of 501"),
])
def test_bad_proposals_are_refused_with_the_problem_named(prop, message):
    with pytest.raises(ProposalError) as e:
        check_proposal(prop, 4, V, CPU, sampling=True, name="mine")
    assert message in str(e.value) and "the drafter 'mine' returned a bad proposal" in str(e.value)


def test_good_proposals_pass():
    check_proposal(Proposal([], None), 4, V, CPU, sampling=True)
    check_proposal(Proposal([0, 7], None), 4, V, CPU, sampling=True)
    q = torch.softmax(torch.randn(3, V), -1)
    check_proposal(Proposal([1, 2, 3], q, q.clone()), 3, V, CPU, sampling=True)
    one_hot = torch.tensor([[1.0] + [0.0] * (V - 1)])
    check_proposal(Proposal([1], one_hot), 4, V, CPU, sampling=False)   # greedy: q(x) = 0 is not drawn from


def test_engine_refuses_a_drafter_proposing_minus_one(tiny_pair, one_thread):
    target, _ = tiny_pair
    bad = ScriptedDrafter(lambda ids, k: Proposal([-1] * k, None))
    with pytest.raises(ProposalError, match=r"token id -1 .* outside the vocabulary \[0, 8\)"):
        speculative_generate(target, bad, [1, 2, 3], SpecConfig(k=3, max_new_tokens=8))


def test_engine_refuses_q_rows_that_are_not_distributions(tiny_pair, one_thread):
    target, _ = tiny_pair
    bad = ScriptedDrafter(lambda ids, k: Proposal([1] * k, torch.full((k, V), 0.3)))
    with pytest.raises(ProposalError, match="sums to 2.4"):
        speculative_generate(target, bad, [1, 2, 3], SpecConfig(k=2, temperature=1.0, max_new_tokens=8))


def test_a_drafter_that_raises_ends_the_run_and_the_model_stays_usable(tiny_pair, one_thread):
    target, _ = tiny_pair
    cfg = SpecConfig(k=3, max_new_tokens=12)
    before = speculative_generate(target, NGramDrafter(), [1, 2, 3, 1, 2], cfg)

    def explode(ids, k):
        raise KeyError("cache slot 7")
    with pytest.raises(DrafterError, match=r"the drafter 'scripted' failed while proposing: KeyError: 'cache slot 7'"):
        speculative_generate(target, ScriptedDrafter(explode), [1, 2, 3], cfg)
    after = speculative_generate(target, NGramDrafter(), [1, 2, 3, 1, 2], cfg)
    assert after.new_token_ids == before.new_token_ids


def test_a_target_forward_that_raises_ends_the_run_and_the_model_stays_usable(tiny_pair, one_thread):
    target, _ = tiny_pair
    cfg = SpecConfig(k=3, max_new_tokens=12)
    before = speculative_generate(target, NGramDrafter(), [1, 2, 3, 1, 2], cfg)
    with fault_on_forward(target, 3, RuntimeError("injected fault in the target forward")):
        with pytest.raises(RuntimeError, match="injected fault"):
            speculative_generate(target, NGramDrafter(), [1, 2, 3, 1, 2], cfg)
    after = speculative_generate(target, NGramDrafter(), [1, 2, 3, 1, 2], cfg)
    assert after.new_token_ids == before.new_token_ids
