"""Deterministic bad input for the app's handlers and its HTTP API (used by the fuzz tests and the load
test): run settings, prompts, pair keys, slider values and trace files, each case tagged with the
fields it breaks so that a test can check the refusal names one of them.

A case starts from a valid Live run (tiny ``max_new_tokens``) and replaces one to three fields with a
value from that field's palette. Palette entries say whether the value is *bad* (it must be refused)
or merely odd (accepted or refused, either is fine, but a refusal must name the field). Same seed ⇒
same cases. Nothing here imports Gradio or torch.
"""
from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

NAN, INF = float("nan"), float("inf")

# the Live run's fields in handler order, a valid value each (few tokens: a valid case runs fast)
VALID_RUN: dict[str, Any] = {"pair": "bundled|ngram", "prompt": "Repeat exactly: one two three, one two three.",
                             "k": 2, "k_policy": "fixed", "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                             "max_new_tokens": 2, "seed": 0, "with_baseline": False, "chat": True,
                             "confidence_stop": 0.0, "batch_size": 1}

# words a refusal must contain (any of them, case-insensitive) to "name the field"
FIELD_WORDS: dict[str, tuple[str, ...]] = {
    "pair": ("pair", "model"), "prompt": ("prompt",), "k": ("k must", "k (", " k ", "k="),
    "temperature": ("temperature",), "top_k": ("top-k", "top_k"), "top_p": ("top-p", "top_p"),
    "max_new_tokens": ("max new tokens", "max_new_tokens"), "seed": ("seed",),
    "k_policy": ("k policy", "k_policy"), "with_baseline": ("baseline",), "chat": ("chat",),
    "confidence_stop": ("confidence stop",), "batch_size": ("batch size",), "value": ("iteration",), "file": ("file", "trace", "json", "upload"),
    "example": ("example",),
}

_NOT_NUMBERS: list[Any] = [None, "abc", "", "4", " 2 ", "0x10", [], [1], {}, {"a": 1}, "NaN", "∞", "1e400",
                           "\x00", "<script>alert(1)</script>"]
_BAD_ANY_NUMBER: list[Any] = [NAN, INF, -INF, 1e308, -1e308, 2**70, -(2**70), 10**400]


def _bad(*values: Any) -> list[tuple[Any, bool]]:
    return [(v, True) for v in values]


def _odd(*values: Any) -> list[tuple[Any, bool]]:
    return [(v, False) for v in values]


def _control_prompt(rng: random.Random) -> str:
    chars = [chr(rng.choice([*range(0, 32), 127, 0x200B, 0x202E, 0xFEFF, 0x1F680])) for _ in range(rng.randint(1, 60))]
    return "".join(chars) + rng.choice(["", " hello", "\n\n"])


def run_palettes(rng: random.Random) -> dict[str, list[tuple[Any, bool]]]:
    """(value, bad) per field of a Live run. ``rng`` draws the random prompts."""
    ints = _bad(*_NOT_NUMBERS, *_BAD_ANY_NUMBER, True, False, 2.5, -0.5)
    return {
        "pair": _bad(None, 5, "", "preset:99", "preset:-1", "preset:1e3", "../../etc/passwd", "bundled|ngram\x00",
                     ["bundled|ngram"], {"pair": 1}, "bundled|" + "x" * 5000, "preset:0", "preset:2")
                + _odd("bundled|self"),
        "prompt": _bad(None, 123, 4.5, "", "   \n\t ", [], {"text": "hi"}, "a" * 20_001, b"bytes")
                  + _odd("word " * 4000, _control_prompt(rng), "\x00\x01\x02 zero bytes", "\u202eright-to-left override",
                         "emoji 🚀" * 20, "{" * 2000, "\ud800 lone surrogate", "\r\n" * 50 + "x", "Ω" * 300),
        "k": ints + _bad(0, -3, 17, 65, 1e9) + _odd(1, 16, 3.0),
        "temperature": _bad(*_NOT_NUMBERS, NAN, INF, -INF, -0.01, -1e308, True) + _odd(0.0, 2.0, 1e-9, 1, 5.0, 1e308),
        # top-k at or above the vocabulary size is "off": huge positive ints may be accepted
        "top_k": [e for e in ints if not (isinstance(e[0], (int, float)) and not isinstance(e[0], bool)
                                          and 10**6 < e[0] < INF)] + _bad(-1)
                 + _odd(0, 1, 49_152, 10**9, 2**70, 10**400),
        "top_p": _bad(*_NOT_NUMBERS, NAN, INF, -INF, 0.0, -0.5, 1.5, 1e308, True) + _odd(1e-9, 0.5, 1),
        "max_new_tokens": ints + _bad(0, -1, 513, 2048, 10**6) + _odd(1, 3, 2.0),
        "seed": ints + _bad(-1, 2**63, 10**30) + _odd(0, 2**62, 123456789),
        "k_policy": _bad(0, 1, "auto", "FIXED", [], {"a": 1}, "fixed\x00", 2.5) + _odd(None, "fixed", "heuristic",
                                                                                    "cost", True, False),
        "with_baseline": _odd(False, None, 0),
        "chat": _odd(True, False, None, 0, 1),
        "confidence_stop": _bad(*_NOT_NUMBERS, NAN, INF, -INF, -0.1, 0.96, 1.0, 2, True) + _odd(0.0, 0.3, 0.95, 0),
        "batch_size": ints + _bad(0, -1, 17, 10**6) + _odd(1, 2, 3.0),
    }


@dataclass
class Case:
    kind: str                          # "run", "step", "upload", "pair", "example", "validate"
    args: dict[str, Any]               # the handler's arguments by name
    fields: list[str]                  # the fields this case changed
    must_refuse: bool                  # at least one value is bad
    note: str = ""                     # what was done, for failure messages
    extra: dict[str, Any] = field(default_factory=dict)


def run_cases(n: int, seed: int = 0) -> Iterator[Case]:
    """``n`` Live-run cases: the valid run with 1–3 fields replaced from their palettes."""
    rng = random.Random(seed)
    for _ in range(n):
        pal = run_palettes(rng)
        args = dict(VALID_RUN)
        fields = rng.sample(sorted(pal), rng.choice([1, 1, 1, 2, 2, 3]))
        bad = False
        for f in fields:   # mostly bad values: an accepted case generates (slower), a refused one is instant
            bad_ones = [e for e in pal[f] if e[1]]
            odd_ones = [e for e in pal[f] if not e[1]]
            value, is_bad = rng.choice(bad_ones if bad_ones and (not odd_ones or rng.random() < 0.85) else odd_ones)
            args[f] = copy.deepcopy(value)
            bad |= is_bad
        yield Case("run", args, fields, bad, note=", ".join(f"{f}={_short(args[f])}" for f in fields))


def step_cases(n: int, seed: int = 0) -> Iterator[Case]:
    """Slider values for stepping through a trace (the trace itself comes from the test)."""
    rng = random.Random(seed + 1)
    pal = _bad(*[v for v in _NOT_NUMBERS if v is not None], NAN, INF, -INF, True) + _odd(None, 0, 1, 2, -5, 10**9, 1e308, 2.7, -1e308)
    for _ in range(n):
        value, bad = rng.choice(pal)
        yield Case("step", {"value": copy.deepcopy(value), "delta": rng.choice([-1, 0, 1])}, ["value"], bad,
                   note=f"value={_short(value)}")


def trace_mutations(trace: dict, rng: random.Random) -> tuple[Any, str, str]:
    """A broken copy of a valid trace dict: (data, the key changed, what was done). Every mutation breaks
    the trace contract (so it must be refused)."""
    data = copy.deepcopy(trace)
    paths = list(_paths(data))
    path = rng.choice(paths)
    parent = data
    for p in path[:-1]:
        parent = parent[p]
    key = path[-1]
    old = parent[key]
    name = key if isinstance(key, str) else (path[-2] if len(path) > 1 and isinstance(path[-2], str) else "trace")
    kind = rng.choice(["delete", "type", "nan", "negative", "huge"])
    if kind == "delete" and isinstance(parent, dict) and key in _REQUIRED:
        del parent[key]
        return data, name, f"deleted {_path_str(path)}"
    if isinstance(old, bool) or old is None:
        parent[key] = {"nested": [1, 2]}
        return data, name, f"{_path_str(path)} = object"
    if isinstance(old, (int, float)):
        bad = {"nan": NAN, "negative": -7, "huge": 10**30, "type": "7", "delete": [old]}[kind]
        if bad == -7 and isinstance(old, float) and key in ("u", "alpha", "p", "q", "p_raw", "q_raw"):
            bad = -0.5
        parent[key] = bad
        return data, name, f"{_path_str(path)} = {bad!r}"
    if isinstance(old, str):
        parent[key] = [old] if kind != "huge" else {"s": old}
        return data, name, f"{_path_str(path)} = list/object"
    parent[key] = "not a list" if isinstance(old, list) else ["not an object"]
    return data, name, f"{_path_str(path)} replaced by the wrong type"


# keys whose absence must be refused (a missing optional key is allowed by the contract)
_REQUIRED = {"schema", "config", "prompt", "prompt_ids", "iterations", "new_token_ids", "text", "stats", "index",
             "start_len", "k", "drafts", "emitted", "token_id", "accepted", "new_tokens", "iterations"}
# values the contract does not constrain (display text, free-form config): changing them may be accepted
_FREE = {"text", "prompt", "config", "drafter", "target", "draft", "device", "dtype", "pair", "residual_top",
         "p_top", "q_top", "draft_ms", "verify_ms", "other_ms", "t_start_ms", "prefill_ms", "wall_ms", "tokens_per_s",
         "catchup_ms", "finish_reason", "baseline", "position", "residual_prob", "token_ms", "tested", "p_raw", "q_raw"}


def _paths(d: Any, prefix: tuple = ()) -> Iterator[tuple]:
    if isinstance(d, dict):
        for k, v in d.items():
            if k in _FREE or (prefix and prefix[0] == "config"):
                continue
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d[:3]):
            if isinstance(v, (dict, list)):
                yield from _paths(v, (*prefix, i))


def file_payloads(trace: dict, n: int, seed: int = 0) -> Iterator[tuple[bytes | None, str, bool, str]]:
    """``n`` uploads as (content, name hint, must_refuse, note). None content = an oversized file (the test
    makes it sparse). Mixes raw garbage, broken JSON, deep nesting and traces with one field broken."""
    rng = random.Random(seed + 2)
    good = json.dumps(trace).encode()
    fixed: list[tuple[bytes | None, str, bool, str]] = [
        (b"", "empty", True, "empty file"),
        (None, "oversized", True, "6 MB file"),
        (b"\xff\xfe\x00garbage", "binary", True, "not UTF-8"),
        (good[: len(good) // 2], "truncated", True, "truncated JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "deep", True, "JSON nested 100,000 deep"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "deep", True, "objects nested 50,000 deep"),
        (b"null", "null", True, "JSON null"), (b"[]", "list", True, "JSON list"), (b"42", "number", True, "JSON number"),
        (b'"trace"', "string", True, "JSON string"), (b"{}", "empty-object", True, "empty object"),
        (b"NaN", "nan", True, "bare NaN"), (b"{'single': 'quotes'}", "quotes", True, "not JSON"),
        (good.replace(b'"schema": "specdec-trace/1"', b'"schema": "specdec-trace/99"'), "schema", True, "wrong schema"),
        (good + b"\n\x00", "trailing", True, "NUL after the JSON"),
        (json.dumps({**trace, "iterations": [trace["iterations"][0]] * 20_000}).encode()[:5_000_000], "many", True,
         "a huge iteration list, cut"),
    ]
    for i in range(n):
        if i < len(fixed):
            yield fixed[i]
            continue
        r = rng.random()
        if r < 0.1:
            yield bytes(rng.randrange(256) for _ in range(rng.randint(1, 400))), "random", True, "random bytes"
        elif r < 0.2:
            cut = rng.randrange(1, len(good))
            yield good[:cut], "cut", True, f"JSON cut at byte {cut}"
        else:
            data, name, note = trace_mutations(trace, rng)
            yield json.dumps(data, allow_nan=True).encode(), name, False, note   # refused or not: see the test


def _path_str(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "…"


def names_field(message: str, fields: list[str]) -> bool:
    """Whether a refusal names one of ``fields`` (by the words in FIELD_WORDS or the field's own name)."""
    low = f" {message.lower()} "
    return any(w in low for f in fields for w in (*FIELD_WORDS.get(f, ()), f.lower().replace("_", " "), f.lower()))

