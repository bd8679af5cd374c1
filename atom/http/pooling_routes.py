"""The pooling routes: /v1/embeddings, /pooling, /classify, /v1/score and rerank (with
vLLM's aliases), and Ollama's /api/embed and /api/embeddings. Each validates its body,
finds the model, plans it off the event loop and waits for the Pooler
(atom/actors/pooling_request.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.cores import PoolingCore
from atom.actors.engine import Engine
from atom.actors.pooling_request import run_pooling
from atom.http import ollama, pooling
from atom.http.access import tenant_in
from atom.http.body import request_json
from atom.http.errors import parse
from atom.http.fetch import plan_off_loop
from atom.http.ollama_schemas import OllamaEmbeddingsRequest, OllamaEmbedRequest
from atom.http.pooling_schemas import (
    ClassifyRequest,
    EmbeddingsRequest,
    PoolingRequest,
    RerankRequest,
    ScoreRequest,
    _PoolingBody,
)
from atom.http.request_id import admitted_request_id
from atom.model.catalog import ModelKind
from atom.vocabulary.events import PoolingRequested
from atom.vocabulary.plan import Endpoint

EMBEDDERS = frozenset({ModelKind.EMBED})
SCORERS = frozenset({ModelKind.EMBED, ModelKind.SCORE})
CLASSIFIERS = frozenset({ModelKind.CLASSIFY})
ANY_POOLING = frozenset({ModelKind.EMBED, ModelKind.SCORE, ModelKind.CLASSIFY})


@dataclass(frozen=True, slots=True)
class PoolingRoute:
    """An endpoint: its body schema, the model kinds serving it, and its adapter."""

    endpoint: Endpoint
    schema: type[_PoolingBody]
    kinds: frozenset[ModelKind]
    plan: Callable[[PoolingCore, Any], pooling.Planned]
    id_prefix: str


ROUTES = {
    "/v1/embeddings": PoolingRoute(
        Endpoint.EMBEDDINGS,
        EmbeddingsRequest,
        EMBEDDERS,
        lambda core, body: pooling.plan_embeddings(core, body, Endpoint.EMBEDDINGS),
        "embd-",
    ),
    "/pooling": PoolingRoute(
        Endpoint.POOLING,
        PoolingRequest,
        ANY_POOLING,
        lambda core, body: pooling.plan_embeddings(core, body, Endpoint.POOLING),
        "pool-",
    ),
    "/classify": PoolingRoute(
        Endpoint.CLASSIFY, ClassifyRequest, CLASSIFIERS, pooling.plan_classify, "classify-"
    ),
    "/v1/score": PoolingRoute(Endpoint.SCORE, ScoreRequest, SCORERS, pooling.plan_score, "score-"),
    "/v1/rerank": PoolingRoute(
        Endpoint.RERANK, RerankRequest, SCORERS, pooling.plan_rerank, "rerank-"
    ),
}
ROUTES |= {
    "/api/embed": PoolingRoute(
        Endpoint.OLLAMA_EMBED, OllamaEmbedRequest, EMBEDDERS, ollama.plan_embed, "ollama-"
    ),
    "/api/embeddings": PoolingRoute(
        Endpoint.OLLAMA_EMBEDDINGS,
        OllamaEmbeddingsRequest,
        EMBEDDERS,
        ollama.plan_embeddings,
        "ollama-",
    ),
}
ALIASES = {"/score": "/v1/score", "/rerank": "/v1/rerank", "/v2/rerank": "/v1/rerank"}


def register(app: QuartTrio, engine: Engine) -> None:
    for path in (*ROUTES, *ALIASES):
        route = ROUTES[ALIASES.get(path, path)]
        app.add_url_rule(path, f"pool:{path}", _handler(engine, route), methods=["POST"])


def _handler(engine: Engine, route: PoolingRoute) -> Callable[[], Any]:
    async def handle() -> Response:
        payload = await request_json()
        body = parse(route.schema, payload)
        core = engine.pooling(body.model, route.kinds, request.path)
        caller = (admitted_request_id(request.scope), tenant_in(request.scope).owner)
        received = await plan_off_loop(
            engine.settings, _received, core, route, body, payload, caller
        )
        engine.admit(received.request_id, core.name)  # no checkpoint until it is published
        output = await run_pooling(core, received)
        headers = {} if output.retry_after_s is None else {"retry-after": str(output.retry_after_s)}
        return Response(
            output.body, status=output.status, content_type=output.content_type, headers=headers
        )

    return handle


def _received(
    core: PoolingCore,
    route: PoolingRoute,
    body: _PoolingBody,
    payload: dict[str, Any],
    caller: tuple[str | None, str | None],
) -> PoolingRequested:
    """`caller`: the client's `x-request-id` (if sent) and the key's fingerprint."""
    inputs, plan = route.plan(core, body)
    client_id, owner = caller
    return PoolingRequested(
        request_id=route.id_prefix + (client_id or uuid.uuid4().hex),
        endpoint=route.endpoint,
        model=core.name,
        created=int(core.clock()),
        inputs=inputs,
        plan=plan,
        body=payload,
        owner=owner,
    )
