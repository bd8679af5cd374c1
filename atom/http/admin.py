"""Admin routes: load and unload models (llama.cpp's router mode) and LoRA adapters
(vLLM's routes), new weights from disk (SGLang's route), sleep and wake-up (vLLM's),
the prefix cache reset and profiling. With API keys they need a key, as every route
does; without keys they are refused (403) unless `--enable-admin-routes`."""

from __future__ import annotations

from typing import Literal

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.cores import EngineCore
from atom.actors.engine import Engine
from atom.actors.profiler import Profiler
from atom.http.body import request_json
from atom.http.errors import parse
from atom.http.schemas import _Body
from atom.model.catalog import ModelSpec, kind_of, readable_name
from atom.projections.wire import dumps
from atom.vocabulary.errors import AtomError, EngineNotReady, InvalidRequest, RouteNotFound

ADMIN_PATHS = frozenset(
    {
        "/models/load",
        "/models/unload",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
        "/reset_prefix_cache",
        "/update_weights_from_disk",
        "/sleep",
        "/wake_up",
        "/start_profile",
        "/stop_profile",
    }
)


class LoadModelRequest(_Body):
    model: str  # a local path or an embedded model's name
    served_model_name: str | None = None


class UnloadModelRequest(_Body):
    model: str  # the served name


class LoadLoraRequest(_Body):
    """vLLM's body; `model` is ATOM's: the base model's served name (default: the first
    generation model)."""

    lora_name: str
    lora_path: str
    load_inplace: bool = False  # replace an adapter served under this name
    model: str | None = None


class UnloadLoraRequest(_Body):
    lora_name: str
    lora_int_id: int | None = None  # vLLM's; accepted, the name decides


class UpdateWeightsRequest(_Body):
    """SGLang's body (its other fields are accepted and ignored: the cache is always
    flushed); `model` is ATOM's, for a server of several models."""

    model_path: str
    load_format: Literal["auto"] | None = None
    weight_version: str | None = None
    abort_all_requests: Literal[False] = False  # running requests continue on the new weights
    model: str | None = None  # the served name (default: the first generation model)


def register(app: QuartTrio, engine: Engine) -> None:
    @app.post("/models/load")
    async def load_model() -> Response:
        body = parse(LoadModelRequest, await request_json())
        name = body.served_model_name or readable_name(body.model)
        try:
            spec = ModelSpec(name=name, source=body.model, kind=kind_of(body.model))
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="served_model_name") from None
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
        for core in list(engine.models.registry.cores.values()):
            if isinstance(core, EngineCore):
                core.batcher.reset_prefix_cache_nowait()
        return _json({"status": "ok"})

    register_model_state(app, engine)
    register_loras(app, engine)
    register_sleep(app, engine)
    register_profiling(app, engine)


def register_model_state(app: QuartTrio, engine: Engine) -> None:
    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk() -> Response:
        """Answered in SGLang's shape, a failure too: `success`, `message`,
        `num_paused_requests` (the requests that continue on the new weights)."""
        body = parse(UpdateWeightsRequest, await request_json())
        try:
            paused = await engine.models.weights.update(
                body.model, body.model_path, body.weight_version
            )
        except AtomError as error:
            failed = {"success": False, "message": error.message, "num_paused_requests": 0}
            return _json(failed, status=error.status)
        message = f"Updated the model weights from {body.model_path}."
        return _json({"success": True, "message": message, "num_paused_requests": paused})


def register_loras(app: QuartTrio, engine: Engine) -> None:
    """vLLM's routes and answers: plain text on success, an error object otherwise."""

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter() -> Response:
        body = parse(LoadLoraRequest, await request_json())
        await engine.models.loras.load(
            body.lora_name, body.lora_path, body.model, replace=body.load_inplace
        )
        return _text(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter() -> Response:
        body = parse(UnloadLoraRequest, await request_json())
        await engine.models.loras.unload(body.lora_name)
        return _text(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")


def register_sleep(app: QuartTrio, engine: Engine) -> None:
    @app.post("/sleep")
    async def sleep() -> Response:
        """vLLM's route: `?level=1` frees the KV cache (and offloads the weights from an
        accelerator), `level=2` the weights too. Answers once asleep."""
        level = request.args.get("level", "1")
        if level not in {"1", "2"}:
            raise InvalidRequest(f"level must be 1 or 2, got {level!r}", param="level")
        await engine.models.weights.sleep(int(level))
        return _json({"is_sleeping": engine.models.weights.is_sleeping, "level": int(level)})

    @app.post("/wake_up")
    async def wake_up() -> Response:
        if "tags" in request.args:
            raise InvalidRequest("tags are not supported: weights and cache wake together")
        await engine.models.weights.wake_up()
        return _json({"is_sleeping": engine.models.weights.is_sleeping})

    @app.get("/is_sleeping")
    async def is_sleeping() -> Response:
        return _json({"is_sleeping": engine.models.weights.is_sleeping})


def register_profiling(app: QuartTrio, engine: Engine) -> None:
    @app.post("/start_profile")
    async def start_profile() -> Response:
        """vLLM's route; 404 unless `--profile-dir`. The trace covers what the engine does
        until /stop_profile (docs/operations.md: how to read it)."""
        await profiler(engine).start()
        return _json({"status": "profiling"})

    @app.post("/stop_profile")
    async def stop_profile() -> Response:
        path = await profiler(engine).stop()
        return _json({"status": "ok", "trace": str(path)})


def profiler(engine: Engine) -> Profiler:
    if not engine.settings.profile_dir:
        raise RouteNotFound("profiling is off: start the server with --profile-dir")
    if engine.profiler is None:
        raise EngineNotReady("the server is still starting; retry shortly")
    return engine.profiler


def _answer(spec: ModelSpec, status: Literal["loaded", "unloaded"]) -> Response:
    return _json({"id": spec.name, "object": "model", "status": status, "kind": spec.kind.value})


def _text(body: str) -> Response:
    return Response(body, content_type="text/plain; charset=utf-8")


def _json(body: object, status: int = 200) -> Response:
    return Response(dumps(body), status=status, content_type="application/json")
