"""What the app's tabs share: the model pool, the Live tab's latest trace (per browser session), the
settings accordions that presenter mode folds away, and a class's lead (the page's gr.State of the class it
leads, and what the Learn tab's runs do for the class)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specdec_core import ModelPool


@dataclass
class AppContext:
    pool: ModelPool
    latest_trace: Any   # gr.State holding the Live tab's most recent trace as a dict (Trace.to_dict()) or None
    fold_in_presenter: list[Any] = field(default_factory=list)   # gr.Accordion(s) that presenter mode folds away
    class_lead: Any = None         # gr.State: the class this page leads ({"code", "secret"}) or None
    on_learn_run: Callable[..., None] | None = None   # a Learn run of a page that leads: handed to its class
