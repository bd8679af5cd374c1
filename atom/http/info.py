"""Informational routes: /health, /v1/models, /metrics."""

from __future__ import annotations

from quart import Response
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.config import DEFAULT_MODEL_NAME
from atom.errors import EngineNotReady
from atom.http.generation import ready_core
from atom.wire import dumps


def register(app: QuartTrio, engine: Engine) -> None:
    @app.get("/health")
    async def health() -> Response:
        if not engine.is_ready:
            raise EngineNotReady("the model is still loading")
        return Response(b"", status=200)

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
        text = engine.metrics.render(engine.settings.model_name)
        return Response(text, content_type="text/plain; version=0.0.4; charset=utf-8")
