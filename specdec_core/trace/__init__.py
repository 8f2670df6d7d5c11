"""The Trace: the one contract between engine and UI, and the export/replay file format
("specdec-trace/1", DESIGN.md §4; "specdec-trace/2" for a batched run, ``batch``). Plain Python values only, JSON-able both ways.

This package owns the contract: the records (``records``), the Trace and its reading from an untrusted dict
(``document``), the checks that reading applies (``checks``: types, ranges, sizes and the invariants —
alpha = min(1, p/q), accepted iff u < alpha, emitted tokens concatenate to new_token_ids; for a token tree: a
tree in topological order, the path descending from the root, statuses the rule could have produced, drafts =
the path, emitted = the path's tokens then the replacement or bonus), and what a trace's sampler implies
(``sampler``). ``Trace.from_dict`` raises ValueError naming the first problem. Traces written before token trees
load unchanged.
"""
from .batch import SCHEMA_BATCH, BatchBaseline, BatchForward, BatchRecord, BatchStats
from .document import Trace
from .records import (ALPHA_TOL, MAX_ITERATIONS, MAX_REASON, MAX_TEXT, MAX_TOKENS, MAX_TOP, NODE_STATUSES,
                      OPTIONAL_STATS, SCHEMA, TREE_RULES, TREE_SIBLINGS, BaselineResult, BonusRecord, DraftRecord,
                      IterationRecord, ResampledRecord, Stats, TreeNodeRecord, TreeRecord)
from .sampler import COUPLED_DRAFT_FIELDS, check_sampler, sampler_of

__all__ = ["Trace", "BatchBaseline", "BatchForward", "BatchRecord", "BatchStats", "SCHEMA_BATCH", "BaselineResult", "BonusRecord", "DraftRecord", "IterationRecord", "ResampledRecord", "Stats",
           "TreeNodeRecord", "TreeRecord", "SCHEMA", "MAX_ITERATIONS", "MAX_REASON", "MAX_TEXT", "MAX_TOKENS",
           "MAX_TOP", "ALPHA_TOL", "OPTIONAL_STATS", "TREE_RULES", "TREE_SIBLINGS", "NODE_STATUSES",
           "COUPLED_DRAFT_FIELDS", "check_sampler", "sampler_of"]
