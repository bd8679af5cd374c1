"""Chat-only request set-up: tools and template kwargs for the template, and the
tool-call and reasoning parsers the choice pipelines run (`--tool-call-parser`,
`--reasoning-parser`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from atom.config import Settings
from atom.errors import InvalidRequest
from atom.http.schemas import ChatCompletionRequest
from atom.text.parsers import reasoning_format, tool_format
from atom.text.reasoning.base import ReasoningFormat
from atom.text.tools.base import ToolFormat, limited


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatSetup:
    template_tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any]
    tool_format: ToolFormat | None
    reasoning_format: ReasoningFormat | None


def check_parser_names(settings: Settings) -> None:
    """Fail at start-up, not on the first request, for an unknown parser name."""
    if settings.tool_call_parser:
        tool_format(settings.tool_call_parser)
    if settings.reasoning_parser:
        reasoning_format(settings.reasoning_parser)
    default_template_kwargs(settings)


def default_template_kwargs(settings: Settings) -> dict[str, Any]:
    raw = settings.default_chat_template_kwargs
    kwargs = json.loads(raw) if raw else {}
    if not isinstance(kwargs, dict):
        raise ValueError("--default-chat-template-kwargs must be a JSON object")
    return kwargs


def chat_setup(settings: Settings, body: ChatCompletionRequest) -> ChatSetup:
    choice = body.tool_choice
    if choice == "required" or (choice is not None and not isinstance(choice, str)):
        raise InvalidRequest(
            "tool_choice 'required' and named functions need structured output, "
            "which this server does not support yet; use 'auto' or 'none'",
            param="tool_choice",
        )
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    kwargs = {**default_template_kwargs(settings), **(body.chat_template_kwargs or {})}
    is_none = choice == "none"
    fmt = None
    if settings.tool_call_parser and tools and not is_none:
        fmt = tool_format(settings.tool_call_parser, tools)
        if not body.parallel_tool_calls:
            fmt = limited(fmt, 1)
    reasoning = (
        reasoning_format(settings.reasoning_parser, kwargs) if settings.reasoning_parser else None
    )
    return ChatSetup(
        template_tools=None
        if (is_none and settings.exclude_tools_when_tool_choice_none) or not tools
        else tools,
        template_kwargs=kwargs,
        tool_format=fmt,
        reasoning_format=reasoning,
    )
