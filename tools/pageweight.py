"""The first load of the page, as a visitor's browser sees it: bytes transferred, requests and the time until the
Learn tab's title (``#learn-title``) is visible, in headless chromium (the browser tests' set-up,
``tools/browser.py``), each load in a fresh browser context (an empty cache).

    python -m tools.pageweight                 # starts app.py (the bundled model, offline) on a free port
    python -m tools.pageweight --url http://127.0.0.1:7860/ --loads 3
    python -m tools.pageweight --mbps 10 --rtt-ms 40     # over an emulated 10 Mbit/s link with 40 ms round trips

Bytes are what went over the wire (playwright's ``Request.sizes()`` of every finished request: the response's
encoded body and its headers); "document" is the HTML page itself (its transfer and its decoded size, and the
Content-Encoding it came with). Counted: every request that finished before the title was visible plus a
settle of ``--settle`` seconds (late script chunks, the first API calls; the page's event stream stays open and
never finishes, so it is not counted). The title's time is measured in the page (``performance.now()`` when
``#learn-title`` first has a layout box), from the start of the navigation. On loopback that time is mostly the
browser's and the server's CPU (the machine's load shows in it); ``--mbps`` / ``--rtt-ms`` make Chrome emulate a
slower link (DevTools ``Network.emulateNetworkConditions``, both directions), where the bytes show. Results are printed as a Markdown
table and, with ``--json``, as JSON; docs/page-weight.md holds the figures measured for this project.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

from tools.browser import browser, chromium_missing

# records when the Learn title first has a layout box (is drawn), in ms since the navigation started
TITLE_WATCH_JS = """
(() => {
  const seen = () => {
    const el = document.getElementById('learn-title');
    return el !== null && el.getClientRects().length > 0 && el.offsetParent !== null;
  };
  const poll = () => {
    if (seen()) { window.__sdTitleAt = performance.now(); return; }
    requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
})();
"""


@dataclass
class Load:
    bytes_transferred: int = 0          # every finished response, encoded (as sent), headers included
    bytes_decoded: int = 0              # the same responses once decoded
    requests: int = 0
    document_transferred: int = 0
    document_decoded: int = 0
    document_encoding: str = ""
    title_ms: float = 0.0
    by_type: dict[str, int] = field(default_factory=dict)    # bytes transferred per resource type


def measure_once(b: Any, url: str, settle_s: float = 2.0, viewport: dict | None = None, mbps: float = 0.0,
                 rtt_ms: float = 0.0) -> Load:
    """One cold load of ``url`` in a new context (over an emulated link of ``mbps`` and ``rtt_ms`` when set)."""
    context = b.new_context(viewport=viewport or {"width": 1400, "height": 1000})
    try:
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        cdp = context.new_cdp_session(pg)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        if mbps or rtt_ms:
            rate = mbps * 1e6 / 8 if mbps else -1
            cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": rtt_ms,
                                                          "downloadThroughput": rate, "uploadThroughput": rate})
        done: list[Any] = []
        pg.on("requestfinished", lambda req: done.append(req))
        pg.add_init_script(TITLE_WATCH_JS)
        pg.goto(url, wait_until="commit")
        pg.wait_for_function("() => window.__sdTitleAt !== undefined", polling=50)
        title_ms = float(pg.evaluate("() => window.__sdTitleAt"))
        pg.wait_for_timeout(settle_s * 1000)       # (a sleep would hold back the events of the requests)
        load = Load(title_ms=title_ms)
        for req in list(done):
            resp = req.response()
            if resp is None:
                continue
            sizes = req.sizes()
            sent = int(sizes.get("responseBodySize", 0)) + int(sizes.get("responseHeadersSize", 0))
            try:
                decoded = len(resp.body())
            except Exception:       # noqa: BLE001 - a body the browser no longer holds (a redirect): not counted
                decoded = 0
            kind = req.resource_type
            load.requests += 1
            load.bytes_transferred += sent
            load.bytes_decoded += decoded
            load.by_type[kind] = load.by_type.get(kind, 0) + sent
            if kind == "document":
                load.document_transferred += sent
                load.document_decoded += decoded
                load.document_encoding = resp.headers.get("content-encoding", "") or "none"
        return load
    finally:
        context.close()


def measure(url: str, loads: int = 3, settle_s: float = 2.0, mbps: float = 0.0, rtt_ms: float = 0.0) -> list[Load]:
    with browser() as b:
        measure_once(b, url, settle_s)            # a warm-up load (the server's first answers), not counted
        return [measure_once(b, url, settle_s, mbps=mbps, rtt_ms=rtt_ms) for _ in range(loads)]


def table(results: Sequence[Load]) -> str:
    kb = lambda n: f"{n / 1024:,.0f} KiB"  # noqa: E731
    lines = ["| load | transferred | decoded | requests | document (sent / decoded, encoding) | Learn title visible |",
             "|---|---|---|---|---|---|"]
    for i, r in enumerate(results, 1):
        lines.append(f"| {i} | {kb(r.bytes_transferred)} | {kb(r.bytes_decoded)} | {r.requests} | "
                     f"{kb(r.document_transferred)} / {kb(r.document_decoded)}, {r.document_encoding} | "
                     f"{r.title_ms:,.0f} ms |")
    med = lambda xs: statistics.median(xs)  # noqa: E731
    lines.append(f"| median | {kb(med([r.bytes_transferred for r in results]))} | "
                 f"{kb(med([r.bytes_decoded for r in results]))} | {med([r.requests for r in results]):.0f} | "
                 f"{kb(med([r.document_transferred for r in results]))} / "
                 f"{kb(med([r.document_decoded for r in results]))} | "
                 f"{med([r.title_ms for r in results]):,.0f} ms |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running app (default: start app.py on a free port)")
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--settle", type=float, default=2.0, help="seconds counted after the title shows")
    ap.add_argument("--mbps", type=float, default=0.0, help="emulate a link of this many Mbit/s (0: as it is)")
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="emulate this round-trip latency (ms)")
    ap.add_argument("--json", action="store_true", help="also print the loads as JSON")
    args = ap.parse_args(argv)
    if (why := chromium_missing()) is not None:
        print(why, file=sys.stderr)
        return 2
    if args.url:
        app = nullcontext(None)
    else:
        from tools.loadtest import start_app
        app = start_app({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    with app as running:
        url = args.url or running.url
        results = measure(url, args.loads, args.settle, args.mbps, args.rtt_ms)
    print(table(results))
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
