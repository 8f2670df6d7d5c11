"""Lines the command line prints for one run and for a batch alike."""
from __future__ import annotations


def pair_line(c: dict) -> str:
    """The draft → target pair and where it ran, from a trace's config."""
    return f"pair: draft={c.get('drafter')} -> target={c.get('target', '?')}  on {c.get('device')} ({c.get('dtype')})"


def different_draws(same: bool, c: dict, hint: str = "") -> str:
    """What follows "identical …: no" when sampling with the standard rule made it expected ("" otherwise)."""
    if same or c.get("temperature") == 0 or c.get("sampler") == "coupled":
        return ""
    return f" (expected when sampling with the standard rule: different draws{hint})"
