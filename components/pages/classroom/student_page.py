"""The students' page of a class, ``/class``: a small page of the app's own (``static/``: HTML, CSS, JavaScript; no
Gradio session, no model), phone first, that speaks JSON to the class's routes (``serving.classroom.api``): join,
follow the room through its event stream, guess and Send, and after the Reveal the class's histogram and the
student's own line. Plotly.js is the copy the app's ``plotly`` package ships (never a CDN), loaded after the page
works.

The join link the presenter hands out is the app's own address with ``?class=CODE``; ``CLASS_REDIRECT`` (in the
Gradio page's head) sends such an address to this page before anything else loads.

Every asset is read once and kept gzip-compressed in memory, with an ETag: a page costs the server one dictionary
lookup per file, and a phone that has the file asks with ``If-None-Match`` and gets 304. Ids kept from the Learn tab
(tests and links use them): ``learn-title``, ``.learn-guess``, ``class-send``, ``class-histogram``; and
``class-status``, ``class-timer``, ``class-join-form``, ``class-code-in``, ``class-nick-in``, ``class-chapter``,
``class-answer``, ``class-live-run``.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

import plotly
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

PATH = "/class"
STATIC = Path(__file__).resolve().parent / "static"
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
ASSETS = {"class.js": (STATIC / "class.js", "text/javascript; charset=utf-8"),
          "class.css": (STATIC / "class.css", "text/css; charset=utf-8"),
          "plotly.min.js": (PLOTLY_JS, "text/javascript; charset=utf-8")}
PAGE = (STATIC / "class.html", "text/html; charset=utf-8")
# in the Gradio page's <head>: an address of the app with ?class=CODE opens the students' page (before gradio loads)
CLASS_REDIRECT = """<script>
(function () {
  var q = new URLSearchParams(window.location.search);
  if (q.has("class") && !/\\/class\\/?$/.test(window.location.pathname)) {
    window.location.replace(window.location.pathname.replace(/\\/?$/, "/") + "class" + window.location.search);
  }
})();
</script>"""


@dataclass(frozen=True)
class Asset:
    raw: bytes
    packed: bytes
    etag: str
    media_type: str


@functools.lru_cache(maxsize=None)
def asset(path: Path, media_type: str) -> Asset:
    """A file as served: read and compressed once."""
    raw = path.read_bytes()
    return Asset(raw, gzip.compress(raw, 9, mtime=0), '"' + hashlib.blake2b(raw, digest_size=12).hexdigest() + '"',
                 media_type)


def serve(request: Request, a: Asset, cache: str) -> Response:
    """``a`` for ``request``: 304 when the browser has it, gzip-compressed when it takes that."""
    headers = {"ETag": a.etag, "Cache-Control": cache, "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") == a.etag:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(a.packed, media_type=a.media_type, headers={**headers, "Content-Encoding": "gzip"})
    return Response(a.raw, media_type=a.media_type, headers=headers)


async def page(request: Request) -> Response:
    if request.url.path.endswith("/"):             # /class/ → /class (the page's files are relative to it)
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(request.url.path.rstrip("/") + query, status_code=307)
    return serve(request, asset(*PAGE), "no-cache")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return Response("No such file.", status_code=404, media_type="text/plain")
    # the page's own script and style may change with the app (no-cache: asked again, 304 while unchanged);
    # plotly.js changes only with the plotly package
    return serve(request, asset(*ASSETS[name]), "public, max-age=86400" if name == "plotly.min.js" else "no-cache")


def student_page_routes() -> list[Route]:
    """The page and its files, for the app's ``routes``."""
    return [Route(PATH, page, methods=["GET"]), Route(PATH + "/", page, methods=["GET"]),
            Route(PATH + "/static/{name}", static, methods=["GET"])]


__all__ = ["PATH", "CLASS_REDIRECT", "student_page_routes", "asset", "serve", "ASSETS", "PAGE", "STATIC"]
