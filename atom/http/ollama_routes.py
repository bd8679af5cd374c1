"""Ollama's informational routes: `/api/tags` (the models served) and `/api/version`.
`/api/chat` is a generation route (atom/http/ollama.py)."""

from __future__ import annotations

from quart import Response
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.http.info import atom_version
from atom.projections.wire import dumps
from atom.projections.wire_ollama import timestamp


def register(app: QuartTrio, engine: Engine) -> None:
    @app.get("/api/tags")
    async def ollama_tags() -> Response:
        """Every served model by its served name (LoRA adapters too), as Ollama lists
        its local models; `modified_at` is when this server started."""
        started = timestamp(engine.created)
        names = [*engine.models.registry.specs, *engine.models.registry.loras]
        models = [{"name": name, "model": name, "modified_at": started} for name in names]
        return Response(dumps({"models": models}), content_type="application/json")

    @app.get("/api/version")
    async def ollama_version() -> Response:
        """ATOM's own version (clients show it; none of Ollama's features hang on it)."""
        return Response(dumps({"version": atom_version()}), content_type="application/json")
