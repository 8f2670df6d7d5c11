"""What a shared store keeps, as JSON text: a room's records (the frozen dataclasses of ``room``: the question, the
run shown, a Reveal, a Live run, a chapter's result) and the memo a Reveal works from (plain values, tuples and the
engine's ``Trace``). Tagged so that they come back as they went: ``{"$": "Shown", …}`` for a record,
``{"$tuple": […]}`` for a tuple, ``{"$trace": Trace.to_dict()}`` for a trace (read back through ``Trace.from_dict``,
which validates it). Only these types are written or read; anything else is a TypeError (a memo this store cannot
keep) or a ValueError (text that is not one of ours).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from specdec_core import Trace

from components.serving.classroom import room as rm

RECORDS: dict[str, type] = {cls.__name__: cls for cls in (rm.GuessSpec, rm.Question, rm.Shown, rm.Truth, rm.Revealed,
                                                          rm.ChapterResult, rm.LiveShown)}


def _out(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Trace):
        return {"$trace": value.to_dict()}
    if isinstance(value, tuple):
        return {"$tuple": [_out(v) for v in value]}
    if isinstance(value, list):
        return [_out(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) and not k.startswith("$") for k in value):
            raise TypeError("a kept dict has text keys (not starting with $)")
        return {k: _out(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and type(value).__name__ in RECORDS:
        return {"$": type(value).__name__, **{f.name: _out(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    raise TypeError(f"a shared class store cannot keep a {type(value).__name__}")


def _in(value: Any) -> Any:
    if isinstance(value, list):
        return [_in(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tuple" in value:
        return tuple(_in(v) for v in value["$tuple"])
    if "$trace" in value:
        return Trace.from_dict(value["$trace"])
    if "$" in value:
        cls = RECORDS.get(value["$"])
        if cls is None:
            raise ValueError(f"not a record this store keeps: {str(value['$'])[:40]!r}")
        return cls(**{k: _in(v) for k, v in value.items() if k != "$"})
    return {k: _in(v) for k, v in value.items()}


def dumps(value: Any) -> str:
    """``value`` as JSON text (TypeError for what cannot be kept)."""
    return json.dumps(_out(value), ensure_ascii=False, separators=(",", ":"))


def loads(text: str | bytes | None) -> Any:
    """What ``dumps`` wrote (None for None)."""
    return None if text is None else _in(json.loads(text))


__all__ = ["dumps", "loads", "RECORDS"]
