from __future__ import annotations

import pytest

from atom.text.parsers import reasoning_format
from atom.text.reasoning.base import ReasoningScan, ReasoningStream, parse_reasoning

CASES = [
    ("deepseek_r1", "<think>Let me think.</think>\n\nParis.", "Let me think.", "\n\nParis."),
    ("deepseek_r1", "Template opened it.</think>Answer", "Template opened it.", "Answer"),
    ("deepseek_r1", "<think>never closed", "never closed", ""),
    ("deepseek_r1", "no tags at all", "no tags at all", ""),
    ("qwen3", "<think>\nhmm\n</think>\n\nHello", "\nhmm\n", "\n\nHello"),
    ("qwen3", "Hello without thinking", "", "Hello without thinking"),
    ("qwen3", "<thin", "", "<thin"),
    ("granite", "Here is my thought process: a b Here is my response: c", " a b ", " c"),
    ("granite", "Just an answer.", "", "Just an answer."),
]


def streamed(name: str, pieces: list[str], **kwargs: object) -> ReasoningScan:
    stream = ReasoningStream(reasoning_format(name, kwargs))
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


def test_qwen3_with_thinking_disabled_has_no_reasoning() -> None:
    fmt = reasoning_format("qwen3", {"enable_thinking": False})
    assert parse_reasoning(fmt, "<think>x</think>y") == ReasoningScan(
        reasoning="", content="<think>x</think>y"
    )
