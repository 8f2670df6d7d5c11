"""What the app's tabs share: the model pool and the Live tab's latest trace (per browser session)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec_core import ModelPool


@dataclass
class AppContext:
    pool: ModelPool
    latest_trace: Any   # gr.State holding the Live tab's most recent trace as a dict (Trace.to_dict()) or None
