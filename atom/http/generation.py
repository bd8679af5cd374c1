"""The generation endpoints (/v1/chat/completions, /v1/completions) as raw ASGI.

Validation, prompt rendering and length checks happen here; a valid request is
handed, with ASGI `receive` and `send`, to a RequestActor (see DESIGN: an SSE
generator inside Quart cannot host the actor's nursery safely).
"""

from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from typing import Any

import trio

from atom.actors.engine import Engine, EngineCore
from atom.actors.request import ASGIReceive, ASGISend, GenerationRequest, RequestActor
from atom.errors import AtomError, EngineFailed, EngineNotReady, InvalidRequest, ModelNotFound
from atom.events import Endpoint, RequestReceived, Submit
from atom.http.body import decode_json, read_body
from atom.http.chat_setup import ChatSetup, chat_setup
from atom.http.errors import error_bytes, error_headers, parse
from atom.http.prompts import check_prompt_size, render_prompts
from atom.http.sampling import sampling_params
from atom.http.schemas import ChatCompletionRequest, CompletionRequest, _SamplingBody
from atom.http.structured import constraint_of

ROUTES = {"/v1/chat/completions": Endpoint.CHAT, "/v1/completions": Endpoint.COMPLETIONS}


async def serve_generation(
    engine: Engine, scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend
) -> None:
    endpoint = ROUTES[scope["path"]]
    try:
        raw = await read_body(receive, timeout_s=engine.settings.body_timeout)
        if raw is None:
            return  # the client left before sending its body
        # Templates, tokenization and grammar validation run off the event loop.
        request = await trio.to_thread.run_sync(build_request, engine, endpoint, raw)
    except AtomError as error:
        await send_error(send, error)
        return
    assert engine.core is not None
    await RequestActor(engine.core, request, receive=receive, send=send).run()


async def send_error(send: ASGISend, error: AtomError) -> None:
    status, body = error_bytes(error)
    headers = {**error_headers(error), "content-length": str(len(body))}
    raw_headers = [(name.encode(), value.encode()) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def build_request(engine: Engine, endpoint: Endpoint, raw: bytes) -> GenerationRequest:
    """Validate and render one request; raises AtomError with the right status."""
    payload = decode_json(raw)
    schema = ChatCompletionRequest if endpoint is Endpoint.CHAT else CompletionRequest
    body = parse(schema, payload)
    core = ready_core(engine)
    model = check_model(engine, body.model)
    check_prompt_size(body, core.max_prompt_chars)
    num_choices = _num_choices(engine, body)
    chat = chat_setup(engine.settings, body) if isinstance(body, ChatCompletionRequest) else None
    prompts = render_prompts(core.tokenizer, body, chat)
    if len(prompts) * num_choices > engine.settings.max_num_seqs:
        raise InvalidRequest(
            f"{len(prompts)} prompts x {num_choices} choices exceeds --max-num-seqs "
            f"{engine.settings.max_num_seqs}",
            param="n",
        )
    longest = max(len(p.ids) for p in prompts)
    constraint = chat.grammar if chat and chat.grammar else constraint_of(body)
    after = _reasoning_end_ids(core.tokenizer, chat) if constraint else ()
    params = sampling_params(
        core.tokenizer, core.max_model_len, body, longest, grammar=constraint, grammar_after=after
    )
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
        prompt_ids=prompts[0].ids,
        more_prompt_ids=tuple(p.ids for p in prompts[1:]),
        params=params,
        num_choices=num_choices,
        cache_salt=body.cache_salt,
    )
    echo = getattr(body, "echo", False)
    return GenerationRequest(
        received=received,
        submit=submit,
        echo_texts=tuple(p.text for p in prompts) if echo else None,
        report_prompt_logprobs=body.prompt_logprobs is not None,
        tool_format=chat.tool_format if chat else None,
        reasoning_format=chat.reasoning_format if chat else None,
        is_named_tool_choice=bool(chat and chat.is_named_tool_choice),
    )


def _reasoning_end_ids(tokenizer: Any, chat: ChatSetup | None) -> tuple[int, ...]:
    """With a reasoning parser, the constraint starts once the reasoning section ends."""
    marker = chat.reasoning_format.end_marker if chat and chat.reasoning_format else ""
    return tuple(tokenizer.encode(marker, add_special_tokens=False)) if marker else ()


def _num_choices(engine: Engine, body: _SamplingBody) -> int:
    """n, or best_of when it asks for more candidates than choices returned."""
    if body.n > engine.settings.max_n:
        raise InvalidRequest(f"n must be at most {engine.settings.max_n}", param="n")
    best_of = getattr(body, "best_of", None) or body.n
    if best_of < body.n:
        raise InvalidRequest(f"best_of ({best_of}) must be at least n ({body.n})", param="best_of")
    if best_of > engine.settings.max_n:
        raise InvalidRequest(f"best_of must be at most {engine.settings.max_n}", param="best_of")
    if best_of > body.n and body.stream:
        raise InvalidRequest("best_of > n cannot be streamed", param="best_of")
    if body.prompt_logprobs is not None and body.stream:
        raise InvalidRequest("prompt_logprobs cannot be streamed yet", param="prompt_logprobs")
    return best_of


def ready_core(engine: Engine) -> EngineCore:
    if engine.has_stopped:
        raise EngineFailed("the engine has stopped; the server is shutting down")
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
