"""Learn, the token-tree chapter: several candidates per step. The same prompt drafted as a chain of K and as a
tree of N nodes (depth <= K), the tree and its verify's attention mask shown with the app's own figures, and the
answer (tokens per iteration, the verify's cost, the rule that keeps it exact) from those two runs and this device's
forward over 1 … N + 1 tokens, timed with them.
"""
from __future__ import annotations

import html
from typing import Any

from components.pages.learn import reveal as rv
from components.pages.learn.basics import note, pick, run_summary
from components.pages.learn.book import Ask, Chapter, Guess, Setting, Step
from components.pages.learn.runs import LONGER, config, need, trace_run, verify_curve
from components.render.tree import tree_figure, tree_mask_figure
from components.serving.pairs import OPEN_PROMPTS, PAIR_FEATURE, Pool

K = 4
TEMPERATURE = 0.7
POEM = OPEN_PROMPTS[0]


def run_trees(pool: Pool, ask: Ask) -> Step:
    nodes = K if ask.setting is None else int(ask.setting)
    chain = trace_run(pool, PAIR_FEATURE, POEM, config(K, TEMPERATURE, 32 * ask.scale), baseline=False)
    tree = trace_run(pool, PAIR_FEATURE, POEM, config(K, TEMPERATURE, 32 * ask.scale, tree_nodes=nodes), baseline=False)
    verify_ms = verify_curve(pool, nodes + 1)
    i = pick(tree)
    return Step([tree_figure(tree, i), tree_mask_figure(tree, i)],
                note("The chain: " + html.escape(run_summary(chain)),
                     html.escape(f"The tree: up to {nodes} nodes per iteration, depth ≤ {K}. Shown: iteration {i + 1}'s "
                                 "tree (hover a node for its q, p and test) and the mask of its verify.")),
                memo={"chain": chain, "tree": tree, "verify_ms": verify_ms})


def reveal_trees(pool: Pool, guess: Any, memo: Any, ask: Ask) -> Step:
    answer = rv.reveal_tree_gain(float(guess), need(memo, "chain"), need(memo, "tree"), need(memo, "verify_ms"))
    return Step([None, None], answer=answer)


TREES = Chapter(
    "trees", "Token trees: several candidates per step",
    "A chain offers one candidate per position: where the target wants another token, the rest is lost. A **token "
    "tree** offers several: a node's children are the draft's top candidates for the next token. ONE verify "
    "forward checks every node, its attention mask letting each node see only its ancestors; the target then "
    "keeps the longest path it accepts, plus one token.\n\n"
    "The rule must stay exact. Greedy follows the child that is argmax p. Top-k siblings are chosen, not drawn "
    "from q, so min(1, p/q) would bias them: the target draws y ~ p and descends into the child equal to y.\n\n"
    f"**Run** samples 32 tokens at T = {TEMPERATURE:g} with the trained draft, as a chain of K = {K} and as a tree "
    f"of N nodes, depth ≤ {K}. Guess how many more tokens per iteration the tree yields; Reveal adds what its "
    "verify cost.",
    Guess(f"tokens per iteration: the tree's minus the chain's? (within the run's interval or ±{rv.TREE_TOLERANCE:g} "
          "counts)", -1.0, 2.0, 0.05),
    run_trees, reveal_trees,
    Setting("the tree's nodes", ((f"N = {K}: the chain's budget", K), (f"N = {4 * K}: four times it", 4 * K)), K),
    longer=f"{32 * LONGER} tokens for each instead of 32")

__all__ = ["TREES"]
