"""The parser registries: `--tool-call-parser NAME` and `--reasoning-parser NAME`.

Adding a parser is one file with a scan and one line here."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from atom.text.reasoning.base import Granite, ReasoningFormat, ThinkTags
from atom.text.tools.base import ToolFormat, limited
from atom.text.tools.json_calls import Hermes, Llama3Json, Mistral, Prefixed
from atom.text.tools.pythonic import Pythonic
from atom.text.tools.sections import Qwen3Coder, deepseek_v3, kimi_k2

ToolSchemas = Mapping[str, Mapping[str, Any]]  # function name → its `parameters` schema

TOOL_PARSERS: dict[str, Callable[[ToolSchemas], ToolFormat]] = {
    "hermes": lambda tools: Hermes(),
    "qwen": lambda tools: Hermes(),
    "qwen25": lambda tools: Hermes(),
    "qwen3_coder": lambda tools: Qwen3Coder(tools=tools),
    "llama3_json": lambda tools: Llama3Json(),
    "pythonic": lambda tools: Pythonic(),
    "llama4_pythonic": lambda tools: Pythonic(),
    "mistral": lambda tools: Mistral(),
    "deepseek_v3": lambda tools: deepseek_v3(),
    "kimi_k2": lambda tools: kimi_k2(),
    "granite": lambda tools: Prefixed("<|tool_call|>"),
}

REASONING_PARSERS: dict[str, Callable[[Mapping[str, Any]], ReasoningFormat]] = {
    "deepseek_r1": lambda kwargs: ThinkTags(open_optional=True),
    "qwen3": lambda kwargs: ThinkTags(
        open_optional=False, enabled=bool(kwargs.get("enable_thinking", True))
    ),
    "granite": lambda kwargs: Granite(),
}


def tool_format(name: str, tools: Sequence[Mapping[str, Any]] = ()) -> ToolFormat:
    """The tool-call format `name`, given the request's OpenAI `tools` list."""
    if name not in TOOL_PARSERS:
        raise ValueError(
            f"unknown tool-call parser {name!r}; known: {', '.join(sorted(TOOL_PARSERS))}"
        )
    schemas = {
        t["function"]["name"]: t["function"].get("parameters") or {}
        for t in tools
        if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
    }
    return TOOL_PARSERS[name](schemas)


def reasoning_format(
    name: str, chat_template_kwargs: Mapping[str, Any] | None = None
) -> ReasoningFormat:
    if name not in REASONING_PARSERS:
        known = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; known: {known}")
    return REASONING_PARSERS[name](chat_template_kwargs or {})


def choice_formats(
    tool_call_parser: str | None,
    reasoning_parser: str | None,
    *,
    tools: Sequence[Mapping[str, Any]],
    tool_choice: Any,
    parallel_tool_calls: bool,
    template_kwargs: Mapping[str, Any],
) -> tuple[ToolFormat | None, ReasoningFormat | None]:
    """The parsers a chat request's choices run: tool calls only with tools and a
    tool_choice other than "none" (at most one call without parallel_tool_calls)."""
    fmt = None
    if tool_call_parser and tools and tool_choice != "none":
        fmt = tool_format(tool_call_parser, tools)
        if not parallel_tool_calls:
            fmt = limited(fmt, 1)
    reasoning = reasoning_format(reasoning_parser, template_kwargs) if reasoning_parser else None
    return fmt, reasoning
