"""Ollama's informational routes: `/api/tags` (the models served), `/api/show` (one
model), `/api/ps` (the loaded ones) and `/api/version`. `/api/chat` and `/api/generate`
are generation routes (atom/http/ollama.py), `/api/embed` a pooling one."""

from __future__ import annotations

from typing import Any

from quart import Response
from quart_trio import QuartTrio

from atom.actors.cores import EngineCore
from atom.actors.engine import Engine
from atom.http.body import request_json
from atom.http.info import atom_version
from atom.projections.wire import dumps
from atom.projections.wire_ollama import timestamp
from atom.vocabulary.errors import InvalidRequest, ModelNotFound


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

    @app.post("/api/show")
    async def ollama_show() -> Response:
        """One served model: its chat template, what loading chose (`model_info`) and
        what it can do (`capabilities`)."""
        shown = _shown(engine, await request_json())
        return Response(dumps(shown), content_type="application/json")

    @app.get("/api/ps")
    async def ollama_ps() -> Response:
        """The loaded models; they stay loaded (no `expires_at`)."""
        cores = engine.models.registry.cores
        models = [
            {"name": name, "model": name, "context_length": core.max_model_len}
            for name, core in cores.items()
        ]
        return Response(dumps({"models": models}), content_type="application/json")


def _shown(engine: Engine, payload: dict[str, Any]) -> dict[str, Any]:
    """/api/show's answer for the model `payload` names."""
    name = payload.get("model") or payload.get("name")
    registry = engine.models.registry
    if not isinstance(name, str):
        raise InvalidRequest("model names the model to show", param="model")
    if name not in registry.specs and name not in registry.loras:
        raise ModelNotFound(f"model '{name}' not found", param="model")
    shown: dict[str, Any] = {
        "modified_at": timestamp(engine.created),
        "model_info": {**registry.card_of(name), **registry.description_of(name)},
        "capabilities": _capabilities(engine, registry.card_of(name)["kind"]),
    }
    core = registry.cores.get(name)
    if isinstance(core, EngineCore):
        shown["template"] = getattr(core.tokenizer, "chat_template", None) or ""
    return shown


def _capabilities(engine: Engine, kind: str) -> list[str]:
    """Ollama's capability names for a model of `kind` on this server's settings."""
    if kind != "generate":
        return ["embedding"] if kind == "embed" else []
    settings = engine.settings
    tools = ["tools"] if settings.tool_call_parser is not None else []
    return ["completion", *tools, *(["thinking"] if settings.reasoning_parser else [])]
