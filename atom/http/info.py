"""Informational routes: /health, /v1/models, /metrics."""

from __future__ import annotations

import importlib.metadata
import time
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.actors.probe import probe_all
from atom.projections.wire import dumps
from atom.vocabulary.config import setting_fields
from atom.vocabulary.errors import EngineFailed, EngineNotReady, ServerDraining


def register(app: QuartTrio, engine: Engine) -> None:
    @app.get("/health")
    async def health() -> Response:
        """503 while loading or draining, 500 once the engine has stopped; with `deep=1`
        every loaded model must also produce a token (atom/actors/probe.py)."""
        check_ready(engine)
        if request.args.get("deep") in {"1", "true"}:
            await probe_all(engine.models.registry.cores.values())
        names = list(engine.models.registry.specs)
        body = dumps({"status": "ok", "model": names[0] if names else None, "models": names})
        return Response(body, content_type="application/json")

    @app.get("/v1/models")
    async def models() -> Response:
        names = [*engine.models.registry.specs, *engine.models.registry.loras]
        cards = [_card(engine, name) for name in names]
        return Response(dumps({"object": "list", "data": cards}), content_type="application/json")

    register_info(app, engine)


def register_info(app: QuartTrio, engine: Engine) -> None:
    """/health_generate, /version, /server_info, /metrics."""

    @app.get("/health_generate")  # SGLang's name for the deep check
    async def health_generate() -> Response:
        check_ready(engine)
        await probe_all(engine.models.registry.cores.values())
        return Response(dumps({"status": "ok"}), content_type="application/json")

    @app.get("/version")
    async def version() -> Response:
        return Response(dumps({"version": atom_version()}), content_type="application/json")

    @app.get("/server_info")
    async def server_info() -> Response:
        """What this server runs: version, settings (keys hidden), each model as loaded."""
        settings = {f.name: getattr(engine.settings, f.name) for f in setting_fields()}
        for secret in ("api_key", "admin_api_key"):
            settings[secret] = ["<hidden>"] * len(settings[secret])
        models = [
            {**_card(engine, name), **engine.models.registry.description_of(name)}
            for name in engine.models.registry.specs
        ]
        body = {"version": atom_version(), "settings": settings, "models": models}
        return Response(dumps(body), content_type="application/json")

    @app.get("/metrics")
    async def metrics() -> Response:
        check_ready(engine)
        failures = engine.logger.num_failed if engine.logger else None
        names = list(engine.models.registry.specs)
        max_loras = engine.settings.max_loras if engine.settings.enable_lora else None
        text = engine.metrics.render(
            names, request_log_failures=failures, max_loras=max_loras, now=time.time()
        )
        return Response(text, content_type="text/plain; version=0.0.4; charset=utf-8")


def atom_version() -> str:
    try:
        return importlib.metadata.version("atom")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check_ready(engine: Engine) -> None:
    if engine.has_stopped:
        raise EngineFailed("the engine has stopped; the server is shutting down")
    if engine.is_draining:
        raise ServerDraining("the server is shutting down")
    if not engine.is_ready:
        raise EngineNotReady("the models are still loading; retry shortly")


def _card(engine: Engine, name: str) -> dict[str, Any]:
    """vLLM's model card, with what the model does (`kind`) and whether it is loaded."""
    return {
        "id": name,
        "object": "model",
        "created": engine.created,
        "owned_by": "atom",
        "parent": None,
        **engine.models.registry.card_of(name),
    }
