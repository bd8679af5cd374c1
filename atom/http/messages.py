"""/v1/messages (Anthropic's Messages API): the validated body → the request's plan.

An Anthropic conversation is a chat conversation in other words: the body is
translated into the chat body it means (system prompt, tool results as tool
messages, tool_use blocks as tool calls, `tool_choice` any/tool as required/named,
`thinking` as the template's `enable_thinking`) and planned by atom/http/chat.py;
only the response shape differs (atom/projections/wire_anthropic.py renders it).
"""

from __future__ import annotations

import json
from typing import Any

from atom.actors.cores import EngineCore
from atom.http import chat
from atom.http.adapter import Planned
from atom.http.anthropic_schemas import (
    CountTokensRequest,
    ImageBlock,
    Message,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from atom.http.errors import parse
from atom.http.images import image_part, named_as, take_origins
from atom.http.schemas import ChatCompletionRequest
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.plan import Endpoint

ID_PREFIX = "msg_"


def plan(settings: Settings, core: EngineCore, body: MessagesRequest) -> Planned:
    """Raises AtomError (a 4xx naming the field) for anything the body cannot mean."""
    sampling: dict[str, Any] = {"max_tokens": body.max_tokens, "stream": body.stream}
    if body.stop_sequences:
        sampling["stop"] = body.stop_sequences
    knobs = (("temperature", body.temperature), ("top_p", body.top_p), ("top_k", body.top_k))
    sampling.update((name, value) for name, value in knobs if value is not None)
    translated = as_chat(body)
    with named_as(take_origins(translated["messages"])):
        chat_body = parse(ChatCompletionRequest, {**translated, **sampling})
        return chat.plan(settings, core, chat_body).reshaped(endpoint=Endpoint.MESSAGES)


def prompt_ids(settings: Settings, core: EngineCore, body: CountTokensRequest) -> tuple[int, ...]:
    """The prompt `/v1/messages` would render for this conversation, tools included."""
    translated = as_chat(body)
    with named_as(take_origins(translated["messages"])):
        return chat.prompt_ids(settings, core, parse(ChatCompletionRequest, translated))


def as_chat(body: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    """The chat body (messages, tools, tool_choice, template kwargs) this body means."""
    messages: list[dict[str, Any]] = []
    if body.system:
        system = body.system
        text = system if isinstance(system, str) else "".join(b.text for b in system)
        messages.append({"role": "system", "content": text})
    for m_idx, message in enumerate(body.messages):
        messages += _chat_messages(m_idx, message)
    out: dict[str, Any] = {"messages": messages}
    if body.tools:
        out["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "parameters": t.input_schema,
                    **({"description": t.description} if t.description else {}),
                },
            }
            for t in body.tools
        ]
    if body.tool_choice is not None:
        out.update(_tool_choice(body.tool_choice.type, body.tool_choice.name))
        if body.tool_choice.disable_parallel_tool_use:
            out["parallel_tool_calls"] = False
    if body.thinking is not None:
        out["chat_template_kwargs"] = {"enable_thinking": body.thinking.type == "enabled"}
    return out


def _tool_choice(kind: str, name: str | None) -> dict[str, Any]:
    if kind == "tool":
        if not name:
            raise InvalidRequest("tool_choice of type tool needs a name", param="tool_choice")
        return {"tool_choice": {"type": "function", "function": {"name": name}}}
    return {"tool_choice": {"auto": "auto", "any": "required", "none": "none"}[kind]}


def _chat_messages(m_idx: int, message: Message) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages: a user turn's tool results become tool
    messages (before its text); an assistant turn's tool_use blocks become tool calls."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    parts: list[dict[str, Any]] = []  # text and image parts, in order
    results: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for b_idx, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolResultBlock):
            content = block.content
            text = content if isinstance(content, str) else "".join(b.text for b in content)
            results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, ensure_ascii=False)
            function = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif isinstance(block, ImageBlock):
            param = f"messages.{m_idx}.content.{b_idx}"
            parts.append(image_part(_image_url(block, param), param))
        else:
            assert isinstance(block, ThinkingBlock)  # earlier reasoning: not re-sent
    has_image = any(part["type"] == "image_url" for part in parts)
    text = "".join(part["text"] for part in parts if part["type"] == "text")
    turn: dict[str, Any] = {"role": message.role, "content": parts if has_image else text}
    if calls:
        turn["tool_calls"] = calls
    return results + ([turn] if parts or calls or not results else [])


def _image_url(block: ImageBlock, param: str) -> str:
    """An image block's source as a URL: base64 data as a data URL, or its url."""
    source = block.source
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise InvalidRequest(
        f"{param}.source: an image source is of type base64 or url", param=f"{param}.source"
    )
