"""What the presenter keeps of a class: per revealed chapter, the class's guesses (anonymous: a value and its verdict,
sorted by value, never a student's id or nickname), what the run measured (in words, and the value with its band
where it is a number) and how many were right — as CSV (one row per guess; a chapter nobody guessed in gets one row
without a guess) and as JSON. Pure functions of the store's ``ChapterResult`` records.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from components.serving.classroom.codes import shown_code
from components.serving.classroom.room import ChapterResult

COLUMNS = ("class", "chapter", "title", "run", "revealed_at", "measured", "value", "low", "high", "right_answers",
           "guess", "verdict", "right", "total")
FORMATS = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _cell(value: Any) -> Any:
    """A CSV cell: numbers as they are, None empty, text that a spreadsheet would read as a formula quoted."""
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "@", "\t", "\r") or isinstance(value, str) and \
            value[:1] == "-" and not _is_number(value):
        return "'" + value
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def results_csv(code: str, results: Sequence[ChapterResult]) -> str:
    """The class's results as CSV text (``COLUMNS``; UTF-8, comma-separated, a header row)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in results:
        head = [shown_code(code), r.chapter, r.title, r.run_no, _when(r.revealed_at), r.measured, r.value, r.low,
                r.high, "; ".join(str(a) for a in r.right_answers)]
        for guess, verdict in (r.guesses or ((None, None),)):
            writer.writerow([_cell(v) for v in (*head, guess, verdict, r.right, r.total)])
    return out.getvalue()


def results_json(code: str, results: Sequence[ChapterResult], now: float) -> str:
    """The class's results as JSON text: ``{"class", "exported_at", "chapters": [...]}``."""
    chapters = [{"chapter": r.chapter, "title": r.title, "run": r.run_no, "revealed_at": _when(r.revealed_at),
                 "measured": {"label": r.measured, "value": r.value, "low": r.low, "high": r.high,
                              "right_answers": list(r.right_answers)},
                 "right": r.right, "total": r.total,
                 "guesses": [{"guess": g, "verdict": v} for g, v in r.guesses]} for r in results]
    return json.dumps({"class": shown_code(code), "exported_at": _when(now), "chapters": chapters}, indent=1,
                      ensure_ascii=False)


__all__ = ["results_csv", "results_json", "COLUMNS", "FORMATS"]
