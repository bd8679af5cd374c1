"""The ASGI application: generation routes go to request actors, everything else to Quart.

Quart owns the lifespan (it starts the Engine in `before_serving`), the small
JSON routes and error pages; `AtomApp` routes the two generation paths to raw
ASGI so each request actor owns `receive` and `send` itself, and reads the body
of every other HTTP request (atom/http/body.py's limits) before Quart sees it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from atom.actors.bus import Clock
from atom.actors.cores import Loaded
from atom.actors.engine import Engine, terminate_process
from atom.actors.request import ASGIReceive
from atom.http import (
    admin,
    audio_routes,
    info,
    ollama_routes,
    openapi,
    pooling_routes,
    render,
    stored,
    tokenize,
    webui,
)
from atom.http import batches as batches_routes
from atom.http import files as files_routes
from atom.http.accepting import drain_accepts
from atom.http.access import TENANT_KEY, Access, is_preflight, tenant_in
from atom.http.admin import ADMIN_PATHS
from atom.http.asgi import ASGISend
from atom.http.batch_runner import BatchRunner
from atom.http.batches import BatchStore
from atom.http.body import read_body
from atom.http.connection_guard import guard_connections
from atom.http.errors import error_bytes, error_headers
from atom.http.files import FileStore
from atom.http.generation import ROUTES, send_error, serve_generation
from atom.http.request_id import SCOPE_KEY, client_request_id, echoing
from atom.model.catalog import ModelKind, ModelSpec
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import (
    CLIENT,
    AtomError,
    Forbidden,
    Kind,
    MethodNotAllowed,
    RouteNotFound,
    Unauthorized,
)
from atom.vocabulary.tenant import Tenant

ASGIApp = Callable[[MutableMapping[str, Any], ASGIReceive, ASGISend], Awaitable[None]]


class AtomApp:
    """ASGI entry point (`hypercorn -k trio atom.http:app`)."""

    def __init__(self, quart: QuartTrio, engine: Engine, access: Access) -> None:
        self.quart = quart
        self.engine = engine
        self.access = access

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend
    ) -> None:
        if scope["type"] != "http":
            await self.quart(scope, receive, send)  # type: ignore[arg-type]
            return
        send = self.access.with_cors(scope, send)
        # Every body is read whole first, within atom/http/body.py's limits: an answer
        # sent before the body was read (a 401, 404 or 405) left hypercorn's keep-alive
        # connection stuck, and the client's next request on it hung.
        try:
            settings = self.engine.settings
            raw = await read_body(
                receive,
                max_bytes=settings.max_request_body_bytes,
                timeout_s=settings.body_timeout,
            )
        except AtomError as error:
            await send_error(send, error, scope["path"])
            return
        if raw is None:
            return  # the client left
        if is_preflight(scope):
            await self._preflight(scope, send)
            return
        try:
            self._admit(scope)
        except AtomError as error:
            await send_error(send, error, scope["path"])
            return
        if scope.get(SCOPE_KEY):
            send = echoing(send, scope[SCOPE_KEY])
        if scope["path"] in ROUTES and scope["method"] == "POST":
            await serve_generation(self.engine, scope, raw, receive, send)
            return
        if scope["path"] in ROUTES:
            refused = MethodNotAllowed(f"use POST for {scope['path']}")
            await send_error(send, refused, scope["path"])
            return
        await self.quart(scope, _replaying(raw, receive), send)  # type: ignore[arg-type]

    def serve_as(self, tenant: Tenant) -> ASGIApp:
        """This server as `tenant` sees it, for requests made in-process (a batch's
        lines, atom/http/batch_runner.py): no key, the same routes."""

        async def app(
            scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend
        ) -> None:
            scope[TENANT_KEY], scope[SCOPE_KEY] = tenant, None
            settings = self.engine.settings
            raw = await read_body(
                receive, max_bytes=settings.max_request_body_bytes, timeout_s=settings.body_timeout
            )
            if scope["path"] in ROUTES:
                await serve_generation(self.engine, scope, raw or b"", receive, send)
            else:
                await self.quart(scope, _replaying(raw or b"", receive), send)  # type: ignore[arg-type]

        return app

    def _admit(self, scope: MutableMapping[str, Any]) -> None:
        """Who makes this request, and its own id: raises the refusal, else leaves its
        Tenant and validated `x-request-id` in the scope. Admin routes are decided on the
        route that serves them (`_admitting_admin`), not on this path."""
        tenant = self.access.tenant_of(scope)
        if tenant is None:
            raise Unauthorized("a valid API key is required (Authorization: Bearer KEY)")
        scope[TENANT_KEY] = tenant
        scope[SCOPE_KEY] = client_request_id(scope)

    async def _preflight(self, scope: MutableMapping[str, Any], send: ASGISend) -> None:
        headers = self.access.preflight_headers(scope)
        status = 400 if headers is None else 200  # a refused origin or method: 400
        body = b"" if headers is not None else b"Disallowed CORS origin or method"
        start = {"type": "http.response.start", "status": status}
        length = [(b"content-length", str(len(body)).encode())]
        await send({**start, "headers": [*(headers or []), *length]})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _replaying(body: bytes, receive: ASGIReceive) -> ASGIReceive:
    """`receive` that gives the body already read, then what the server sends next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> MutableMapping[str, Any]:
        return pending.pop() if pending else await receive()

    return replay


def load_served(settings: Settings, spec: ModelSpec) -> Loaded:
    """Load one served model: a generation runtime, a pooling one or a speech one, by
    its kind."""
    if spec.kind is ModelKind.GENERATE:
        from atom.model.loader import load_runtime

        return load_runtime(settings, spec)
    if spec.kind is ModelKind.TRANSCRIBE:
        from atom.model.whisper.runtime import load_speech

        return load_speech(settings, spec)
    from atom.model.pooling import load_pooling

    return load_pooling(settings, spec)


def create_app(
    settings: Settings,
    *,
    load: Callable[[Settings, ModelSpec], Loaded] = load_served,
    clock: Clock = time.time,
    on_fatal: Callable[[], None] = terminate_process,
    on_drained: Callable[[], None] | None = None,
) -> AtomApp:
    """The server. With `on_drained` (the served app's is `exit_drained`), SIGTERM and
    SIGINT drain it (docs/operations.md) and `on_drained` ends the process."""
    guard_connections()  # one connection's error must not end hypercorn's worker
    drain_accepts()  # a burst of connections accepted in one pass (before the listeners)
    access = Access(settings)  # an empty key fails the start-up
    engine = Engine(settings, load, clock=clock, on_fatal=on_fatal, on_drained=on_drained)
    quart = QuartTrio(__name__)
    quart.config["RESPONSE_TIMEOUT"] = None  # the 60 s default cuts long streams
    # AtomApp has read every body within atom/http/body.py's limits already.
    quart.config["BODY_TIMEOUT"] = None
    quart.config["MAX_CONTENT_LENGTH"] = None
    served = AtomApp(quart, engine, access)
    runner = _batch_api(quart, settings, served)

    @quart.before_serving
    async def start_engine() -> None:
        await quart.nursery.start(engine.run)
        runner.resume()  # batches a stop left running

    quart.before_request(_admitting_admin(access, settings))
    quart.register_error_handler(AtomError, _atom_error)
    quart.register_error_handler(HTTPException, _http_error)
    for routes in (info, ollama_routes, tokenize, stored, pooling_routes, audio_routes, admin):
        routes.register(quart, engine)
    render.register(quart, engine)
    openapi.register(quart, settings)
    if not settings.no_webui:
        webui.register(quart, engine)
    return served


def _batch_api(quart: QuartTrio, settings: Settings, served: AtomApp) -> BatchRunner:
    """The Files and Batch APIs (docs/batch.md), kept under --data-dir."""
    folder = Path(settings.data_dir) if settings.data_dir else _temporary_data_dir()
    files, batches = FileStore(folder), BatchStore(folder)
    runner = BatchRunner(files, batches, served.engine, served.serve_as)
    files_routes.register(quart, files)
    batches_routes.register(quart, files, batches, runner)
    return runner


def _temporary_data_dir() -> Path:
    """Without --data-dir: a folder of this server's own, made at its first file and
    removed when the process exits normally."""
    folder = Path(tempfile.gettempdir()) / f"atom-data-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _admitting_admin(access: Access, settings: Settings) -> Callable[[], Awaitable[None]]:
    """Quart's before-request hook for admin routes, decided on the rule Quart matched:
    `//sleep` or `/%2Fsleep`, which it routes to /sleep, are the admin route they reach."""

    async def admit_admin() -> None:
        rule = request.url_rule
        if rule is None or rule.rule not in ADMIN_PATHS:
            return
        if not access.may_administer(tenant_in(request.scope)):
            raise Forbidden(
                "admin routes need the admin key (--admin-api-key)"
                if settings.admin_api_key
                else "admin routes need --api-key (or --enable-admin-routes)"
            )

    return admit_admin


async def _atom_error(error: AtomError) -> Response:
    return json_error(error)


async def _http_error(error: HTTPException) -> Response:
    """Quart's own 404/405/4xx answers in the API's error shape."""
    if error.code == 405:
        return json_error(MethodNotAllowed(f"method not allowed: {error.description}"))
    if error.code == 404:
        return json_error(RouteNotFound("no such route"))
    status = error.code or 500  # keep the status Quart chose
    other = AtomError(str(error.description))
    other.kind = Kind(status, CLIENT if status < 500 else AtomError.kind.error_type)
    return json_error(other)


def json_error(error: AtomError) -> Response:
    status, body = error_bytes(error, request.path)
    return Response(body, status=status, headers=dict(error_headers(error)))
