"""Statistical exactness with token trees: the whole engine (a model draft growing a tree with its own KV cache
and the tree mask, one target forward over the tree, verification, the accepted path kept in both caches)
over thousands of seeds; the first two tokens must follow the target's exact (warped) distribution, and the
same test must catch the biased rule (p/q ratio on distinct top-k siblings). Tree verification itself is
tested exactly, by enumeration, in test_tree_verify.py. The default suite keeps one run; the rest is slow."""
from __future__ import annotations

import pytest

from specdec_core import InjectedBugs
from specdec_core.bugs import NO_BUGS
from specdec_core.drafters.model import ModelDrafter
from tests.conftest import make_tiny_lm
from tests.tree_helpers import TreeTestDrafter
from tests.test_exactness import (N_RUNS, PROMPT, SETTINGS, VOCAB, chi_square_p, empirical_first_tokens,
                                  exact_first_tokens)

pytestmark = pytest.mark.usefixtures("one_thread")

TREE = dict(k=2, tree_nodes=4, tree_top_k=2)   # e.g. two children of the root, each with one child


@pytest.fixture(scope="module")
def models():
    """The chain exactness tests' pair (tests/test_exactness.py)."""
    return make_tiny_lm(vocab_size=VOCAB, seed=1, scale=10.0), make_tiny_lm(vocab_size=VOCAB, seed=2, scale=10.0)


def _tree_drafter(draft, siblings: str):
    def make():
        d = ModelDrafter(draft)
        d.tree_siblings = siblings
        return d
    return make


def _run(models, siblings, setting, bugs=NO_BUGS, drafter=None):
    target, draft = models
    s = SETTINGS[setting]
    counts = empirical_first_tokens(target, drafter or _tree_drafter(draft, siblings), bugs=bugs, **TREE, **s)
    return chi_square_p(counts, exact_first_tokens(target, PROMPT, **s), N_RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("siblings,setting", [("distinct", "warped"), ("distinct", "plain"), ("independent", "plain"),
                                              ("independent", "warped")])
def test_tree_is_exact(models, siblings, setting):
    p, tv = _run(models, siblings, setting)
    assert p > 1e-3, f"{siblings} siblings, {setting}: chi-square p={p:.2e}, TV={tv:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["plain", "warped"])
def test_independent_siblings_as_drawn_are_exact(models, setting):
    """Recursive rejection through the engine, with i.i.d. siblings kept as drawn (tests/tree_helpers.py)."""
    p, tv = _run(models, "independent", setting, drafter=lambda: TreeTestDrafter(models[1], "independent"))
    assert p > 1e-3, f"independent siblings as drawn, {setting}: chi-square p={p:.2e}, TV={tv:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["plain", "warped"])
def test_the_ratio_rule_on_top_k_siblings_is_caught(models, setting):
    """Power control: recursive rejection with the p/q ratio applied to distinct top-k siblings is biased."""
    p, tv = _run(models, "distinct", setting, InjectedBugs(topk_ratio_rule=True))
    assert p < 1e-6, f"the topk_ratio_rule bug went undetected ({setting}): p={p:.2e}, TV={tv:.3f}"
