"""The Live tab's settings as a link: ``?tab=live&pair=…&prompt=…&k=…&run=1``, so a teacher can hand out a run.

``parse_live_query`` reads the query parameters of a page load into ``LiveSettings`` (or refuses the whole
link, naming every bad parameter); ``live_query`` writes settings back as a query string, the inverse.
Only the parameters in ``LIVE_PARAMS`` (and ``run``, ``repro``) are read; any other (``tab``, ``chapter``,
``presenter``, Gradio's own) is left to whoever reads it. Values are checked against the one set of input
limits (``specdec_core.limits``, the same words as every other entrance) and as the Live tab's controls take
them: the pair must be one the selector offers, numbers are plain decimals (no exponents, ``nan`` or
``inf``) on each slider's step, and the whole set must build a valid ``SpecConfig`` (with a batch size above 1,
a chain). A refused link changes nothing and runs nothing; the reasons quote the values as text
(``messages.page_text`` escapes them wherever they are shown).

What a link reproduces: the settings and the seed, so on the server that wrote it the same trace (tokens and
iterations; the cost-aware policy's prices are fixed per server process). ``repro`` (8 hex digits, written by
"copy link" where the server can tell: ``decoding.prices.run_fingerprint``) names the models, their numerics
and the prices the run depends on; opened where they differ (another server, device, dtype, library version,
or a new calibration after a restart), the page says so: the text is then the same under greedy decoding or
coupled sampling where the numerics agree, the iterations only where the prices match. A batched run's link
(``batch_size`` above 1) carries no ``repro``: its K policy's batch prices are measured per server process.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any
from urllib.parse import urlencode

from specdec_core import SpecConfig, limits
from specdec_core.config import DEFAULT_TREE_TOP_K, K_POLICIES

from components.serving.pairs import pair_keys

TEMPERATURE_STEP = 0.05       # the Live tab's sliders' steps
TOP_P_STEP = 0.01
CONFIDENCE_STEP = 0.05
MAX_NUMBER_CHARS = 100        # a longer number is not read as one
_INT = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?([0-9]+(\.[0-9]+)?|\.[0-9]+)")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_REPRO = re.compile(r"[0-9a-f]{8}")


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
    sampler: str = "standard"               # "coupled": drafter-invariant (the text is the coupled baseline's)
    batch_size: int = 1                     # 1 = one sequence; B > 1: your prompt and B − 1 other users' requests


LIVE_PARAMS = tuple(f.name for f in fields(LiveSettings))


@dataclass(frozen=True)
class LinkRequest:
    """A parsed link: the settings to show (``None`` when the link sets none), whether to run them at once,
    why the link was refused (empty when it was not; a refused link sets nothing and runs nothing), and what
    the run depended on where the link was written (``repro``; None when it does not say)."""
    settings: LiveSettings | None
    run: bool
    problems: tuple[str, ...] = ()
    repro: str | None = None


def _number(raw: str, pattern: re.Pattern) -> int | float | str:
    """A plain decimal as a number (the input limits check its range); anything else stays text, so the
    limit's check refuses it as "not a number" in its own words."""
    if len(raw) > MAX_NUMBER_CHARS or not pattern.fullmatch(raw):
        return raw
    return int(raw) if pattern is _INT else float(raw)


def _whole(check: Callable[[Any], int]) -> Callable[[str], int]:
    return lambda raw: check(_number(raw, _INT))


def _count(check: Callable[[Any], int]) -> Callable[[str], int]:
    """A whole number as the page's control and /generate take it: a plain decimal is read as a number, so that
    2.5 is refused in the limit's own words ("must be a whole number, got 2.5") at every entrance."""
    return lambda raw: check(_number(raw, _INT if _INT.fullmatch(raw) else _DECIMAL))


def _on_step(check: Callable[[Any], float], step: float) -> Callable[[str], float]:
    """A decimal within the input limits and on its slider's step (so the control can show it)."""
    def parse(raw: str) -> float:
        value = check(_number(raw, _DECIMAL))
        steps = value / step
        if abs(steps - round(steps)) > 1e-6:
            raise ValueError(f"{raw!r:.40} is not a multiple of {step:g} (the slider's step)")
        return round(round(steps) * step, 10)
    return parse


def _bool(name: str, raw: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"{name} must be 1 or 0, got {limits.shown(raw)}")


def _pair(raw: str) -> str:
    if raw not in pair_keys():
        raise ValueError(f"pair must be one of {', '.join(pair_keys())}, got {limits.shown(raw)}")
    return raw


def _prompt(raw: str) -> str:
    limits.check_prompt(raw)
    if any(ord(c) < 32 and c not in "\n\t" or 0xD800 <= ord(c) <= 0xDFFF for c in raw):
        raise ValueError("The prompt holds control characters.")
    return raw


def _k_policy(raw: str) -> str:
    if raw not in K_POLICIES:
        raise ValueError(f"K policy must be one of {', '.join(K_POLICIES)}, got {limits.shown(raw)}")
    return raw


PARSERS: dict[str, Callable[[str], Any]] = {
    "pair": _pair,
    "prompt": _prompt,
    "k": _whole(limits.check_k),
    "k_policy": _k_policy,
    "temperature": _on_step(limits.check_temperature, TEMPERATURE_STEP),
    "top_k": _whole(limits.check_top_k),
    "top_p": _on_step(limits.check_top_p, TOP_P_STEP),
    "max_new_tokens": _whole(limits.check_max_new_tokens),
    "seed": _whole(limits.check_seed),
    "chat": lambda raw: _bool("chat", raw),
    "confidence_stop": _on_step(limits.check_confidence_stop, CONFIDENCE_STEP),
    "tree_nodes": _whole(limits.check_tree_nodes),
    "tree_top_k": _whole(limits.check_tree_top_k),
    "sampler": limits.check_sampler,
    "batch_size": _count(limits.check_batch),
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
    for name in (*LIVE_PARAMS, "run", "repro"):
        given = _values(params, name)
        if not given:
            continue
        if len(given) > 1:
            problems.append(f"{name} is given {len(given)} times")
            continue
        try:
            if name == "run":
                changes[name] = _bool("run", given[0])
            elif name == "repro":
                if not _REPRO.fullmatch(given[0]):
                    raise ValueError(f"repro must be 8 hexadecimal digits, got {limits.shown(given[0])}")
                changes[name] = given[0]
            else:
                changes[name] = PARSERS[name](given[0])
        except ValueError as e:
            problems.append(str(e))
    run = bool(changes.pop("run", False))
    repro = changes.pop("repro", None)
    if not changes and not run and not problems:
        return LinkRequest(None, False, repro=repro)
    settings = replace(defaults, **changes)
    if not problems:
        try:
            spec_config(settings)
            limits.check_batch_trees(settings.batch_size, settings.tree_nodes)
        except ValueError as e:
            problems.append(str(e))
    if problems:
        return LinkRequest(None, False, tuple(problems))
    return LinkRequest(settings, run, repro=repro)


def spec_config(settings: LiveSettings) -> SpecConfig:
    """The run settings a link stands for (``SpecConfig``'s own checks: a ValueError naming the setting)."""
    return SpecConfig(k=settings.k, temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                      max_new_tokens=settings.max_new_tokens, seed=settings.seed, k_policy=settings.k_policy,
                      confidence_stop=settings.confidence_stop, tree_nodes=settings.tree_nodes,
                      tree_top_k=settings.tree_top_k, sampler=settings.sampler)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}" if value != int(value) else str(int(value))
    return str(value)


def live_query(settings: LiveSettings, run: bool = True, repro: str | None = None) -> str:
    """``settings`` as a query string (``?tab=live&pair=…``) that ``parse_live_query`` reads back to the same
    settings; ``run`` adds ``run=1`` (the link starts the run when it opens), ``repro`` what the run depends on
    here (``decoding.prices.run_fingerprint``)."""
    items = [("tab", "live")] + [(name, _text(value)) for name, value in asdict(settings).items()]
    if run:
        items.append(("run", "1"))
    if repro:
        items.append(("repro", repro))
    return "?" + urlencode(items)


def refusal_message(problems: tuple[str, ...] | list[str]) -> str:
    """One line for the page (plain text: escape it where it is shown)."""
    return "This link's settings were not applied (nothing was run): " + "; ".join(problems) + "."


__all__ = ["LiveSettings", "LinkRequest", "LIVE_PARAMS", "parse_live_query", "live_query", "spec_config",
           "refusal_message"]
