"""The parser registries: `--tool-call-parser NAME` and `--reasoning-parser NAME`.

Adding a parser is one file with a scan and one line here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from atom.text.harmony import HarmonyReasoning, HarmonyTools
from atom.text.reasoning.base import Granite, ReasoningFormat, ThinkTags
from atom.text.tools.base import Limited, ToolFormat, limited
from atom.text.tools.forced import CallList, NamedCall
from atom.text.tools.json_calls import Hermes, Llama3Json, Mistral, Prefixed
from atom.text.tools.pythonic import Pythonic
from atom.text.tools.sections import Qwen3Coder, deepseek_v3, kimi_k2
from atom.vocabulary.plan import TextPlan

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
    "granite": lambda tools: Prefixed(("<|tool_call|>", "<tool_call>")),
    "openai": lambda tools: HarmonyTools(),
    "gpt_oss": lambda tools: HarmonyTools(),
}
# Parsers that read special tokens (harmony's markers): the text keeps them.
SPECIAL_TOKEN_PARSERS = frozenset({"openai", "gpt_oss"})

REASONING_PARSERS: dict[str, Callable[[Mapping[str, Any], bool], ReasoningFormat]] = {
    "deepseek_r1": lambda kwargs, starts_open: ThinkTags(
        enabled=thinking_on(kwargs, "thinking", "enable_thinking"), starts_open=starts_open
    ),
    "qwen3": lambda kwargs, starts_open: ThinkTags(
        enabled=thinking_on(kwargs, "enable_thinking"), starts_open=starts_open
    ),
    "granite": lambda kwargs, starts_open: Granite(),
    "openai": lambda kwargs, starts_open: HarmonyReasoning(),
    "gpt_oss": lambda kwargs, starts_open: HarmonyReasoning(),
}


def thinking_on(kwargs: Mapping[str, Any], *switches: str) -> bool:
    """Thinking is on unless a template switch (`enable_thinking`, DeepSeek's `thinking`)
    turns it off."""
    return all(kwargs.get(switch, True) is not False for switch in switches)


def tool_format(name: str, schemas: ToolSchemas | None = None) -> ToolFormat:
    """The tool-call format `name`, given the request's functions (name → parameters)."""
    if name not in TOOL_PARSERS:
        raise ValueError(
            f"unknown tool-call parser {name!r}; known: {', '.join(sorted(TOOL_PARSERS))}"
        )
    return TOOL_PARSERS[name](schemas or {})


def reasoning_format(
    name: str, chat_template_kwargs: Mapping[str, Any] | None = None, *, starts_open: bool = False
) -> ReasoningFormat:
    """The reasoning format `name` under these template kwargs; `starts_open`: the
    rendered prompt ended inside an open reasoning block (`opens_reasoning`)."""
    if name not in REASONING_PARSERS:
        known = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; known: {known}")
    return REASONING_PARSERS[name](chat_template_kwargs or {}, starts_open)


def opens_reasoning(fmt: ReasoningFormat, prompt_tail: str) -> bool:
    """Whether a prompt ending in `prompt_tail` leaves a reasoning block open (its last
    start marker comes after its last end marker)."""
    start = fmt.start_marker
    return bool(start) and prompt_tail.rfind(start) > prompt_tail.rfind(fmt.end_marker or start)


def plan_formats(text: TextPlan) -> tuple[ToolFormat | None, ReasoningFormat | None]:
    """The parsers a choice runs: the forced call's own format under tool_choice
    "required" or a named function, else `--tool-call-parser` (at most `max_calls`),
    and `--reasoning-parser` with the request's template kwargs."""
    fmt: ToolFormat | None = None
    tools = text.tools
    if tools is not None and tools.required:
        fmt = CallList()
    elif tools is not None and tools.named is not None:
        fmt = NamedCall(tools.named)
    elif tools is not None and tools.parser:
        fmt = tool_format(tools.parser, tools.schemas)
        if tools.max_calls is not None:
            fmt = limited(fmt, tools.max_calls)
    reasoning = None
    if text.reasoning_parser:
        reasoning = reasoning_format(
            text.reasoning_parser, text.template_kwargs, starts_open=text.reasoning_starts_open
        )
    if isinstance(reasoning, HarmonyReasoning) and _reads_harmony(fmt):
        reasoning = HarmonyReasoning(feeds_tools=True)
    return fmt, reasoning


def _reads_harmony(fmt: ToolFormat | None) -> bool:
    inner = fmt.inner if isinstance(fmt, Limited) else fmt
    return isinstance(inner, HarmonyTools)
