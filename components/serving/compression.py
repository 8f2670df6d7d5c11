"""Compressed responses for what gradio leaves uncompressed.

Gradio 6 puts its own ``BrotliMiddleware`` on the app it builds, but that one compresses only paths that end in
a text file's extension (``.js``, ``.css``, ``.json``, …): the page itself (``/``, about 1 MB of HTML with the
whole layout and every initial figure inlined), ``/config`` and the API's JSON answers went out as they are, even
to a browser that asks for gzip. ``GZipPages`` (Starlette's ``GZipMiddleware``) compresses exactly those, and
leaves alone

- the paths gradio's own middleware compresses (their extensions, ``BROTLI_EXTENSIONS``): served as before;
- streams: Starlette never compresses ``text/event-stream`` (the queue's event stream, which the Live tab's
  streamed run and ``gradio_client`` read as it comes), nor an already encoded response or images and fonts.

The supported way in gradio 6.31: ``launch(app_kwargs=…)`` passes keyword arguments to the FastAPI app gradio
builds, and FastAPI takes a ``middleware`` list (``app_kwargs()`` below; ``app.launch_options`` uses it).
"""
from __future__ import annotations

from typing import Any

from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

# gradio.brotli_middleware.BrotliMiddleware._is_compressible_file_type: the extensions it compresses itself
BROTLI_EXTENSIONS = frozenset({".html", ".htm", ".js", ".css", ".json", ".md", ".txt", ".csv", ".tsv", ".xml", ".svg"})
MINIMUM_SIZE = 1024        # smaller answers go as they are (the gzip header and a round of deflate cost more)
COMPRESS_LEVEL = 6         # the page (~1 MB) in ~10 ms; level 9 saves ~1 % more for 3× the time


def gradio_compresses(path: str) -> bool:
    """Whether gradio's own middleware compresses a response on ``path`` (by its extension)."""
    last = path.rsplit("/", 1)[-1]
    return "." in last and "." + last.rsplit(".", 1)[-1].lower() in BROTLI_EXTENSIONS


class GZipPages:
    """ASGI middleware: gzip (when the client accepts it) for every HTTP response gradio does not compress."""

    def __init__(self, app: ASGIApp, minimum_size: int = MINIMUM_SIZE, compresslevel: int = COMPRESS_LEVEL) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size, compresslevel=compresslevel)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not gradio_compresses(scope.get("path", "")):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def app_kwargs() -> dict[str, Any]:
    """For ``launch(app_kwargs=…)``: the FastAPI app gradio builds gets ``GZipPages`` (inside gradio's own
    middleware, which then sees an encoded answer and leaves it)."""
    return {"middleware": [Middleware(GZipPages)]}


__all__ = ["GZipPages", "app_kwargs", "gradio_compresses", "BROTLI_EXTENSIONS"]
