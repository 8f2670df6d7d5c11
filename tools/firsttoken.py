"""How soon a Live run shows its first iteration after the app starts: ``python -m tools.firsttoken [--pause S]``.

Starts ``app.py`` (the bundled model, offline, one thread), opens the page in headless chromium as soon as it
answers, presses Live's Run (16 new tokens) at once, then twice more (the second after ``--pause`` seconds, when
the start-up calibration's later jobs may be measuring), and prints, for each run, the seconds from Run to the
first "Speculative decoding: iteration …" status and whether the run was told to wait.
"""
from __future__ import annotations

import argparse
import time

from tools.browser import browser, open_page, set_number, show_tab
from tools.loadtest import start_app

FIRST_FRAME = "Speculative decoding"
DONE = "() => document.querySelector('#status').innerText.includes('Done')"


def first_frame_s(pg, timeout_s: float = 180.0) -> tuple[float, list[str]]:
    """Press Run; the seconds until the run's first frame, and the waiting notes shown before it."""
    t0 = time.monotonic()
    pg.click("#run")
    notes: list[str] = []
    while time.monotonic() - t0 < timeout_s:
        status = pg.inner_text("#status")
        if status.startswith(FIRST_FRAME):
            break
        note = status.split("\n")[0].split(":")[0]
        if ("Waiting" in note or "Calibrating" in note) and note not in notes:
            notes.append(note)
        time.sleep(0.05)
    first = time.monotonic() - t0
    pg.wait_for_function(DONE, timeout=timeout_s * 1000)
    return first, notes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pause", type=float, default=30.0, help="seconds between the first and the second run")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    with start_app({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}) as app, browser() as b:
        print(f"the app answered after {time.monotonic() - t0:.1f} s")
        pg = open_page(b, app.url)
        show_tab(pg, "Live")
        set_number(pg, "max-new", 16)
        for i in range(3):
            at = time.monotonic() - t0
            first, notes = first_frame_s(pg)
            print(f"run {i + 1}, Run pressed {at:.1f} s after start: first iteration after {first:.2f} s"
                  + (f" (told: {' / '.join(notes)})" if notes else ""))
            if i == 0:
                time.sleep(args.pause)


if __name__ == "__main__":
    main()
