"""Chat-only request set-up: tools and template kwargs for the template, and the
tool-call and reasoning parsers the choice pipelines run (`--tool-call-parser`,
`--reasoning-parser`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from atom.config import Settings
from atom.errors import InvalidRequest
from atom.http.schemas import ChatCompletionRequest, NamedToolChoice
from atom.text import grammar as g
from atom.text.parsers import choice_formats, reasoning_format, tool_format
from atom.text.reasoning.base import ReasoningFormat
from atom.text.tools.base import ToolFormat
from atom.text.tools.forced import CallList, NamedCall


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatSetup:
    template_tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any]
    tool_format: ToolFormat | None
    reasoning_format: ReasoningFormat | None
    grammar: str | None = None  # enforces tool_choice "required" or a named function
    is_named_tool_choice: bool = False


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
    tools = [t.model_dump(exclude_none=True, by_alias=True) for t in body.tools or []]
    kwargs = {**default_template_kwargs(settings), **(body.chat_template_kwargs or {})}
    fmt, reasoning = choice_formats(
        settings.tool_call_parser,
        settings.reasoning_parser,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=body.parallel_tool_calls,
        template_kwargs=kwargs,
    )
    if choice is not None and choice not in ("none", "auto"):
        return _forced(body, tools, kwargs, reasoning)
    is_none = choice == "none"
    return ChatSetup(
        template_tools=None
        if (is_none and settings.exclude_tools_when_tool_choice_none) or not tools
        else tools,
        template_kwargs=kwargs,
        tool_format=fmt,
        reasoning_format=reasoning,
    )


def _forced(
    body: ChatCompletionRequest,
    tools: list[dict[str, Any]],
    kwargs: dict[str, Any],
    reasoning: ReasoningFormat | None,
) -> ChatSetup:
    """tool_choice "required" or a named function, enforced by a grammar over the output."""
    if not tools:
        raise InvalidRequest("tool_choice needs tools", param="tool_choice")
    if body.response_format is not None or body.structured_outputs is not None:
        raise InvalidRequest(
            "tool_choice required/named cannot be combined with another structured-output "
            "constraint",
            param="tool_choice",
        )
    choice = body.tool_choice
    fmt: ToolFormat
    try:
        if choice == "required":
            max_calls = None if body.parallel_tool_calls else 1
            constraint, fmt = g.tool_call_list(tools, max_calls=max_calls), CallList()
        else:
            assert isinstance(choice, NamedToolChoice)
            constraint = g.tool_arguments(_named_tool(tools, choice.function.name))
            fmt = NamedCall(choice.function.name)
    except g.GrammarError as exc:
        raise InvalidRequest(f"tools: {exc}", param="tools") from None
    return ChatSetup(
        template_tools=tools,
        template_kwargs=kwargs,
        tool_format=fmt,
        reasoning_format=reasoning,
        grammar=constraint,
        is_named_tool_choice=choice != "required",
    )


def _named_tool(tools: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The parameters schema of the function `tool_choice` names."""
    for tool in tools:
        if tool["function"]["name"] == name:
            parameters: dict[str, Any] | None = tool["function"].get("parameters")
            return parameters
    raise InvalidRequest(f"tool_choice names {name!r}, which is not in tools", param="tool_choice")
