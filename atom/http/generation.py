"""The generation endpoints (/v1/chat/completions, /v1/completions) as raw ASGI.

Validation, prompt rendering and length checks happen here; a valid request is
handed, with ASGI `receive` and `send`, to a RequestActor (see DESIGN: an SSE
generator inside Quart cannot host the actor's nursery safely).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import MutableMapping
from typing import Any

from atom.actors.engine import Engine, EngineCore
from atom.actors.request import ASGIReceive, ASGISend, GenerationRequest, RequestActor
from atom.errors import AtomError, EngineNotReady, InvalidRequest, ModelNotFound
from atom.events import Endpoint, RequestReceived, Submit
from atom.http.errors import error_bytes, parse
from atom.http.sampling import sampling_params
from atom.http.schemas import ChatCompletionRequest, CompletionRequest, _SamplingBody
from atom.text.prompt import encode_text, render_chat

ROUTES = {"/v1/chat/completions": Endpoint.CHAT, "/v1/completions": Endpoint.COMPLETIONS}
MAX_BODY_BYTES = 32 * 1024 * 1024


async def serve_generation(
    engine: Engine, scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend
) -> None:
    endpoint = ROUTES[scope["path"]]
    try:
        raw = await _read_body(receive)
        if raw is None:
            return  # the client left before sending its body
        request = build_request(engine, endpoint, raw)
    except AtomError as error:
        await send_error(send, error)
        return
    assert engine.core is not None
    await RequestActor(engine.core, request, receive=receive, send=send).run()


async def send_error(send: ASGISend, error: AtomError) -> None:
    status, body = error_bytes(error)
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _read_body(receive: ASGIReceive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY_BYTES:
            raise InvalidRequest(f"request body larger than {MAX_BODY_BYTES} bytes")
        if not message.get("more_body", False):
            return b"".join(chunks)


def build_request(engine: Engine, endpoint: Endpoint, raw: bytes) -> GenerationRequest:
    """Validate and render one request; raises AtomError with the right status."""
    try:
        payload = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    schema = ChatCompletionRequest if endpoint is Endpoint.CHAT else CompletionRequest
    body = parse(schema, payload)
    core = ready_core(engine)
    model = check_model(engine, body.model)
    if body.n > engine.settings.max_n:
        raise InvalidRequest(f"n must be at most {engine.settings.max_n}", param="n")
    prompt_ids = _prompt_ids(core, body)
    if body.truncate_prompt_tokens is not None:
        prompt_ids = prompt_ids[-body.truncate_prompt_tokens :]
    params = sampling_params(core.tokenizer, core.max_model_len, body, len(prompt_ids))
    request_id = f"{'chatcmpl' if endpoint is Endpoint.CHAT else 'cmpl'}-{uuid.uuid4().hex}"
    received = RequestReceived(
        request_id=request_id,
        endpoint=endpoint,
        model=model,
        created=int(core.clock()),
        body=payload,
    )
    submit = Submit(
        request_id=request_id,
        prompt_ids=prompt_ids,
        params=params,
        num_choices=body.n,
        cache_salt=body.cache_salt,
    )
    return GenerationRequest(received=received, submit=submit)


def ready_core(engine: Engine) -> EngineCore:
    if engine.core is None:
        raise EngineNotReady("the model is still loading; retry shortly")
    return engine.core


def check_model(engine: Engine, requested: str | None) -> str:
    name = engine.settings.model_name
    if requested is not None and requested != name:
        raise ModelNotFound(
            f"the model `{requested}` does not exist; this server serves `{name}`", param="model"
        )
    return name


def _prompt_ids(core: EngineCore, body: _SamplingBody) -> tuple[int, ...]:
    if isinstance(body, ChatCompletionRequest):
        messages = [m.as_template_message() for m in body.messages]
        try:
            return render_chat(core.tokenizer, messages)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="messages") from None
    prompt = body.prompt  # type: ignore[attr-defined]
    if isinstance(prompt, str):
        return encode_text(core.tokenizer, prompt)
    if prompt and all(isinstance(p, int) for p in prompt):
        return _checked_ids(core, prompt)
    if len(prompt) == 1:
        return encode_text(core.tokenizer, prompt[0])
    raise InvalidRequest("batched prompts are not supported yet; send one prompt", param="prompt")


def _checked_ids(core: EngineCore, ids: list[int]) -> tuple[int, ...]:
    vocab = len(core.tokenizer)
    if any(i < 0 or i >= vocab for i in ids):
        raise InvalidRequest(f"prompt token ids must be in [0, {vocab})", param="prompt")
    return tuple(ids)
