"""Admin routes: load and unload models while the server runs (llama.cpp's router
mode). With API keys they need a key, as every route does; without keys they are
refused (403) unless `--enable-admin-routes`."""

from __future__ import annotations

from typing import Literal

from quart import Response
from quart_trio import QuartTrio

from atom.actors.cores import EngineCore
from atom.actors.engine import Engine
from atom.http.body import request_json
from atom.http.errors import parse
from atom.http.schemas import _Body
from atom.model.catalog import ModelSpec, kind_of, readable_name
from atom.wire import dumps

ADMIN_PATHS = frozenset({"/models/load", "/models/unload", "/reset_prefix_cache"})


class LoadModelRequest(_Body):
    model: str  # a local path or an embedded model's name
    served_model_name: str | None = None


class UnloadModelRequest(_Body):
    model: str  # the served name


def register(app: QuartTrio, engine: Engine) -> None:
    @app.post("/models/load")
    async def load_model() -> Response:
        body = parse(LoadModelRequest, await request_json())
        name = body.served_model_name or readable_name(body.model)
        spec = ModelSpec(name=name, source=body.model, kind=kind_of(body.model))
        await engine.models.load(spec)
        return _answer(spec, "loaded")

    @app.post("/models/unload")
    async def unload_model() -> Response:
        body = parse(UnloadModelRequest, await request_json())
        spec = await engine.models.unload(body.model)
        return _answer(spec, "unloaded")

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        """vLLM's route: every generation model forgets its cached prefixes at its next
        step boundary (running sequences keep theirs)."""
        for core in list(engine.models.cores.values()):
            if isinstance(core, EngineCore):
                core.batcher.reset_prefix_cache_nowait()
        return Response(dumps({"status": "ok"}), content_type="application/json")


def _answer(spec: ModelSpec, status: Literal["loaded", "unloaded"]) -> Response:
    body = {"id": spec.name, "object": "model", "status": status, "kind": spec.kind.value}
    return Response(dumps(body), content_type="application/json")
