from __future__ import annotations

from typing import Any

import pytest

from atom.http.adapter import reasoning_opened
from atom.text.parsers import opens_reasoning, plan_formats, reasoning_format
from atom.text.reasoning.base import ReasoningScan, ReasoningStream, parse_reasoning
from atom.text.tools.base import parse
from atom.vocabulary.plan import TextPlan, ToolPlan

CASES = [
    ("deepseek_r1", "<think>Let me think.</think>\n\nParis.", "Let me think.", "\n\nParis."),
    ("deepseek_r1", "<think>never closed", "never closed", ""),
    ("deepseek_r1", "no tags at all", "", "no tags at all"),  # the prompt opened nothing
    ("qwen3", "<think>\nhmm\n</think>\n\nHello", "\nhmm\n", "\n\nHello"),
    ("qwen3", "Hello without thinking", "", "Hello without thinking"),
    ("qwen3", "<thin", "", "<thin"),
    ("granite", "Here is my thought process: a b Here is my response: c", " a b ", " c"),
    ("granite", "Just an answer.", "", "Just an answer."),
    ("granite", "Here's my thought process: a Here's my response: b", " a ", " b"),
    ("openai", "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final"
     "<|message|>Hi", "think", "Hi"),  # the reasoning parser alone: bodies are the content
    ("gpt_oss", "<|channel|>final<|message|>no reasoning", "", "no reasoning"),
]  # fmt: skip


def streamed(
    name: str, pieces: list[str], kwargs: dict[str, object] | None = None, starts_open: bool = False
) -> ReasoningScan:
    stream = ReasoningStream(reasoning_format(name, kwargs, starts_open=starts_open))
    reasoning, content = "", ""
    for piece in [*pieces, None]:
        r, c = stream.feed(piece) if piece is not None else stream.flush()
        reasoning, content = reasoning + r, content + c
    return ReasoningScan(reasoning=reasoning, content=content)


@pytest.mark.parametrize(("name", "text", "reasoning", "content"), CASES)
def test_split_and_every_chunking(name: str, text: str, reasoning: str, content: str) -> None:
    whole = parse_reasoning(reasoning_format(name), text)
    assert whole == ReasoningScan(reasoning=reasoning, content=content)
    for cut in range(len(text) + 1):
        assert streamed(name, [text[:cut], text[cut:]]) == whole
    assert streamed(name, list(text)) == whole


def every_split_agrees(
    name: str, text: str, kwargs: dict[str, object] | None = None, starts_open: bool = False
) -> ReasoningScan:
    whole = parse_reasoning(reasoning_format(name, kwargs, starts_open=starts_open), text)
    for cut in range(len(text) + 1):
        assert streamed(name, [text[:cut], text[cut:]], kwargs, starts_open) == whole
    assert streamed(name, list(text), kwargs, starts_open) == whole
    return whole


@pytest.mark.parametrize("name", ["deepseek_r1", "qwen3"])
def test_a_prompt_that_opened_the_block_starts_the_output_in_the_reasoning(name: str) -> None:
    text = "The user wants a city.\n</think>\n\nParis."
    opened = every_split_agrees(name, text, starts_open=True)
    assert opened == ReasoningScan(reasoning="The user wants a city.\n", content="\n\nParis.")
    unopened = every_split_agrees(name, text)  # a prompt that opened nothing: the lone
    assert unopened == opened  # `</think>` still ends a reasoning section (vLLM, SGLang)
    bare = "The user wants a city. Paris."
    assert every_split_agrees(name, bare) == ReasoningScan(reasoning="", content=bare)
    assert every_split_agrees(name, bare, starts_open=True).reasoning == bare


@pytest.mark.parametrize("name", ["deepseek_r1", "qwen3"])
def test_unmarked_text_waits_until_a_close_tag_or_the_end_decides(name: str) -> None:
    stream = ReasoningStream(reasoning_format(name))
    assert stream.feed("Thinking it over") == ("", "")
    assert stream.feed(" still") == ("", "")
    assert stream.feed("</think>Paris") == ("Thinking it over still", "Paris")
    assert stream.feed(" it is.") == ("", " it is.")


def reasoning_then_tools(
    reasoning_parser: str, tool_parser: str | None, text: str
) -> tuple[str, str, list[str]]:
    """A whole output through the parsers a request plans: reasoning, content, call names."""
    tools = ToolPlan(parser=tool_parser, max_calls=1) if tool_parser else None
    tool_fmt, reasoning_fmt = plan_formats(TextPlan(tools=tools, reasoning_parser=reasoning_parser))
    assert reasoning_fmt is not None
    split = parse_reasoning(reasoning_fmt, text)
    if tool_fmt is None:
        return split.reasoning, split.content, []
    parsed = parse(tool_fmt, split.content)
    return split.reasoning, parsed.content, [c.name for c in parsed.calls]


def test_a_lone_close_tag_ends_the_reasoning_before_the_tool_parser_reads_the_rest() -> None:
    text = 'Weather needed.</think><tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert reasoning_then_tools("qwen3", "hermes", text) == ("Weather needed.", "", ["f"])


HARMONY = (
    "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>commentary"
    "<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.f"
    '<|message|>{"a": 1}'
)


def test_harmony_reasoning_gives_bodies_alone_and_whole_messages_to_its_tool_parser() -> None:
    assert reasoning_then_tools("openai", None, HARMONY) == ("Need it.", 'Checking.{"a": 1}', [])
    assert reasoning_then_tools("openai", "openai", HARMONY) == ("Need it.", "Checking.", ["f"])


@pytest.mark.parametrize(
    ("tail", "is_open"),
    [
        ("<|im_start|>assistant\n<think>\n", True),  # Qwen3-Thinking-2507, DeepSeek-R1
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),  # thinking switched off
        ("<|im_start|>assistant\n", False),
        ("<think>old</think> then <think>", True),
    ],
)
def test_whether_the_prompt_left_the_block_open(tail: str, is_open: bool) -> None:
    assert opens_reasoning(reasoning_format("qwen3"), tail) is is_open
    assert opens_reasoning(reasoning_format("granite"), tail) is False


def test_the_decision_reads_the_rendered_prompts_tokens(tokenizer: Any) -> None:
    ids = tuple(tokenizer.encode("<|im_start|>assistant\n<think>\n"))
    assert reasoning_opened(tokenizer, "deepseek_r1", {}, ids) is True
    assert reasoning_opened(tokenizer, "deepseek_r1", {"thinking": False}, ids) is False
    assert reasoning_opened(tokenizer, None, {}, ids) is False


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("qwen3", {"enable_thinking": False}),
        ("deepseek_r1", {"thinking": False}),
        ("deepseek_r1", {"enable_thinking": False}),
    ],
)
def test_thinking_switched_off_means_no_reasoning_and_no_empty_block(
    name: str, kwargs: dict[str, object]
) -> None:
    assert every_split_agrees(name, "<think>\n\n</think>\n\nHello", kwargs) == ReasoningScan(
        reasoning="", content="Hello"
    )
    assert every_split_agrees(name, "<think>x</think>y", kwargs) == ReasoningScan(
        reasoning="", content="<think>x</think>y"
    )
    assert every_split_agrees(name, "<thin", kwargs).content == "<thin"
