from __future__ import annotations

from typing import Any

import pytest

from atom.http.adapter import reasoning_opened
from atom.text.parsers import opens_reasoning, reasoning_format
from atom.text.reasoning.base import ReasoningScan, ReasoningStream, parse_reasoning

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
     "<|message|>Hi", "think", "<|start|>assistant<|channel|>final<|message|>Hi"),
    ("gpt_oss", "<|channel|>final<|message|>no reasoning", "",
     "<|channel|>final<|message|>no reasoning"),
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
    closed = every_split_agrees(name, text)  # the same words after a prompt that opened nothing
    assert closed == ReasoningScan(reasoning="", content=text)


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
