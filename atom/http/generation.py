"""The generation endpoints (/v1/chat/completions, /v1/completions) as raw ASGI.

The body is read and validated here and planned by its endpoint's adapter; a valid
request is handed, with ASGI `receive` and `send`, to a RequestActor (see DESIGN: an
SSE generator inside Quart cannot host the actor's nursery safely).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import trio

from atom.actors.cores import EngineCore
from atom.actors.engine import Engine
from atom.actors.request import ASGIReceive, GenerationRequest, RequestActor
from atom.actors.tap import OutputTap
from atom.http import chat, completions, messages, ollama, responses
from atom.http.access import tenant_in
from atom.http.adapter import Planned
from atom.http.anthropic_schemas import MessagesRequest
from atom.http.asgi import AsgiResponder, ASGISend, open_writer
from atom.http.body import decode_json
from atom.http.errors import error_bytes, error_headers, parse
from atom.http.fetch import plan_off_loop
from atom.http.ollama_schemas import OllamaChatRequest, OllamaGenerateRequest
from atom.http.request_id import admitted_request_id
from atom.http.responses_schemas import ResponsesRequest
from atom.http.schemas import ChatCompletionRequest, CompletionRequest, RoutedBody
from atom.projections.wire import Output, dumps
from atom.projections.wire_responses import ResponsesBodyRenderer
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import AtomError
from atom.vocabulary.events import RequestReceived, Submit
from atom.vocabulary.images import without_image_bytes
from atom.vocabulary.plan import GENERATION_PATHS, Endpoint
from atom.vocabulary.tenant import EVERYONE, Tenant

B = TypeVar("B", bound=RoutedBody)

ROUTES = {path: endpoint for endpoint, path in GENERATION_PATHS.items()}


async def serve_generation(
    engine: Engine,
    scope: MutableMapping[str, Any],
    raw: bytes,
    receive: ASGIReceive,
    send: ASGISend,
) -> None:
    """`raw` is the body, already read (atom/http/app.py); `receive` gives what follows."""
    endpoint = ROUTES[scope["path"]]
    try:
        # Templates, tokenization and grammar validation run off the event loop.
        client_id, tenant = admitted_request_id(scope), tenant_in(scope)
        built = await plan_off_loop(
            engine.settings,
            build_request,
            engine,
            endpoint,
            raw,
            client_id,
            tenant,
            body_bytes=len(raw),
        )
        core, request = built
        if isinstance(request, Output):
            await AsgiResponder(send).respond(request)
            return
        engine.admit(request.received.request_id, core.name)  # no checkpoint until published
    except AtomError as error:
        await send_error(send, error, scope["path"])
        return
    if request.plan.shape.background:
        await _start_background(engine, core, request, (receive, send), scope["path"])
        return
    async with open_writer(send) as writer:
        actor = RequestActor(
            core, request, receive=receive, respond=writer.respond, written=writer.written
        )
        await actor.run()


async def _start_background(
    engine: Engine,
    core: EngineCore,
    request: GenerationRequest,
    channel: tuple[ASGIReceive, ASGISend],
    path: str,
) -> None:
    """A background response runs detached from this connection (its result goes to the
    store, atom/projections/responses_store.py). Not streamed, the client gets the `queued`
    Response object now; streamed, it follows the events until it leaves, and the
    response carries on without it (atom/http/stored.py resumes the stream)."""

    async def no_disconnect() -> MutableMapping[str, Any]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def nowhere(output: Output) -> None:
        pass

    receive, send = channel
    tap = OutputTap() if request.plan.shape.stream else None
    respond = nowhere if tap is None else tap.respond
    actor = RequestActor(core, request, receive=no_disconnect, respond=respond)
    try:
        engine.start_detached(actor.request_id, actor.run, actor.cancel, tap)
    except AtomError as error:
        await send_error(send, error, path)
        return
    if tap is not None:
        await follow_tap(tap, 0, receive, send)
        return
    queued = ResponsesBodyRenderer(request.received, request.plan.shape).snapshot("queued")
    await AsgiResponder(send).respond(Output(body=dumps(queued), is_final=True))


async def follow_tap(tap: OutputTap, start: int, receive: ASGIReceive, send: ASGISend) -> None:
    """Send a detached request's events from `start` on until the last one or until the
    client leaves (which ends only this reading)."""
    responder = AsgiResponder(send)
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        async for event, is_last in tap.follow(start):
            assert tap.first is not None  # the status and content type
            await responder.respond(replace(tap.first, body=event, is_final=is_last))
        nursery.cancel_scope.cancel()


async def send_error(send: ASGISend, error: AtomError, path: str) -> None:
    status, body = error_bytes(error, path)
    headers = {**error_headers(error), "content-length": str(len(body))}
    raw_headers = [(name.encode(), value.encode()) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


@dataclass(frozen=True, slots=True)
class Adapter(Generic[B]):
    """An endpoint: its body schema, its response ids' prefix and its plan builder; and
    what it answers at once, generating nothing (Ollama's load requests), if anything."""

    schema: type[B]
    id_prefix: str
    plan: Callable[[Settings, EngineCore, B], Planned]
    at_once: Callable[[EngineCore, B], Output | None] = lambda core, body: None

    def request(
        self,
        engine: Engine,
        endpoint: Endpoint,
        payload: dict[str, Any],
        caller: tuple[str | None, Tenant],
    ) -> tuple[EngineCore, GenerationRequest | Output]:
        """`caller`: the client's `x-request-id` (if sent) and the key's Tenant."""
        body = parse(self.schema, payload)
        client_id, tenant = caller
        core = engine.generation(body.model, GENERATION_PATHS[endpoint])
        if tenant is not EVERYONE:
            core = replace(core, tenant=tenant)
        answer = self.at_once(core, body)
        if answer is not None:
            return core, answer
        planned = self.plan(engine.settings, core, body)
        request_id = self.id_prefix + (client_id or uuid.uuid4().hex)
        received = RequestReceived(
            request_id=request_id,
            endpoint=endpoint,
            model=core.name,
            created=int(core.clock()),
            body=without_image_bytes(payload) if planned.images else payload,
            plan=planned.plan,
            owner=tenant.owner,
        )
        submit = Submit(
            request_id=request_id,
            prompt_ids=planned.prompts[0],
            more_prompt_ids=planned.prompts[1:],
            params=planned.plan.params,
            choices_per_prompt=planned.plan.shape.best_of,
            cache_salt=planned.cache_salt,
            priority=planned.priority,
            lora=core.lora,
            images=planned.images,
        )
        return core, GenerationRequest(received=received, plan=planned.plan, submit=submit)


ADAPTERS: dict[Endpoint, Adapter[Any]] = {
    Endpoint.CHAT: Adapter(ChatCompletionRequest, chat.ID_PREFIX, chat.plan),
    Endpoint.COMPLETIONS: Adapter(CompletionRequest, completions.ID_PREFIX, completions.plan),
    Endpoint.MESSAGES: Adapter(MessagesRequest, messages.ID_PREFIX, messages.plan),
    Endpoint.RESPONSES: Adapter(ResponsesRequest, responses.ID_PREFIX, responses.plan),
    Endpoint.OLLAMA_CHAT: Adapter(
        OllamaChatRequest, ollama.ID_PREFIX, ollama.plan, ollama.load_answer
    ),
    Endpoint.OLLAMA_GENERATE: Adapter(
        OllamaGenerateRequest, ollama.ID_PREFIX, ollama.plan_generate, ollama.load_answer
    ),
}


def build_request(
    engine: Engine,
    endpoint: Endpoint,
    raw: bytes,
    client_id: str | None = None,
    tenant: Tenant = EVERYONE,
) -> tuple[EngineCore, GenerationRequest | Output]:
    """Validate and plan one request for the model it names (its id from the client's
    `x-request-id` when it sent one), made by `tenant`; raises AtomError with the right
    status. An Output instead of a request is the whole answer, given at once."""
    payload = decode_json(raw)
    return ADAPTERS[endpoint].request(engine, endpoint, payload, (client_id, tenant))
