"""/v1/responses (OpenAI's Responses API): the validated body → the request's plan.

Like /v1/messages, the body is translated into the chat body it means
(`instructions` as the system message, input items as messages, function calls and
their outputs as tool calls and tool messages, `text.format` as `response_format`,
`reasoning.effort` as the template's `reasoning_effort`) and planned by
atom/http/chat.py; the response shape is the Responses API's (atom/projections/wire_responses.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from atom.actors.cores import EngineCore
from atom.http import chat
from atom.http.adapter import Planned
from atom.http.errors import parse
from atom.http.images import audio_part, image_part, named_as, take_origins
from atom.http.responses_schemas import (
    AudioPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    ImagePart,
    Item,
    MessageItem,
    NamedFunction,
    ResponsesRequest,
    TextPart,
)
from atom.http.schemas import ChatCompletionRequest
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest, ResponseNotFound
from atom.vocabulary.plan import Endpoint

ID_PREFIX = "resp_"
_ITEMS = TypeAdapter(list[Item])


def plan(settings: Settings, core: EngineCore, body: ResponsesRequest) -> Planned:
    """Raises AtomError (a 4xx naming the field) for anything the body cannot mean."""
    if body.background and not body.store:
        raise InvalidRequest("a background response needs store", param="store")
    items = _input_items(body)
    earlier = _earlier(core, body.previous_response_id)
    translated = as_chat(body, [*earlier, *items])
    with named_as(take_origins(translated["messages"])):
        planned = chat.plan(settings, core, parse(ChatCompletionRequest, translated))
    return planned.reshaped(
        endpoint=Endpoint.RESPONSES,
        background=body.background,
        store=body.store,
        request_fields=_repeated(body),
        input_items=tuple(item.model_dump(exclude_none=True) for item in items),
    )


def _input_items(body: ResponsesRequest) -> list[Item]:
    """The input as items: a string is one user message."""
    if isinstance(body.input, str):
        text = TextPart(type="input_text", text=body.input)
        return [MessageItem(type="message", role="user", content=[text])]
    return list(body.input)


def _earlier(core: EngineCore, previous_id: str | None) -> list[Item]:
    """The conversation `previous_response_id` continues, as input items."""
    if previous_id is None:
        return []
    try:
        if core.responses is None:
            raise LookupError(previous_id)
        found = core.responses.conversation(previous_id, core.tenant)
    except LookupError:
        raise ResponseNotFound(
            f"Response with id {previous_id!r} not found.", param="previous_response_id"
        ) from None
    except ValueError as error:
        raise InvalidRequest(str(error), param="previous_response_id") from None
    return _ITEMS.validate_python(found)


def as_chat(body: ResponsesRequest, items: list[Item]) -> dict[str, Any]:
    """The chat body this request means, with `items` as its conversation."""
    messages = _messages(body.instructions, items)
    out: dict[str, Any] = {"messages": messages, "stream": body.stream}
    knobs = (
        ("max_tokens", body.max_output_tokens),
        ("temperature", body.temperature),
        ("top_p", body.top_p),
        ("top_k", body.top_k),
        ("min_p", body.min_p),
        ("repetition_penalty", body.repetition_penalty),
        ("priority", body.priority),
    )
    out.update((name, value) for name, value in knobs if value is not None)
    if body.tools:
        out["tools"] = [_function_tool(i, tool) for i, tool in enumerate(body.tools)]
    if isinstance(body.tool_choice, NamedFunction):
        out["tool_choice"] = {"type": "function", "function": {"name": body.tool_choice.name}}
    elif body.tool_choice is not None:
        out["tool_choice"] = body.tool_choice
    out["parallel_tool_calls"] = body.parallel_tool_calls
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif fmt is not None and fmt.type == "json_schema":
        spec = fmt.model_dump(exclude={"type"}, exclude_none=True, by_alias=True)
        out["response_format"] = {"type": "json_schema", "json_schema": spec}
    if body.reasoning is not None and body.reasoning.effort is not None:
        out["chat_template_kwargs"] = {"reasoning_effort": body.reasoning.effort}
    return out


def _messages(instructions: str | None, items: list[Item]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for i, item in enumerate(items):
        _add_item(messages, i, item)
    return messages


def _add_item(messages: list[dict[str, Any]], i: int, item: Item) -> None:
    """An input item as chat messages; consecutive function calls share one assistant
    message, as a chat history has them."""
    if isinstance(item, MessageItem):
        messages.append({"role": item.role, "content": _content(i, item)})
    elif isinstance(item, FunctionCallItem):
        function = {"name": item.name, "arguments": item.arguments}
        call: dict[str, Any] = {"id": item.call_id, "type": "function", "function": function}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        else:
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif isinstance(item, FunctionCallOutputItem):
        messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
    # reasoning items: earlier reasoning is not re-sent to the template


def _content(i: int, item: MessageItem) -> str | list[dict[str, Any]]:
    """A message item's content: its text, or text and media parts when it has images or
    audio clips."""
    if isinstance(item.content, str):
        return item.content
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(item.content):
        param = f"input.{i}.content.{j}"
        if isinstance(part, ImagePart):
            if part.image_url is None:
                raise InvalidRequest(
                    f"{param}: only image_url images are served (no file_id)", param=param
                )
            parts.append(image_part(part.image_url, param))
        elif isinstance(part, AudioPart):
            parts.append(audio_part(part.input_audio.model_dump(), param))
        else:
            parts.append({"type": "text", "text": part.text})
    if any(part["type"] != "text" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)


def _function_tool(i: int, tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses function tool as a chat tool; built-in tools are refused by name."""
    kind = tool.get("type")
    if kind != "function":
        raise InvalidRequest(
            f"tools.{i}.type: {kind!r} tools are not supported; only function tools",
            param=f"tools.{i}.type",
        )
    function = {k: v for k, v in tool.items() if k != "type"}
    return {"type": "function", "function": function}


def _repeated(body: ResponsesRequest) -> dict[str, Any]:
    """The request fields a Response object repeats, as the client sent them."""
    fmt = body.text.format if body.text is not None else None
    tool_choice = body.tool_choice
    return {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "background": body.background,
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None,
                      "summary": body.reasoning.summary if body.reasoning else None},
        "store": body.store,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": {"format": fmt.model_dump(exclude_none=True, by_alias=True)
                 if fmt is not None else {"type": "text"}},
        "tool_choice": tool_choice.model_dump() if isinstance(tool_choice, NamedFunction)
        else (tool_choice or "auto"),
        "tools": body.tools or [],
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "truncation": "disabled",
        "user": body.user,
    }  # fmt: skip
