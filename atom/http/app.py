"""The ASGI application: generation routes go to request actors, everything else to Quart.

Quart owns the lifespan (it starts the Engine in `before_serving`), the small
JSON routes and error pages; `AtomApp` routes the two generation paths to raw
ASGI so each request actor owns `receive` and `send` itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import Any

from quart import Response
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from atom.actors.bus import Clock
from atom.actors.engine import Engine, terminate_process
from atom.actors.request import ASGIReceive, ASGISend
from atom.config import Settings
from atom.errors import (
    AtomError,
    MethodNotAllowed,
    PayloadTooLarge,
    RequestTimeout,
    RouteNotFound,
)
from atom.http import info, tokenize
from atom.http.body import MAX_BODY_BYTES
from atom.http.chat_setup import check_parser_names
from atom.http.errors import error_bytes, error_headers
from atom.http.generation import ROUTES, send_error, serve_generation
from atom.model.runner import Runtime


class AtomApp:
    """ASGI entry point (`hypercorn -k trio atom.http:app`)."""

    def __init__(self, quart: QuartTrio, engine: Engine) -> None:
        self.quart = quart
        self.engine = engine

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend
    ) -> None:
        if scope["type"] == "http" and scope["path"] in ROUTES:
            if scope["method"] != "POST":
                await send_error(send, MethodNotAllowed(f"use POST for {scope['path']}"))
                return
            await serve_generation(self.engine, scope, receive, send)
            return
        await self.quart(scope, receive, send)  # type: ignore[arg-type]


def create_app(
    settings: Settings,
    *,
    load: Callable[[Settings], Runtime] | None = None,
    clock: Clock = time.time,
    on_fatal: Callable[[], None] = terminate_process,
) -> AtomApp:
    if load is None:
        from atom.model.loader import load_runtime

        load = load_runtime
    check_parser_names(settings)
    engine = Engine(settings, load, clock=clock, on_fatal=on_fatal)
    quart = QuartTrio(__name__)
    quart.config["RESPONSE_TIMEOUT"] = None  # the 60 s default cuts long streams
    quart.config["BODY_TIMEOUT"] = settings.body_timeout  # a body that stops arriving: 408
    quart.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES  # 413

    @quart.before_serving
    async def start_engine() -> None:
        await quart.nursery.start(engine.run)

    @quart.errorhandler(AtomError)
    async def atom_error(error: AtomError) -> Response:
        return json_error(error)

    @quart.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        if error.code == 405:
            return json_error(MethodNotAllowed(f"method not allowed: {error.description}"))
        if error.code == 404:
            return json_error(RouteNotFound("no such route"))
        if error.code == 408:
            return json_error(
                RequestTimeout(
                    f"the request body did not arrive within {settings.body_timeout:g} s"
                )
            )
        if error.code == 413:
            return json_error(
                PayloadTooLarge(f"the request body is larger than {MAX_BODY_BYTES} bytes")
            )
        return json_error(AtomError(str(error.description)))

    info.register(quart, engine)
    tokenize.register(quart, engine)
    return AtomApp(quart, engine)


def json_error(error: AtomError) -> Response:
    status, body = error_bytes(error)
    return Response(body, status=status, headers=dict(error_headers(error)))
