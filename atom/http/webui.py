"""The web page (docs/webui.md): `GET /` and its files, and the two feeds only it reads.

The page is a client of the server's own API like any other; what it needs beyond the
API is two JSON feeds: the engine view's (`/webui/api/engine`, the same fold as
/metrics) and the request view's (`/webui/api/requests`, the last requests' events
with `--request-log`). The page and its files are open (the page asks for the API key);
the feeds need a key when the server has keys, as every API route does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.actors.recent import Recorded
from atom.http.access import tenant_in
from atom.log.codec import encode
from atom.log.replay import project
from atom.projections.wire import dumps
from atom.vocabulary.errors import RouteNotFound

PAGE_DIR = Path(__file__).parent.parent / "webui"  # index.html, its modules and styles
VENDOR_DIR = PAGE_DIR / "vendor"  # the libraries make setup copies from npm
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Defense in depth behind the sanitizer: no inline script, nothing from elsewhere.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def page_files() -> dict[str, Path]:
    """The files served under /webui/, by name: the page's own and the vendored ones."""
    found = [*PAGE_DIR.iterdir(), *(VENDOR_DIR.iterdir() if VENDOR_DIR.is_dir() else [])]
    return {p.name: p for p in found if p.suffix in CONTENT_TYPES and p.name != "index.html"}


def register(app: QuartTrio, engine: Engine) -> None:
    files = page_files()

    @app.get("/")
    async def page() -> Response:
        return _file(PAGE_DIR / "index.html")

    @app.get("/webui/<name>")
    async def page_file(name: str) -> Response:
        if name not in files:
            raise RouteNotFound(f"the page has no file {name!r}")
        return _file(files[name])

    @app.get("/webui/api/engine")
    async def engine_feed() -> Response:
        names = engine.models.registry.specs
        models = {name: engine.metrics.model(name).snapshot() for name in names}
        body = {"at": time.time(), "request_log": engine.recent is not None, "models": models}
        return Response(dumps(body), content_type="application/json")

    @app.get("/webui/api/requests")
    async def recent_requests() -> Response:
        recent = [] if engine.recent is None else engine.recent.newest_first()
        tenant = tenant_in(request.scope)
        data = [
            _summary(request_id, recorded)
            for request_id, recorded in recent
            if tenant.may_see(recorded.owner)
        ]
        body = {"request_log": engine.recent is not None, "data": data}
        return Response(dumps(body), content_type="application/json")

    @app.get("/webui/api/requests/<request_id>")
    async def recent_request(request_id: str) -> Response:
        recorded = None if engine.recent is None else engine.recent.get(request_id)
        if recorded is None or not tenant_in(request.scope).may_see(recorded.owner):
            raise RouteNotFound(f"no recent request {request_id!r} (needs --request-log)")
        return Response(dumps(_details(request_id, recorded)), content_type="application/json")


def _file(path: Path) -> Response:
    content_type = CONTENT_TYPES[path.suffix]
    return Response(path.read_bytes(), content_type=content_type, headers=PAGE_HEADERS)


def _summary(request_id: str, recorded: Recorded) -> dict[str, Any]:
    return {
        "id": request_id,
        "model": recorded.model,
        "endpoint": recorded.endpoint,
        "state": recorded.state,
        "received_at": recorded.first.at,
        "num_events": len(recorded.envelopes) + recorded.num_dropped,
    }


def _details(request_id: str, recorded: Recorded) -> dict[str, Any]:
    """The request's log records, and the bytes its client was sent, rebuilt from them
    as `atom replay` does (a request cut short by the event limit shows what it has)."""
    (response,) = project(recorded.envelopes)
    records = [json.loads(encode(envelope)) for envelope in recorded.envelopes]
    sent = {
        "status": response.status,
        "content_type": response.content_type,
        "body": bytes(response.body).decode("utf-8", errors="replace"),
        "is_complete": response.is_complete,
    }
    summary = _summary(request_id, recorded)
    return {**summary, "num_dropped": recorded.num_dropped, "events": records, "response": sent}
