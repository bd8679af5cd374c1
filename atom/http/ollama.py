"""/api/chat and /api/generate (Ollama's API): the validated body → the request's plan.

An Ollama chat is a chat completion in other words, as Anthropic's Messages are
(atom/http/messages.py): messages (base64 images as data URLs, tool calls with their
arguments as objects, tool answers by function name), `tools`, `format` ("json" or a
JSON schema) as the response format, the sampling `options`, and `think` as the
template's thinking switch (or its reasoning effort) are translated into the chat body
they mean and planned by atom/http/chat.py; only the response shape differs
(atom/projections/wire_ollama.py renders it, NDJSON when streamed). A generate body
is the chat of its `system` and `prompt` (the model's template applies, as Ollama's
does), or with `raw` the completion of its prompt as it is.
"""

from __future__ import annotations

import json
from typing import Any

import structlog

from atom.actors.cores import EngineCore, PoolingCore
from atom.http import chat, completions, pooling
from atom.http.adapter import Planned
from atom.http.errors import parse
from atom.http.images import image_part, named_as, take_origins
from atom.http.ollama_schemas import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaMessage,
    OllamaOptions,
)
from atom.http.pooling_schemas import EmbeddingsRequest
from atom.http.schemas import ChatCompletionRequest, CompletionRequest
from atom.projections.wire import Output, dumps
from atom.projections.wire_ollama import timestamp
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.plan import Endpoint

ID_PREFIX = "ollama-"  # the request's id in the log (Ollama's answers carry none)
log = structlog.get_logger(__name__)


def load_answer(core: EngineCore, body: OllamaChatRequest | OllamaGenerateRequest) -> Output | None:
    """Ollama's answer to a load request (a chat without messages, a generation without
    prompt or images), given at once: the model is loaded, as it stays (`keep_alive`
    0, an unload for Ollama, is answered the same). None for any other body."""
    if isinstance(body, OllamaChatRequest):
        if body.messages:
            return None
        content: dict[str, Any] = {"message": {"role": "assistant", "content": ""}}
    elif body.prompt or body.images:
        return None
    else:
        content = {"response": ""}
    head = {"model": core.name, "created_at": timestamp(core.clock())}
    loaded = {**head, **content, "done": True, "done_reason": "load"}
    return Output(body=dumps(loaded), is_final=True)


def plan(settings: Settings, core: EngineCore, body: OllamaChatRequest) -> Planned:
    """Raises AtomError (a 4xx naming the field) for anything the body cannot mean."""
    return _chat_plan(settings, core, as_chat(body), Endpoint.OLLAMA_CHAT)


def _chat_plan(
    settings: Settings, core: EngineCore, translated: dict[str, Any], endpoint: Endpoint
) -> Planned:
    """The translated chat body planned by the chat adapter, answered as `endpoint`."""
    with named_as(take_origins(translated["messages"])):
        chat_body = parse(ChatCompletionRequest, translated)
        return chat.plan(settings, core, chat_body).reshaped(endpoint=endpoint)


def plan_generate(settings: Settings, core: EngineCore, body: OllamaGenerateRequest) -> Planned:
    """Raises AtomError (a 4xx naming the field) for anything the body cannot mean."""
    for name in ("suffix", "template", "context"):
        if getattr(body, name):
            raise InvalidRequest(f"{name} is not supported by this server", param=name)
    if body.raw:
        templated = {
            "images": bool(body.images),
            "system": bool(body.system),
            "think": body.think is not None,
        }
        for param, given in templated.items():
            if given:
                raise InvalidRequest(f"{param} needs the chat template: leave out raw", param=param)
        generation = {"prompt": body.prompt, **_common(body)}  # (think is None here)
        planned = completions.plan(settings, core, parse(CompletionRequest, generation))
        return planned.reshaped(endpoint=Endpoint.OLLAMA_GENERATE)
    system = [OllamaMessage(role="system", content=body.system)] if body.system else []
    user = OllamaMessage(role="user", content=body.prompt, images=body.images)
    translated = {"messages": _messages([*system, user]), **_common(body)}
    return _chat_plan(settings, core, translated, Endpoint.OLLAMA_GENERATE)


def plan_embed(core: PoolingCore, body: OllamaEmbedRequest) -> pooling.Planned:
    """/api/embed as the /v1/embeddings request it means (`truncate`: inputs past the
    model's length are cut to it)."""
    _ignored(body.options)
    embeddings: dict[str, Any] = {"input": body.input, "dimensions": body.dimensions}
    if body.truncate_prompt_tokens is not None or body.truncate:
        cut = body.truncate_prompt_tokens
        embeddings["truncate_prompt_tokens"] = -1 if cut is None else cut
    request = parse(EmbeddingsRequest, embeddings)
    return pooling.plan_embeddings(core, request, Endpoint.OLLAMA_EMBED)


def plan_embeddings(core: PoolingCore, body: OllamaEmbeddingsRequest) -> pooling.Planned:
    """The older /api/embeddings: one prompt."""
    _ignored(body.options)
    request = parse(EmbeddingsRequest, {"input": body.prompt})
    return pooling.plan_embeddings(core, request, Endpoint.OLLAMA_EMBEDDINGS)


def _ignored(options: OllamaOptions | None) -> None:
    """An embedding samples nothing: every option given is ignored, with a warning."""
    given = set() if options is None else options.model_fields_set | set(options.model_extra or {})
    if given:
        log.warning("ollama_options_ignored", options=sorted(given))


def as_chat(body: OllamaChatRequest) -> dict[str, Any]:
    """The chat body this Ollama body means."""
    out: dict[str, Any] = {"messages": _messages(body.messages), **_common(body)}
    if body.tools:
        out["tools"] = body.tools
    return out


def _common(body: OllamaChatRequest | OllamaGenerateRequest) -> dict[str, Any]:
    """The fields both routes share: model, stream, format, think, options."""
    out: dict[str, Any] = {"stream": body.stream}
    if body.model is not None:
        out["model"] = body.model
    if isinstance(body.format, dict):
        schema = {"name": "format", "schema": body.format}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif body.format == "json":
        out["response_format"] = {"type": "json_object"}
    if isinstance(body.think, bool):
        out["chat_template_kwargs"] = {"enable_thinking": body.think}
    elif body.think is not None:
        out["reasoning_effort"] = body.think
    return out | sampling(body.options or OllamaOptions())


def sampling(options: OllamaOptions) -> dict[str, Any]:
    """The chat body's sampling fields for Ollama's `options`; the options that are not
    sampling settings (num_ctx, num_gpu, num_thread…) are ignored, with a warning."""
    if options.model_extra:
        log.warning("ollama_options_ignored", options=sorted(options.model_extra))
    out: dict[str, Any] = {}
    named = {
        "temperature": options.temperature,
        "top_p": options.top_p,
        "top_k": options.top_k,
        "min_p": options.min_p,
        "seed": options.seed,
        "repetition_penalty": options.repeat_penalty,
        "presence_penalty": options.presence_penalty,
        "frequency_penalty": options.frequency_penalty,
    }
    out.update((name, value) for name, value in named.items() if value is not None)
    if options.stop:
        out["stop"] = [options.stop] if isinstance(options.stop, str) else options.stop
    limit = options.num_predict
    if limit is not None and limit >= 1:
        out["max_tokens"] = limit
    elif limit is not None and limit not in (-1, -2):
        raise InvalidRequest(
            "options.num_predict is -1 (no limit), -2 (fill the context) or at least 1",
            param="options.num_predict",
        )
    return out


def _messages(messages: list[OllamaMessage]) -> list[dict[str, Any]]:
    """Chat messages: an assistant's calls get ids (`call_<message>_<call>`), and a tool
    message answers the oldest call of its function that no answer took yet."""
    out: list[dict[str, Any]] = []
    open_calls: list[tuple[str, str]] = []  # (function name, call id), oldest first
    for m_idx, message in enumerate(messages):
        turn: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.images:
            param = f"messages.{m_idx}.images"
            parts = [image_part(f"data:image/png;base64,{b64}", param) for b64 in message.images]
            turn["content"] = [{"type": "text", "text": message.content}, *parts]
        if message.tool_calls:
            calls = []
            for c_idx, call in enumerate(message.tool_calls):
                call_id = f"call_{m_idx}_{c_idx}"
                arguments = json.dumps(call.function.arguments, ensure_ascii=False)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": arguments},
                    }
                )
                open_calls.append((call.function.name, call_id))
            turn["tool_calls"] = calls
        if message.role == "tool":
            turn["tool_call_id"] = _answered(open_calls, message.tool_name, m_idx)
        out.append(turn)
    return out


def _answered(open_calls: list[tuple[str, str]], name: str | None, m_idx: int) -> str:
    for idx, (called, call_id) in enumerate(open_calls):
        if name is None or called == name:
            del open_calls[idx]
            return call_id
    return f"call_{m_idx}"  # a tool answer without its call in the conversation
