"""What a run records: an iteration's trace record from the verdict, the running stats, and the output
text, decoded incrementally. Shared by the speculative loop and the baseline so both are charged alike."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..drafters.base import Proposal
from ..drafters.tree import TreeProposal
from ..stats.intervals import fill_stats
from ..trace import BonusRecord, DraftRecord, IterationRecord, ResampledRecord, Trace, TreeRecord
from .verify import Top, Verdict


def token_texts(tokenizer: Any) -> Callable[[int], str]:
    """Token id -> its text on its own (cached); "" for every token without a tokenizer."""
    if tokenizer is None:
        return lambda t: ""
    cache: dict[int, str] = {}

    def text(t: int) -> str:
        if t not in cache:
            cache[t] = tokenizer.decode([t])
        return cache[t]
    return text


def cut_at_eos(emitted: list[int], eos: int | None) -> list[int]:
    """The tokens up to and including the first end-of-sequence token."""
    return emitted[: emitted.index(eos) + 1] if (eos is not None and eos in emitted) else emitted


def finish_reason(emitted: list[int], eos: int | None, n_new: int, max_new_tokens: int) -> str:
    """Why a run (or a batch's row) ends after emitting ``emitted``: "eos", "length", or "" to go on."""
    if eos is not None and emitted and emitted[-1] == eos:
        return "eos"
    return "length" if n_new >= max_new_tokens else ""


def new_records(verdict: Verdict, drafts: list[int], emitted: list[int], text: Callable[[int], str],
                show: bool) -> tuple[list[DraftRecord], ResampledRecord | None, BonusRecord | None]:
    """The drafts' records (untested after the first rejection), and the resampled or bonus token's record
    when it was emitted (an EOS among the accepted drafts, or the drop_bonus bug, leaves it out). ``emitted``
    is the verdict's accepted drafts then its new token, cut after an EOS (``cut_at_eos``): the new token was
    emitted iff it outlasts the accepted drafts (by position: its id may well be an accepted draft's)."""
    v = verdict
    tested = len(v.target_tokens) if v.target_tokens is not None else 0   # coupled: per tested draft
    records = [DraftRecord(
        token_id=tok, text=text(tok) if show else "", q=v.q[i], p=v.p[i], alpha=v.alpha[i],
        u=v.u[i] if (i <= v.n_accepted and v.u is not None) else None, accepted=i < v.n_accepted,
        tested=i <= v.n_accepted, p_raw=None if v.p_raw is None else v.p_raw[i],
        q_raw=None if v.q_raw is None else v.q_raw[i],
        **({"target_token": v.target_tokens[i], "coupled_alpha": v.coupled_alpha[i], "tv": v.tv[i]}
           if i < tested else {})) for i, tok in enumerate(drafts)]
    resampled = bonus = None
    if len(emitted) > v.n_accepted:
        if v.rejected:
            resampled = ResampledRecord(
                token_id=v.token, text=text(v.token), p=v.token_p, position=v.n_accepted,
                residual_prob=v.token_residual_prob, residual_top=with_text(v.residual_top, text),
                p_top=with_text(v.p_top, text), q_top=with_text(v.q_top, text), q=v.token_q)
        else:
            bonus = BonusRecord(token_id=v.token, text=text(v.token), p=v.token_p)
    return records, resampled, bonus


def with_text(top: Top, text: Callable[[int], str]) -> list[list]:
    """A top list as the trace keeps it: [[token id, its text, probability], ...]."""
    return [[i, text(i), prob] for i, prob in top]


@dataclass(kw_only=True)
class Step:
    """What an iteration's steps 1-4 (a chain's in ``engine``, a tree's in ``tree_step``) leave for the record."""
    prop: Proposal | TreeProposal
    verify_ms: float
    n_accepted: int
    emitted: list[int]
    drafts: list[DraftRecord]
    resampled: ResampledRecord | None
    bonus: BonusRecord | None
    tree: TreeRecord | None = None


def timed_iteration(trace: Trace, step: Step, *, start_len: int, k: int, k_reason: str, t_iter: float,
                    t_run: float, t_end: float) -> IterationRecord:
    """The iteration's record from its steps 1-4 (``step``), with its timing (the clock at the iteration's start
    ``t_iter`` and end ``t_end``; ``t_run``: the run's start): ``other_ms`` is what the drafts' forwards, the
    catch-up and the verify forward leave of the iteration's wall time (sampling math, bookkeeping, rollback,
    records). ``k``: the drafts asked for (a tree: its nodes)."""
    prop = step.prop
    busy = sum(prop.forward_ms) + prop.catchup_ms + step.verify_ms
    return IterationRecord(
        index=len(trace.iterations), start_len=start_len, k=k, drafts=step.drafts, resampled=step.resampled,
        bonus=step.bonus, emitted=step.emitted, draft_ms=prop.forward_ms, verify_ms=step.verify_ms,
        other_ms=max(0.0, t_end - t_iter - busy), t_start_ms=t_iter - t_run, k_reason=k_reason,
        catchup_ms=prop.catchup_ms, draft_stop=prop.stop, tree=step.tree)


def add_iteration(trace: Trace, it: IterationRecord, n_accepted: int, draft_forwards: int,
                  target_forwards: int, wall_ms: float) -> None:
    """Append the iteration and bring the stats up to date."""
    trace.iterations.append(it)
    trace.new_token_ids.extend(it.emitted)
    st = trace.stats
    st.draft_forwards += draft_forwards
    st.target_forwards = target_forwards
    st.drafted += len(it.tree.nodes) if it.tree is not None else len(it.drafts)
    st.accepted += n_accepted
    finish_stats(trace, wall_ms)


def finish_stats(trace: Trace, wall_ms: float) -> None:
    st = trace.stats
    st.new_tokens = len(trace.new_token_ids)
    st.iterations = len(trace.iterations)
    st.acceptance_rate = st.accepted / st.drafted if st.drafted else 0.0
    st.mean_tokens_per_iteration = st.new_tokens / st.iterations if st.iterations else 0.0
    st.wall_ms = wall_ms
    st.tokens_per_s = st.new_tokens / (wall_ms / 1000) if wall_ms > 0 else 0.0
    fill_stats(trace)          # the acceptance's interval (the speedup's once a baseline is attached)


class RunningText:
    """The text of a growing list of generated token ids, without decoding all of them at every step.

    ``update(ids)`` decodes a short window: the standard prefix-offset incremental detokenizer (as in
    text-generation-inference and vLLM). It keeps the text up to a read offset and the text of a few
    tokens before it; the new text is what decoding from the window's start adds to the latter, and it
    is committed only when it ends on a whole character (not U+FFFD: a multi-byte character split across
    tokens). Exact for byte-level BPE; where a window decodes differently from the whole (the window's
    text does not start with its prefix's), that step decodes everything. ``final(ids)`` decodes all
    ids once: what a run ends with is ``tokenizer.decode(ids)``, whatever the tokenizer.
    """

    CONTEXT = 5   # tokens of left context kept after decoding everything

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.text = ""            # decode(ids[:read])
        self.prefix = 0           # the window starts here
        self.read = 0
        self.prefix_text = ""     # decode(ids[prefix:read])

    def update(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        window = self.tokenizer.decode(ids[self.prefix:])
        if not window.startswith(self.prefix_text):
            return self._decode_all(ids)
        new = window[len(self.prefix_text):]
        if new and not new.endswith("\ufffd"):
            self.text += new
            self.prefix, self.read = self.read, len(ids)
            self.prefix_text = self.tokenizer.decode(ids[self.prefix:self.read])
            return self.text
        return self.text + new

    def final(self, ids: list[int]) -> str:
        return "" if self.tokenizer is None else self._decode_all(ids)

    def _decode_all(self, ids: list[int]) -> str:
        self.text = self.tokenizer.decode(ids)
        self.prefix, self.read = max(0, len(ids) - self.CONTEXT), len(ids)
        self.prefix_text = self.tokenizer.decode(ids[self.prefix:self.read])
        return self.text
