"""What the app's tabs share: the model pool, the Live tab's latest trace (per browser session), and the
settings accordions that presenter mode folds away."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specdec_core import ModelPool


@dataclass
class AppContext:
    pool: ModelPool
    latest_trace: Any   # gr.State holding the Live tab's most recent trace as a dict (Trace.to_dict()) or None
    fold_in_presenter: list[Any] = field(default_factory=list)   # gr.Accordion(s) that presenter mode folds away
