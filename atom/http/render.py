"""vLLM's render routes: `POST /v1/chat/completions/render` and `/v1/completions/render`
answer with what a request would run — its prompt's token ids and text, and the
sampling settings it was planned with — and generate nothing.

The body goes through the very adapter the generation route uses (`build_request`),
so a render is exactly what generating would run, and a bad body is the same 4xx."""

from __future__ import annotations

import dataclasses
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.actors.request import GenerationRequest
from atom.http.access import tenant_in
from atom.http.fetch import plan_off_loop
from atom.http.generation import build_request
from atom.http.request_id import SCOPE_KEY
from atom.projections.wire import dumps
from atom.vocabulary.plan import Endpoint

RENDER_ROUTES = {
    "/v1/chat/completions/render": Endpoint.CHAT,
    "/v1/completions/render": Endpoint.COMPLETIONS,
}


def register(app: QuartTrio, engine: Engine) -> None:
    async def render() -> Response:
        endpoint = RENDER_ROUTES[request.path]
        raw = await request.get_data(as_text=False)
        client_id = request.scope.get(SCOPE_KEY)
        assert isinstance(raw, bytes) and (client_id is None or isinstance(client_id, str))
        tenant = tenant_in(request.scope)  # a previous_response_id is read as this key's
        core, built = await plan_off_loop(
            engine.settings, build_request, engine, endpoint, raw, client_id, tenant
        )
        assert isinstance(built, GenerationRequest)  # chat and completions always plan
        params = dataclasses.asdict(built.submit.params)
        rendered = [
            {
                "request_id": built.received.request_id,
                "prompt": core.tokenizer.decode(list(ids)),
                "token_ids": list(ids),
                "sampling_params": params,
            }
            for ids in built.submit.prompts
        ]
        body: Any = rendered[0] if endpoint is Endpoint.CHAT else rendered
        return Response(dumps(body), content_type="application/json")

    for path in RENDER_ROUTES:
        app.add_url_rule(path, f"render_{path}", render, methods=["POST"])
