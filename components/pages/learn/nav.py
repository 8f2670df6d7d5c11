"""Moving through the Learn tab, as pure functions: the chapter a step or a link leads to, the title, and
what a page's URL asks for (``?tab=learn&chapter=4``; ``tab`` names any of the app's tabs).
"""
from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def step(current: int, delta: int, n: int) -> int:
    """The chapter (1-based) ``delta`` steps from ``current``, kept within 1..n."""
    return min(max(int(current) + int(delta), 1), n)


def title_html(number: int, n: int, title: str) -> str:
    return (f'<h2 class="sd-learn-title">Chapter {number} / {n} · {html.escape(title)}</h2>')


def chapter_link(number: int) -> str:
    return f"?tab=learn&chapter={number}"


@dataclass(frozen=True)
class UrlRequest:
    """What a page's query asks of the tabs: a tab to open and a chapter to show (None: leave as is), and
    what was refused, in words (quoted values are cut short; the caller escapes them for the page)."""
    tab: str | None = None
    chapter: int | None = None
    problems: tuple[str, ...] = ()


def read_query(params: Mapping[str, str], tab_ids: Sequence[str], n_chapters: int) -> UrlRequest:
    """``tab`` must be one of ``tab_ids``; ``chapter`` a whole number 1..n_chapters (it opens the Learn tab
    when no tab is named). Anything else is refused with a reason and changes nothing."""
    problems = []
    tab = params.get("tab")
    if tab is not None and tab not in tab_ids:
        problems.append(f"tab must be one of {', '.join(tab_ids)}, got {tab[:40]!r}")
        tab = None
    chapter = None
    raw = params.get("chapter")
    if raw is not None:
        if re.fullmatch(r"[0-9]{1,4}", raw) and 1 <= int(raw) <= n_chapters:
            chapter = int(raw)
            tab = tab or "learn"
        else:
            problems.append(f"chapter must be a number from 1 to {n_chapters}, got {raw[:40]!r}")
    return UrlRequest(tab, chapter, tuple(problems))


__all__ = ["step", "title_html", "chapter_link", "UrlRequest", "read_query"]
