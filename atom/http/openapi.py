"""GET /openapi.json: an OpenAPI 3.1 description of every route, built from the request
schemas (pydantic) and the answers' schemas (atom/http/openapi_answers.py).

`OPERATIONS` is the one table of routes it describes; tests/http/test_openapi.py checks
it against the routes the app really serves, and the fuzz test sends what the document
allows (and what it does not) to every operation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from quart import Response
from quart_trio import QuartTrio

from atom.http import openapi_answers as answers
from atom.http.admin import (
    LoadLoraRequest,
    LoadModelRequest,
    UnloadLoraRequest,
    UnloadModelRequest,
    UpdateWeightsRequest,
)
from atom.http.anthropic_schemas import CountTokensRequest, MessagesRequest
from atom.http.audio_routes import PATHS as AUDIO_PATHS
from atom.http.batches import BatchCreateRequest
from atom.http.info import atom_version
from atom.http.ollama_schemas import OllamaChatRequest, OllamaGenerateRequest
from atom.http.openapi_answers import Schema
from atom.http.pooling_routes import ALIASES
from atom.http.pooling_routes import ROUTES as POOLING_ROUTES
from atom.http.responses_schemas import ResponsesRequest
from atom.http.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from atom.projections.wire import dumps
from atom.projections.wire_ollama import NDJSON
from atom.vocabulary.config import Settings

# Every route can answer these (atom/http/app.py applies the body limits, keys and
# request ids before any route; a model may be loading or the server draining).
ERROR_STATUSES = (400, 401, 403, 404, 408, 409, 413, 429, 500, 503)
SSE = "text/event-stream"


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    method: str
    path: str
    summary: str
    answer: Schema  # the 200 body (JSON)
    body: type[BaseModel] | None = None
    stream_event: Schema | None = None  # each server-sent event, when it may stream
    stream_type: str = SSE  # (or each line of NDJSON, Ollama's)
    query: tuple[str, ...] = ()  # optional string parameters
    enums: tuple[tuple[str, tuple[str, ...]], ...] = ()  # a query parameter's values
    error: str = "Error"  # the error answer, one of ERRORS
    content_types: tuple[str, ...] = ("application/json",)  # of the 200 answer
    is_webui: bool = False  # the web page's (absent with --no-webui)
    form: Schema | None = None  # a multipart/form-data body (an upload)


_POOLING_ANSWERS = {
    "/v1/embeddings": answers.EMBEDDINGS,
    "/pooling": answers.POOLING,
    "/classify": answers.CLASSIFY,
    "/v1/score": answers.SCORE,
    "/v1/rerank": answers.RERANK,
    "/api/embed": answers.OLLAMA_EMBED,
    "/api/embeddings": answers.OLLAMA_EMBEDDINGS,
}
_RESPONSE_ID = "/v1/responses/{response_id}"
_FILE_ID, _BATCH_ID = "/v1/files/{file_id}", "/v1/batches/{batch_id}"


def _post(path: str, summary: str, answer: Schema, **more: Any) -> Operation:
    return Operation(method="post", path=path, summary=summary, answer=answer, **more)


def _get(path: str, summary: str, answer: Schema, **more: Any) -> Operation:
    return Operation(method="get", path=path, summary=summary, answer=answer, **more)


OPERATIONS: tuple[Operation, ...] = (
    _post("/v1/chat/completions", "Chat completion", answers.CHAT_COMPLETION,
          body=ChatCompletionRequest, stream_event=answers.CHAT_CHUNK),
    _post("/v1/completions", "Text completion", answers.COMPLETION,
          body=CompletionRequest, stream_event=answers.COMPLETION_CHUNK),
    _post("/v1/responses", "OpenAI Responses API", answers.RESPONSE,
          body=ResponsesRequest, stream_event=answers.RESPONSE_EVENT),
    _post("/v1/messages", "Anthropic Messages API", answers.ANTHROPIC_MESSAGE,
          body=MessagesRequest, stream_event=answers.ANTHROPIC_EVENT, error="AnthropicError"),
    _post("/v1/messages/count_tokens", "Anthropic token count", answers.COUNTED,
          body=CountTokensRequest, error="AnthropicError"),
    _post("/api/chat", "Ollama's chat", answers.OLLAMA_CHAT, body=OllamaChatRequest,
          stream_event=answers.OLLAMA_CHAT, stream_type=NDJSON, error="OllamaError"),
    _post("/api/generate", "Ollama's generation", answers.OLLAMA_GENERATE,
          body=OllamaGenerateRequest, stream_event=answers.OLLAMA_GENERATE, stream_type=NDJSON,
          error="OllamaError"),
    _get("/api/tags", "Served models, as Ollama lists them", answers.OLLAMA_TAGS,
         error="OllamaError"),
    _post("/api/show", "One served model, as Ollama shows it", answers.OLLAMA_SHOW,
          error="OllamaError"),
    _get("/api/ps", "The loaded models, as Ollama lists them", answers.OLLAMA_PS,
         error="OllamaError"),
    _get("/api/version", "ATOM's version, where Ollama's clients ask", answers.VERSION,
         error="OllamaError"),
    _post("/v1/chat/completions/render", "The prompt a chat request would run",
          answers.RENDERED_CHAT, body=ChatCompletionRequest),
    _post("/v1/completions/render", "The prompts a completion request would run",
          answers.RENDERED_PROMPTS, body=CompletionRequest),
    _post("/tokenize", "Token ids of a prompt or of chat messages", answers.TOKENIZED,
          body=TokenizeRequest),
    _post("/detokenize", "Text of token ids", answers.DETOKENIZED, body=DetokenizeRequest),
    *(
        _post(path, f"{path.rsplit('/', 1)[-1].capitalize()} (pooling model)",
              _POOLING_ANSWERS[ALIASES.get(path, path)],
              body=POOLING_ROUTES[ALIASES.get(path, path)].schema,
              error="OllamaError" if path.startswith("/api/") else "Error")
        for path in (*POOLING_ROUTES, *ALIASES)
    ),
    *(
        _post(path, f"Speech to {'English ' if 'transl' in path else ''}text (speech model)",
              answers.TRANSCRIPTION, form=answers.TRANSCRIPTION_FORM,
              stream_event=answers.TRANSCRIPT_EVENT,
              content_types=("application/json", "text/plain", "text/vtt"))
        for path in AUDIO_PATHS
    ),
    _get("/health", "Liveness; with deep=1 every model produces a token", answers.HEALTH,
         query=("deep",)),
    _get("/health_generate", "Every model produces a token", answers.STATUS),
    _get("/v1/models", "Served models", answers.MODELS),
    _get("/version", "ATOM's version", answers.VERSION),
    _get("/server_info", "Settings and models as loaded", answers.SERVER_INFO),
    _get("/openapi.json", "This document", {"type": "object"}),
    _get(_RESPONSE_ID, "A stored response", answers.RESPONSE, stream_event=answers.RESPONSE_EVENT,
         query=("stream", "starting_after")),
    _get(f"{_RESPONSE_ID}/input_items", "A stored response's input items",
         answers.INPUT_ITEMS, enums=(("order", ("asc", "desc")),)),
    _post(f"{_RESPONSE_ID}/cancel", "Cancel a background response", answers.RESPONSE),
    Operation(method="delete", path=_RESPONSE_ID, summary="Delete a stored response",
              answer=answers.DELETED),
    _post("/v1/files", "Upload a batch's input (multipart: file, purpose=batch)", answers.FILE,
          form=answers.UPLOAD),
    _get("/v1/files", "This key's files", answers.FILES),
    _get(_FILE_ID, "A file", answers.FILE),
    _get(f"{_FILE_ID}/content", "A file's bytes (JSONL)", answers.STRING,
         content_types=("application/jsonl",)),
    Operation(method="delete", path=_FILE_ID, summary="Delete a file", answer=answers.FILE_DELETED),
    _post("/v1/batches", "Start a batch over an uploaded file", answers.BATCH,
          body=BatchCreateRequest),
    _get("/v1/batches", "This key's batches", answers.BATCHES),
    _get(_BATCH_ID, "A batch", answers.BATCH),
    _post(f"{_BATCH_ID}/cancel", "Cancel a batch", answers.BATCH),
    _post("/models/load", "Load a model (admin)", answers.MODEL_CHANGED, body=LoadModelRequest),
    _post("/models/unload", "Unload a model (admin)", answers.MODEL_CHANGED,
          body=UnloadModelRequest),
    _post("/v1/load_lora_adapter", "Serve a LoRA adapter (admin; needs --enable-lora)",
          answers.STRING, body=LoadLoraRequest, content_types=("text/plain",)),
    _post("/v1/unload_lora_adapter", "Stop serving a LoRA adapter (admin)", answers.STRING,
          body=UnloadLoraRequest, content_types=("text/plain",)),
    _post("/reset_prefix_cache", "Forget cached prefixes (admin)", answers.STATUS),
    _post("/update_weights_from_disk", "New weights from a local path (admin)",
          answers.WEIGHTS_UPDATED, body=UpdateWeightsRequest,
          error="WeightsError"),
    _post("/sleep", "Free the KV cache (level 1) and the weights (level 2) (admin)",
          answers.SLEEPING, enums=(("level", ("1", "2")),)),
    _post("/wake_up", "Wake from sleep (admin)", answers.SLEEPING),
    _get("/is_sleeping", "Whether the server sleeps", answers.SLEEPING),
    _post("/start_profile", "Start a profile (admin; needs --profile-dir)", answers.STATUS),
    _post("/stop_profile", "Stop the profile and write its trace (admin)", answers.STATUS),
    _get("/metrics", "Prometheus metrics (text)", answers.STRING, content_types=("text/plain",)),
    _get("/", "The web page (docs/webui.md)", answers.STRING, content_types=("text/html",),
         is_webui=True),
    _get("/webui/{name}", "A file of the web page", answers.STRING,
         content_types=("text/javascript", "text/css", "image/svg+xml"), is_webui=True),
    _get("/webui/api/engine", "The engine view's feed: each model's gauges and counters",
         answers.ENGINE_FEED, is_webui=True),
    _get("/webui/api/requests", "The request view's list (needs --request-log)",
         answers.RECENT_REQUESTS, is_webui=True),
    _get("/webui/api/requests/{request_id}", "A recent request's events and the bytes sent",
         answers.RECENT_REQUEST, is_webui=True),
)  # fmt: skip
# Answered without a key (and /metrics, unless protected): atom/http/access.py.
OPEN_PATHS = frozenset({"/health", "/", "/webui/{name}"})


def openapi_document(settings: Settings) -> dict[str, Any]:
    """The document for a server with these settings (keys decide the security part)."""
    models = sorted({op.body for op in OPERATIONS if op.body is not None}, key=_qualname)
    refs, defs = models_json_schema(
        [(model, "validation") for model in models], ref_template="#/components/schemas/{model}"
    )
    has_keys = bool(settings.api_key or settings.api_key_file or settings.admin_api_key)
    open_paths = OPEN_PATHS if settings.protect_metrics else OPEN_PATHS | {"/metrics"}
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        if op.is_webui and settings.no_webui:
            continue
        operation = _operation(op, refs)
        if has_keys and op.path in open_paths:
            operation["security"] = []
        paths.setdefault(op.path, {})[op.method] = operation
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "ATOM", "version": atom_version()},
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "responses": ERRORS,
            "securitySchemes": _SECURITY,
        },
    }
    if has_keys:
        document["security"] = [{"bearer": []}, {"x-api-key": []}]
    return document


def _qualname(model: type[BaseModel]) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def _operation(op: Operation, refs: dict[Any, Any]) -> dict[str, Any]:
    ok: dict[str, Any] = {kind: {"schema": op.answer} for kind in op.content_types}
    if op.stream_event is not None:
        ok[op.stream_type] = {"schema": op.stream_event}
    responses: dict[str, Any] = {"200": {"description": "OK", "content": ok}}
    for status in ERROR_STATUSES:
        responses[str(status)] = {"$ref": f"#/components/responses/{op.error}"}
    operation: dict[str, Any] = {"summary": op.summary, "responses": responses}
    parameters = [_query(name, answers.STRING) for name in op.query]
    parameters += [_query(name, {"type": "string", "enum": list(v)}) for name, v in op.enums]
    for name in re.findall(r"\{(\w+)\}", op.path):
        parameters.append({"name": name, "in": "path", "required": True, "schema": answers.STRING})
    if parameters:
        operation["parameters"] = parameters
    if op.body is not None or op.form is not None:
        content = (
            {"multipart/form-data": {"schema": op.form}}
            if op.form is not None
            else {"application/json": {"schema": refs[(op.body, "validation")]}}
        )
        operation["requestBody"] = {"required": True, "content": content}
    return operation


def _query(name: str, schema: Schema) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _error(schema: Schema) -> dict[str, Any]:
    return {"description": "Error", "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "Error": _error(answers.ERROR),
    "AnthropicError": _error(answers.ANTHROPIC_ERROR),  # every /v1/messages route's
    "OllamaError": _error(answers.OLLAMA_ERROR),  # every /api/ route's
    # SGLang's answer to a failed update, or a body refused before it ran
    "WeightsError": _error({"oneOf": [answers.ERROR, answers.WEIGHTS_UPDATED]}),
}
_SECURITY = {
    "bearer": {"type": "http", "scheme": "bearer"},
    "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"},
}


def register(app: QuartTrio, settings: Settings) -> None:
    document = dumps(openapi_document(settings))

    @app.get("/openapi.json")
    async def openapi() -> Response:
        return Response(document, content_type="application/json")
