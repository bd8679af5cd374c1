"""Informational routes: /health, /v1/models, /metrics."""

from __future__ import annotations

from quart import Response
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.config import DEFAULT_MODEL_NAME
from atom.http.generation import ready_core
from atom.wire import dumps


def register(app: QuartTrio, engine: Engine) -> None:
    @app.get("/health")
    async def health() -> Response:
        ready_core(engine)  # 503 while loading, 500 once the engine has stopped
        body = dumps({"status": "ok", "model": engine.settings.model_name})
        return Response(body, content_type="application/json")

    @app.get("/v1/models")
    async def models() -> Response:
        card = {
            "id": engine.settings.model_name,
            "object": "model",
            "created": engine.created,
            "owned_by": "atom",
            "root": engine.settings.model or DEFAULT_MODEL_NAME,
            "parent": None,
            "max_model_len": engine.core.max_model_len if engine.core else None,
        }
        body = dumps({"object": "list", "data": [card]})
        return Response(body, content_type="application/json")

    @app.get("/metrics")
    async def metrics() -> Response:
        ready_core(engine)
        failures = engine.logger.num_failed if engine.logger else None
        text = engine.metrics.render(engine.settings.model_name, request_log_failures=failures)
        return Response(text, content_type="text/plain; version=0.0.4; charset=utf-8")
