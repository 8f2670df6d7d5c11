"""Refresh the README's pictures: start ``app.py`` (the bundled model, offline) on 127.0.0.1, drive it in
headless chromium (the browser tests' set-up, ``tools/browser.py``) and save

- ``docs/screenshot.png``: the Live tab after a greedy run of the default pair (full page);
- ``docs/presenter.png``: the Replay tab in presenter mode at iteration 4 (1400 × 1560 px);
- ``docs/learn.png``: the Learn tab's chapter 2 after its run, a guess and Reveal (full page);
- ``docs/learn-phone.png``: the same on a 390 × 844 phone (twice the pixels), from its top to its answer;
- ``docs/class-reveal.png``: a class's Reveal on the presenter's page (presenter mode): chapter 1 run, eleven
  students' guesses sent over HTTP as their pages send them and one from a phone, the class's answer and histogram;
  ``docs/class-phone.png``: the same Reveal on the phone's students' page (its guess, its own line, the histogram).

    make screenshots          # or: python -m tools.screenshots [--out docs] [--only live presenter learn phone class]

The tests never write these files; this command is the one way they change.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.browser import (VIEWPORT, browser, chromium_missing, class_histogram, class_start, learn_guess, learn_part,
                           learn_reveal, learn_run, open_page, presenter_replay_at, run_live)
from tools.classclient import Conn
from tools.loadtest import ROOT, start_app

LIVE_PROMPT = "Repeat this sentence exactly, twice: <b>Bold</b> cats & dogs sleep on the warm red mat."
LIVE_MAX_NEW = 40
PRESENTER_SIZE = {"width": 1400, "height": 1560}
LEARN_CHAPTER = 2
LEARN_GUESS = 3                 # chapter 2 asks how many of 4 drafts the target keeps
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2}


def _live(b: Any, url: str, path: Path) -> None:
    pg = open_page(b, url)
    run_live(pg, LIVE_PROMPT, LIVE_MAX_NEW)
    pg.wait_for_selector("#tokens .sd-sel")
    pg.screenshot(path=str(path), full_page=True)
    pg.close()


def _presenter(b: Any, url: str, path: Path) -> None:
    context = b.new_context(viewport=dict(VIEWPORT))
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    presenter_replay_at(pg, url, iteration=4)
    pg.set_viewport_size(PRESENTER_SIZE)
    pg.evaluate("() => document.querySelector('#replay-note').scrollIntoView()")
    time.sleep(1.0)                            # let the figures finish their resize
    pg.screenshot(path=str(path), full_page=False)
    context.close()


def _chapter(pg: Any) -> None:
    learn_run(pg)
    learn_guess(pg, number=LEARN_GUESS)
    learn_reveal(pg)
    time.sleep(1.0)                            # let the revealed figure finish drawing


def _learn(b: Any, url: str, path: Path) -> None:
    pg = open_page(b, f"{url}?tab=learn&chapter={LEARN_CHAPTER}", tab=None)
    _chapter(pg)
    pg.screenshot(path=str(path), full_page=True)
    pg.close()


CLASS_GUESSES = (1.0, 1.25, 1.5, 1.5, 1.75, 2.0, 2.0, 2.5, 3.0, 4.0, 6.0)   # chapter 1: a forward over 8 tokens, in forwards


async def _students_guess(url: str, code: str, run_done: threading.Event, guesses: Sequence[float]) -> None:
    """Students as their pages call the class's routes (``tools.classclient``): join, and once the run is out, send a
    guess."""
    conns = [Conn(url) for _ in guesses]
    ids = [(await c.post_json("/class/api/join", {"code": code}))[1]["student"] for c in conns]
    await asyncio.to_thread(run_done.wait, 300)
    for conn, student, guess in zip(conns, ids, guesses):
        await conn.post_json("/class/api/guess", {"code": code, "student": student, "chapter": 1, "run_no": 1,
                                                  "value": guess})
    for conn in conns:
        conn.close()


def _class(b: Any, url: str, path: Path) -> None:
    pg = b.new_page(viewport={"width": 1400, "height": 1000})
    pg.set_default_timeout(60_000)
    pg.goto(url + "?presenter=1")
    pg.wait_for_selector("#class-start")
    code = class_start(pg).replace("-", "")
    phone = b.new_page(**PHONE)                  # one student on a phone, for class-phone.png
    phone.set_default_timeout(60_000)
    phone.goto(f"{url}?class={code}")
    phone.wait_for_function("() => /Class /.test(document.querySelector('#class-status')?.innerText || '')")
    run_done = threading.Event()             # the students run in a thread of their own (playwright holds this one)
    students = threading.Thread(target=asyncio.run, args=(_students_guess(url, code, run_done, CLASS_GUESSES),))
    students.start()
    learn_run(pg)
    run_done.set()
    students.join(300)
    box = phone.locator(".learn-guess input[type=number]")
    box.fill("2.25")
    phone.click("#class-send")
    pg.wait_for_function(f"() => /Guesses in: {len(CLASS_GUESSES) + 1} of/.test("
                         "document.querySelector('#class-count')?.innerText)")
    pg.click("#class-reveal")
    class_histogram(pg)
    class_histogram(phone)
    time.sleep(1.0)                            # let the histogram finish drawing
    pg.locator("#class-lead").screenshot(path=str(path))
    top = phone.evaluate("() => document.querySelector('#class-guess-form').getBoundingClientRect().top + scrollY - 8")
    bottom = phone.evaluate("() => document.querySelector('#class-histogram').getBoundingClientRect().bottom + scrollY")
    phone.screenshot(path=str(path.with_name("class-phone.png")), full_page=True,
                     clip={"x": 0, "y": top, "width": 390, "height": bottom - top + 8})
    phone.close()
    pg.close()


def _phone(b: Any, url: str, path: Path) -> None:
    pg = open_page(b, f"{url}?tab=learn&chapter={LEARN_CHAPTER}", tab=None, **PHONE)
    _chapter(pg)
    bottom = learn_part(pg, "learn-answer").evaluate("a => a.getBoundingClientRect().bottom + window.scrollY + 16")
    bottom = min(bottom, pg.evaluate("() => document.documentElement.scrollHeight"))
    pg.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": 390, "height": bottom})
    pg.close()


PICTURES = {"live": ("screenshot.png", _live), "presenter": ("presenter.png", _presenter),
            "learn": ("learn.png", _learn), "phone": ("learn-phone.png", _phone),
            "class": ("class-reveal.png", _class)}


def take(url: str, out: Path, only: Sequence[str] = tuple(PICTURES)) -> list[Path]:
    """The pictures named in ``only`` (all by default) of the app at ``url``, written into ``out``; their paths."""
    paths = []
    with browser() as b:
        for name in only:
            file, draw = PICTURES[name]
            draw(b, url, out / file)
            paths.append(out / file)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs"), help="folder to write the PNG files into (default docs/)")
    ap.add_argument("--only", nargs="+", choices=list(PICTURES), default=list(PICTURES),
                    help="refresh only these pictures (default: all)")
    args = ap.parse_args(argv)
    missing = chromium_missing()
    if missing:
        print(f"screenshots: {missing}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with start_app({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}) as app:   # as the browser tests run it
        for path in take(app.url, out, args.only):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
