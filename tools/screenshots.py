"""Refresh the README's pictures: start ``app.py`` (the bundled model, offline) on 127.0.0.1, drive it in
headless chromium (the browser tests' set-up, ``tools/browser.py``) and save

- ``docs/screenshot.png``: the Live tab after a greedy run of the default pair (full page);
- ``docs/presenter.png``: the Replay tab in presenter mode at iteration 4 (1400 × 1560 px).

    make screenshots          # or: python -m tools.screenshots [--out docs]

The tests never write these files; this command is the one way they change.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tools.browser import VIEWPORT, browser, chromium_missing, open_page, presenter_replay_at, run_live
from tools.loadtest import ROOT, start_app

LIVE_PROMPT = "Repeat this sentence exactly, twice: <b>Bold</b> cats & dogs sleep on the warm red mat."
LIVE_MAX_NEW = 40
PRESENTER_SIZE = {"width": 1400, "height": 1560}


def take(url: str, out: Path) -> list[Path]:
    """Both pictures of the app at ``url``, written into ``out``; returns their paths."""
    live, presenter = out / "screenshot.png", out / "presenter.png"
    with browser() as b:
        pg = open_page(b, url)
        run_live(pg, LIVE_PROMPT, LIVE_MAX_NEW)
        pg.wait_for_selector("#tokens .sd-sel")
        pg.screenshot(path=str(live), full_page=True)
        pg.close()
        context = b.new_context(viewport=dict(VIEWPORT))
        pg = context.new_page()
        pg.set_default_timeout(30_000)
        presenter_replay_at(pg, url, iteration=4)
        pg.set_viewport_size(PRESENTER_SIZE)
        pg.evaluate("() => document.querySelector('#replay-note').scrollIntoView()")
        time.sleep(1.0)                            # let the figures finish their resize
        pg.screenshot(path=str(presenter), full_page=False)
        context.close()
    return [live, presenter]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs"), help="folder to write the PNG files into (default docs/)")
    args = ap.parse_args(argv)
    missing = chromium_missing()
    if missing:
        print(f"screenshots: {missing}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with start_app({"HF_HUB_OFFLINE": "1"}) as app:
        for path in take(app.url, out):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
