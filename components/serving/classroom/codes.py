"""A class's names: the join code a room is found by, the presenter's secret that leads it, and a student's
anonymous id. Pure functions; the randomness is ``secrets``'.

- A **join code** is 8 characters from an alphabet without look-alikes (none of 0 O Q, 1 I L, 2 Z, 5 S, 6 G, 8 B,
  U V), shown as ``XXXX-XXXX``: 21⁸ ≈ 3.8 × 10¹⁰ codes, so with the few rooms a server holds
  a stranger's guess lands in one about once in a billion tries. Typed codes are read forgivingly (case, spaces
  and dashes ignored).
- A **presenter secret** is 32 URL-safe characters (192 random bits): in the presenter's link only. A store keeps
  its SHA-256 (``secret_hash``), never the secret.
- A **student id** is 16 URL-safe characters (96 bits), kept in the student's browser.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets

ALPHABET = "34679ACDEFHJKMNPRTWXY"   # 21 characters a projector and a phone keyboard do not confuse
CODE_LEN = 8
SECRET_BYTES = 24                  # token_urlsafe: 32 characters
STUDENT_BYTES = 12                 # token_urlsafe: 16 characters
MAX_RAW = 64                       # longer input is refused before it is looked at
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LEN))


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def secret_hash(secret: str) -> str:
    """What a store keeps of a presenter secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


def secret_matches(stored_hash: str, given: object) -> bool:
    """Whether ``given`` is the secret whose hash is ``stored_hash`` (compared in constant time)."""
    return isinstance(given, str) and hmac.compare_digest(stored_hash, secret_hash(given))


def new_student() -> str:
    return secrets.token_urlsafe(STUDENT_BYTES)


def shown_code(code: str) -> str:
    """The code as people read it: ``XXXX-XXXX``."""
    return f"{code[:4]}-{code[4:]}"


def quoted(raw: object, limit: int = 24) -> str:
    """Untrusted input in a message: its repr, cut (the page escapes messages)."""
    text = repr(raw)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_code(raw: object) -> str:
    """The code in ``raw`` (any case, with spaces or a dash), or ValueError saying what a code looks like."""
    example = f"a code is {CODE_LEN} letters and digits, such as {shown_code('7KX4MP9A')}"
    if not isinstance(raw, str) or len(raw) > MAX_RAW:
        raise ValueError(f"{quoted(raw)} is not a class code: {example}")
    code = re.sub(r"[\s-]", "", raw).upper()
    if len(code) != CODE_LEN or any(c not in ALPHABET for c in code):
        raise ValueError(f"{quoted(raw)} is not a class code: {example}")
    return code


def is_code(raw: object) -> bool:
    """Whether ``raw`` is a code exactly as issued (no dash, upper case)."""
    return isinstance(raw, str) and len(raw) == CODE_LEN and all(c in ALPHABET for c in raw)


def check_token(raw: object, what: str, nbytes: int) -> str:
    """A secret or a student id as issued here (URL-safe, the issued length), or ValueError."""
    length = len(secrets.token_urlsafe(nbytes))
    if not isinstance(raw, str) or len(raw) != length or not _TOKEN.fullmatch(raw):
        raise ValueError(f"that is not a {what} this server issued")
    return raw


__all__ = ["ALPHABET", "CODE_LEN", "new_code", "new_secret", "new_student", "shown_code", "parse_code",
           "check_token", "is_code", "quoted", "SECRET_BYTES", "STUDENT_BYTES", "secret_hash", "secret_matches"]
