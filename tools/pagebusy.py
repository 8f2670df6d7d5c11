"""How busy a Live run keeps the page: starts ``app.py`` (bundled model, offline, one thread, as the browser tests
run it), opens it in headless chromium, runs a long prompt, clicks Stop after ``--stop-after`` seconds of streaming
and prints the click's latency, the page's long tasks (PerformanceObserver ``longtask``: total and longest) and the
iterations kept. ``python -m tools.pagebusy [--max-new 300] [--stop-after 15]``; docs/page-weight.md."""
from __future__ import annotations

import argparse
import time

from tools.browser import STATUS_JS, browser, open_page, set_number
from tools.loadtest import start_app

PROMPT = "Write a long story about a lighthouse keeper and a storm."
LONG_TASKS_JS = """() => { window.__sdLong = [];
  new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__sdLong.push(e.duration)))
    .observe({entryTypes: ["longtask"]}); }"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-new", type=int, default=300)
    ap.add_argument("--stop-after", type=float, default=15.0, help="seconds of streaming before Stop is clicked")
    args = ap.parse_args()
    with start_app({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}) as app, browser() as b:
        pg = open_page(b, app.url)
        pg.evaluate(LONG_TASKS_JS)
        pg.fill("#prompt textarea", PROMPT)
        set_number(pg, "max-new", args.max_new)
        pg.click("#run")
        pg.wait_for_function(STATUS_JS, arg="Speculative decoding", timeout=120_000)
        time.sleep(args.stop_after)
        t0 = time.monotonic()
        pg.click("#stop", timeout=120_000)
        click_s = time.monotonic() - t0
        pg.wait_for_function(STATUS_JS, arg="Stopped", timeout=120_000, polling=250)
        stopped_s = time.monotonic() - t0
        long_ms = pg.evaluate("() => window.__sdLong")
        kept = pg.locator("#tokens .sd-stream .sd-it").count()
    print(f"click on Stop answered in {click_s:.2f} s; 'Stopped' shown {stopped_s:.1f} s after the click")
    longest = max(long_ms, default=0) / 1000
    print(f"long tasks: {len(long_ms)}, {sum(long_ms) / 1000:.1f} s in all, the longest {longest:.2f} s")
    print(f"iterations kept: {kept}")


if __name__ == "__main__":
    main()
