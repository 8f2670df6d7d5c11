"""Nicknames, for a class whose presenter asks for them (off by default: a class is anonymous). A nickname is short
(1 to ``MAX_LEN`` characters once spaces are trimmed and runs of them made one), made of letters of any script,
digits, spaces and ``- _ . '``, and passes a small word filter; a room holds each nickname once (compared without case,
accents, spaces or marks). Pages escape it wherever it is drawn; only the presenter's page draws it.

The filter is deliberately small (common English insults and profanity, read through look-alike digits, so
"xXb1tchXx" is caught; the short ones as whole words only, so Scunthorpe and Hancock pass): it keeps the obvious off
the projector, and the presenter can remove a student.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any

from components.serving.classroom.room import NEED_NICKNAME, RoomError

MAX_LEN = 20
_ALLOWED = re.compile(r"[\w .'-]+")
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "@": "a", "$": "s",
                       "!": "i", "|": "i"})
# matched anywhere inside the folded nickname: words that hardly occur inside innocent ones
INSIDE = ("fuck", "shit", "bitch", "pussy", "whore", "slut", "bastard", "asshole", "nigg", "retard", "dildo",
          "porn", "wank", "hitler", "penis", "vagina", "killyourself")
# matched as whole words only: they occur inside names and places (Scunthorpe, Hancock, Nazir, Marseille)
WORDS = ("cunt", "dick", "cock", "twat", "nazi", "arse", "rape", "tits", "piss", "fag", "boob", "boobs", "sexy",
         "kys", "ass", "sex")


def _bare(text: str) -> str:
    text = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in text if c.isalnum() and not unicodedata.combining(c))


def fold(nickname: str) -> str:
    """The nickname as the filter reads it: lower case, accents off, look-alike digits as letters, letters only."""
    return "".join(c for c in _bare(nickname.translate(_LEET)) if c.isalpha())


def same_key(nickname: str) -> str:
    """The nickname as a room compares it with the others: lower case, accents, spaces and marks off."""
    return _bare(nickname)


def check_nickname(raw: object) -> str:
    """The nickname ``raw`` as kept (NFKC, trimmed, single spaces), or ValueError saying what a nickname may be."""
    if not isinstance(raw, str) or len(raw) > 4 * MAX_LEN:
        raise ValueError(f"a nickname is text of 1 to {MAX_LEN} characters")
    text = " ".join(unicodedata.normalize("NFKC", raw).split())
    if not text or len(text) > MAX_LEN:
        raise ValueError(f"a nickname is 1 to {MAX_LEN} characters")
    if not _ALLOWED.fullmatch(text) or any(unicodedata.category(c)[0] in "CS" for c in text):
        raise ValueError("a nickname may hold letters, digits, spaces and - _ . ' only")
    folded = fold(text)
    if not folded and not any(c.isdigit() for c in text):
        raise ValueError("a nickname needs a letter or a digit")
    words = {fold(w) for w in re.split(r"[\s._'-]+", text)}
    if any(w in folded for w in INSIDE) or words & set(WORDS):
        raise ValueError("please choose another nickname")
    return text


def nickname_of(raw: Any, wanted: bool) -> str:
    """The nickname a joining student gives, checked ("" when the room does not ask for one); RoomError in words
    (its ``reason`` "nickname": the page asks for one again)."""
    if not wanted:
        return ""
    if raw is None or raw == "":
        raise RoomError(NEED_NICKNAME, status=400, reason="nickname")
    try:
        return check_nickname(raw)
    except ValueError as e:
        raise RoomError(f"{str(e)[:1].upper()}{str(e)[1:]}.", status=400, reason="nickname") from None


__all__ = ["nickname_of", "MAX_LEN", "INSIDE", "WORDS", "fold", "same_key", "check_nickname"]
