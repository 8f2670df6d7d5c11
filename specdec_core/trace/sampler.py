"""The Trace contract's sampler part (``Trace.from_dict`` calls ``check_sampler``): which sampler a trace was made
with, and what its records must then satisfy.

``config.sampler`` is "standard" or "coupled" (``config.SAMPLERS``); a trace without it (every trace written
before coupled sampling, and every standard run: ``SpecConfig.trace_dict`` leaves the default out) is "standard".
Under coupling at a temperature above 0 a chain draft has no uniform (``u`` null), a tested draft with its
target token ``y`` was accepted iff y is the draft, the token emitted at the mismatch is that y, and a token
tree is verified by the "coupled" rule; the coupled fields appear in no standard trace. Greedy runs are the
same under both samplers (argmax everywhere).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import SAMPLERS

COUPLED_DRAFT_FIELDS = ("target_token", "coupled_alpha", "tv")   # a draft record's coupled fields, written only when set


def sampler_of(config: dict) -> str:
    """The sampler a trace's config records: "standard" when the field is absent."""
    return config.get("sampler") or "standard"


def check_sampler(config: dict, iterations: Sequence[Any]) -> None:
    """Raise ValueError ("invalid trace: ...") unless the iterations' records fit the config's sampler
    (module docstring). ``iterations``: parsed ``IterationRecord``s."""
    sampler = config.get("sampler", "standard")
    if not isinstance(sampler, str) or sampler not in SAMPLERS:
        _fail("config.sampler", f"must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    coupled = sampler == "coupled" and config.get("temperature", 0) != 0
    for i, it in enumerate(iterations):
        where = f"iterations[{i}]"
        rule = it.tree.rule if it.tree is not None else None
        if rule == "coupled" and not coupled:
            _fail(f"{where}.tree.rule", "the coupled rule needs config.sampler 'coupled' and a temperature above 0")
        if coupled and rule is not None and rule != "coupled":
            _fail(f"{where}.tree.rule", f"a coupled run verifies trees with the coupled rule, got {rule!r}")
        for j, d in enumerate(it.drafts):
            w = f"{where}.drafts[{j}]"
            if not coupled and (d.target_token is not None or d.coupled_alpha is not None or d.tv is not None):
                _fail(w, "target_token, coupled_alpha and tv belong to coupled runs")
            if coupled and d.u is not None:
                _fail(f"{w}.u", "a coupled run draws no uniforms: u must be null")
            if d.target_token is not None and d.tested and d.accepted != (d.target_token == d.token_id):
                _fail(w, f"accepted={d.accepted} contradicts the target token {d.target_token} "
                         f"(accepted iff it equals the draft {d.token_id})")
        rs = it.resampled
        if rs is not None and rs.q is not None and not coupled:
            _fail(f"{where}.resampled.q", "belongs to coupled runs")
        if coupled and rs is not None and it.tree is None and rs.position < len(it.drafts):
            y = it.drafts[rs.position].target_token
            if y is not None and y != rs.token_id:
                _fail(f"{where}.resampled", f"a coupled run emits the target token {y} at the mismatch, "
                                            f"not {rs.token_id}")


def _fail(where: str, msg: str) -> None:
    raise ValueError(f"invalid trace: {where}: {msg}")
