"""The Live tab's settings as a link: ``?tab=live&pair=…&prompt=…&k=…&run=1``, so a teacher can hand out a run.

``parse_live_query`` reads the query parameters of a page load into ``LiveSettings`` (or refuses the whole
link, naming every bad parameter); ``live_query`` writes settings back as a query string, the inverse.
Only the parameters in ``LIVE_PARAMS`` (and ``run``) are read; any other (``tab``, ``chapter``,
``presenter``, Gradio's own) is left to whoever reads it. Values are checked as strictly as the Live tab's
controls take them: the pair must be one the selector offers, numbers are plain decimals (no signs,
exponents, ``nan`` or ``inf``) inside each control's range and on its step, and the whole set must build a
valid ``SpecConfig``. A refused link changes nothing and runs nothing; the reasons quote the values as
text (``messages.page_text`` escapes them wherever they are shown).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any
from urllib.parse import urlencode

from specdec_core import SpecConfig
from specdec_core.config import DEFAULT_TREE_TOP_K, K_POLICIES, MAX_TREE_TOP_K

from .pairs import pair_keys
from .session import MAX_PROMPT_CHARS, UI_MAX_CONFIDENCE_STOP, UI_MAX_K, UI_MAX_NEW_TOKENS, UI_MAX_TREE_NODES

TEMPERATURE_MAX, TEMPERATURE_STEP = 2.0, 0.05     # the Live tab's sliders: range and step
TOP_P_MIN, TOP_P_STEP = 0.05, 0.01
CONFIDENCE_STEP = 0.05
MAX_SEED = 2**53 - 1          # the page's number box is a JavaScript number: larger seeds would not survive it
MAX_NUMBER_CHARS = 24
SHOWN_CHARS = 60              # a refused value is quoted up to this many characters
_INT = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?|\.[0-9]+")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class LiveSettings:
    """What the Live tab's controls hold, and what a link carries (the field names are the parameter names)."""
    pair: str
    prompt: str
    k: int
    k_policy: str
    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    seed: int
    chat: bool
    confidence_stop: float
    tree_nodes: int = 0                     # 0 = a chain
    tree_top_k: int = DEFAULT_TREE_TOP_K


LIVE_PARAMS = tuple(f.name for f in fields(LiveSettings))


@dataclass(frozen=True)
class LinkRequest:
    """A parsed link: the settings to show (``None`` when the link sets none), whether to run them at once,
    and why the link was refused (empty when it was not; a refused link sets nothing and runs nothing)."""
    settings: LiveSettings | None
    run: bool
    problems: tuple[str, ...] = ()


def _shown(raw: str) -> str:
    return repr(raw[:SHOWN_CHARS] + ("…" if len(raw) > SHOWN_CHARS else ""))


def _int(name: str, raw: str, lo: int, hi: int) -> int:
    if len(raw) > MAX_NUMBER_CHARS or not _INT.fullmatch(raw):
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}, got {_shown(raw)}")
    value = int(raw)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be from {lo} to {hi}, got {value}")
    return value


def _decimal(name: str, raw: str, lo: float, hi: float, step: float) -> float:
    if len(raw) > MAX_NUMBER_CHARS or not _DECIMAL.fullmatch(raw):
        raise ValueError(f"{name} must be a decimal number from {lo:g} to {hi:g}, got {_shown(raw)}")
    value = float(raw)
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ValueError(f"{name} must be from {lo:g} to {hi:g}, got {value:g}")
    steps = value / step
    if abs(steps - round(steps)) > 1e-6:
        raise ValueError(f"{name} must be a multiple of {step:g} (the slider's step), got {value:g}")
    return round(round(steps) * step, 10)


def _bool(name: str, raw: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"{name} must be 1 or 0, got {_shown(raw)}")


def _pair(raw: str) -> str:
    if raw not in pair_keys():
        raise ValueError(f"pair must be one of {', '.join(pair_keys())}, got {_shown(raw)}")
    return raw


def _prompt(raw: str) -> str:
    if not raw.strip():
        raise ValueError("prompt is empty")
    if len(raw) > MAX_PROMPT_CHARS:
        raise ValueError(f"prompt is {len(raw)} characters long; the limit is {MAX_PROMPT_CHARS}")
    if any(ord(c) < 32 and c not in "\n\t" or 0xD800 <= ord(c) <= 0xDFFF for c in raw):
        raise ValueError("prompt holds control characters")
    return raw


def _k_policy(raw: str) -> str:
    if raw not in K_POLICIES:
        raise ValueError(f"k_policy must be one of {', '.join(K_POLICIES)}, got {_shown(raw)}")
    return raw


PARSERS = {
    "pair": _pair,
    "prompt": _prompt,
    "k": lambda raw: _int("k", raw, 1, UI_MAX_K),
    "k_policy": _k_policy,
    "temperature": lambda raw: _decimal("temperature", raw, 0.0, TEMPERATURE_MAX, TEMPERATURE_STEP),
    "top_k": lambda raw: _int("top_k", raw, 0, 1_000_000),
    "top_p": lambda raw: _decimal("top_p", raw, TOP_P_MIN, 1.0, TOP_P_STEP),
    "max_new_tokens": lambda raw: _int("max_new_tokens", raw, 1, UI_MAX_NEW_TOKENS),
    "seed": lambda raw: _int("seed", raw, 0, MAX_SEED),
    "chat": lambda raw: _bool("chat", raw),
    "confidence_stop": lambda raw: _decimal("confidence_stop", raw, 0.0, UI_MAX_CONFIDENCE_STOP, CONFIDENCE_STEP),
    "tree_nodes": lambda raw: _int("tree_nodes", raw, 0, UI_MAX_TREE_NODES),
    "tree_top_k": lambda raw: _int("tree_top_k", raw, 1, MAX_TREE_TOP_K),
}


def _values(params: Any, name: str) -> list[str]:
    """Every value given for ``name``: a starlette QueryParams (``getlist``) or a plain mapping."""
    if hasattr(params, "getlist"):
        return [str(v) for v in params.getlist(name)]
    value = params.get(name) if isinstance(params, Mapping) else None
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def parse_live_query(params: Any, defaults: LiveSettings) -> LinkRequest:
    """The Live settings a page's query parameters ask for, on top of ``defaults`` (the page's first values).
    A link with no Live parameter and no ``run`` gives ``LinkRequest(None, False)``."""
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for name in (*LIVE_PARAMS, "run"):
        given = _values(params, name)
        if not given:
            continue
        if len(given) > 1:
            problems.append(f"{name} is given {len(given)} times")
            continue
        try:
            if name == "run":
                changes[name] = _bool("run", given[0])
            else:
                changes[name] = PARSERS[name](given[0])
        except ValueError as e:
            problems.append(str(e))
    run = bool(changes.pop("run", False))
    if not changes and not run and not problems:
        return LinkRequest(None, False)
    settings = replace(defaults, **changes)
    if not problems:
        try:
            spec_config(settings)
        except ValueError as e:
            problems.append(str(e))
    if problems:
        return LinkRequest(None, False, tuple(problems))
    return LinkRequest(settings, run)


def spec_config(settings: LiveSettings) -> SpecConfig:
    """The run settings a link stands for (``SpecConfig``'s own checks: a ValueError naming the setting)."""
    return SpecConfig(k=settings.k, temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                      max_new_tokens=settings.max_new_tokens, seed=settings.seed, k_policy=settings.k_policy,
                      confidence_stop=settings.confidence_stop, tree_nodes=settings.tree_nodes,
                      tree_top_k=settings.tree_top_k)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}" if value != int(value) else str(int(value))
    return str(value)


def live_query(settings: LiveSettings, run: bool = True) -> str:
    """``settings`` as a query string (``?tab=live&pair=…``) that ``parse_live_query`` reads back to the same
    settings; ``run`` adds ``run=1`` (the link starts the run when it opens)."""
    items = [("tab", "live")] + [(name, _text(value)) for name, value in asdict(settings).items()]
    if run:
        items.append(("run", "1"))
    return "?" + urlencode(items)


def refusal_message(problems: tuple[str, ...] | list[str]) -> str:
    """One line for the page (plain text: escape it where it is shown)."""
    return "This link's settings were not applied (nothing was run): " + "; ".join(problems) + "."


__all__ = ["LiveSettings", "LinkRequest", "LIVE_PARAMS", "parse_live_query", "live_query", "spec_config",
           "refusal_message"]
