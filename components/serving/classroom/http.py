"""The one HTTP route a class adds to the app: ``GET /class/stage?code=CODE`` answers the room's stage key
(``CODE:N``, N bumped by every change a student's page shows) or ``gone`` (no such room: a wrong code, an ended or
expired class), as plain text, never cached.

The students' page polls it from its gr.Timer (a script in the page, no gradio event): an unchanged key costs the
server one dictionary lookup and no gradio machinery (a gradio event costs ≈ 6 ms of CPU however little it does,
measured in docs/classroom.md); a changed key makes the page ask gradio for what changed. It tells a caller no
more than joining would: whether a code names a room.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from components.serving.classroom.codes import parse_code
from components.serving.classroom.room import RoomError

STAGE_PATH = "/class/stage"
GONE = "gone"
NO_STORE = {"Cache-Control": "no-store"}


def stage_key(store: Any, raw_code: Any) -> str:
    """The room's stage key, or ``GONE``."""
    try:
        code = parse_code(raw_code)
        return f"{code}:{store.stage(code)}"
    except (ValueError, RoomError):
        return GONE


def stage_route(store: Callable[[], Any] | Any) -> Route:
    """The route, for the app's ``routes`` (``launch(app_kwargs={"routes": [...]})``); ``store``: the room store, or
    a function that returns it (made on first use)."""
    async def stage(request: Request) -> PlainTextResponse:
        rooms = store() if callable(store) else store
        return PlainTextResponse(stage_key(rooms, request.query_params.get("code")), headers=NO_STORE)
    return Route(STAGE_PATH, stage, methods=["GET"])


__all__ = ["STAGE_PATH", "GONE", "stage_key", "stage_route"]
