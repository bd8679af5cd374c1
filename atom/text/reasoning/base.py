"""Reasoning formats scan all text so far into (reasoning, content); `ReasoningStream`
emits only what is new. As for tool calls, every scan is monotone, so the streamed
pieces concatenate to exactly the non-streaming split for any chunking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from atom.text.scanning import held_back


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningScan:
    reasoning: str
    content: str


class ReasoningFormat(Protocol):
    def scan(self, text: str, *, is_final: bool) -> ReasoningScan: ...

    @property
    def end_marker(self) -> str:
        """The text that ends the reasoning section ("" when there is none)."""
        ...


def split_at(text: str, start: int, end_marker: str, *, is_final: bool) -> ReasoningScan:
    """Reasoning from `start` to `end_marker`, content after it; while the marker has not
    come, everything is reasoning except a possible marker prefix at the end."""
    end = text.find(end_marker, start)
    if end < 0:
        body = text[start:]
        keep = 0 if is_final else held_back(body, [end_marker])
        return ReasoningScan(reasoning=body[: len(body) - keep], content="")
    return ReasoningScan(reasoning=text[start:end], content=text[end + len(end_marker) :])


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """`<think>…</think>` then content (deepseek_r1, qwen3).

    `open_optional`: the template may have emitted `<think>` already, so text without
    it is reasoning until `</think>` (deepseek_r1); otherwise text must start with
    `<think>` to be reasoning (qwen3). An unterminated block is all reasoning.
    `enabled=False` (qwen3 with enable_thinking false): everything is content."""

    open_optional: bool
    enabled: bool = True
    open: str = "<think>"
    close: str = "</think>"

    @property
    def end_marker(self) -> str:
        return self.close if self.enabled else ""

    def scan(self, text: str, *, is_final: bool) -> ReasoningScan:
        if not self.enabled:
            return ReasoningScan(reasoning="", content=text)
        start = 0
        if text.startswith(self.open):
            start = len(self.open)
        elif self.open.startswith(text) and not is_final:
            return ReasoningScan(reasoning="", content="")  # may still become the tag
        elif not self.open_optional:
            return ReasoningScan(reasoning="", content=text)
        return split_at(text, start, self.close, is_final=is_final)


@dataclass(frozen=True, slots=True)
class Granite:
    """ "Here is my thought process:" reasoning "Here is my response:" content."""

    thought: str = "Here is my thought process:"
    response: str = "Here is my response:"

    @property
    def end_marker(self) -> str:
        return self.response

    def scan(self, text: str, *, is_final: bool) -> ReasoningScan:
        if not text.startswith(self.thought):
            if self.thought.startswith(text) and not is_final:
                return ReasoningScan(reasoning="", content="")
            return ReasoningScan(reasoning="", content=text)
        return split_at(text, len(self.thought), self.response, is_final=is_final)


@dataclass(slots=True)
class ReasoningStream:
    """Feed text chunks; get (reasoning, content) deltas; `flush()` at the end."""

    fmt: ReasoningFormat
    _text: str = ""
    _reasoning_len: int = 0
    _content_len: int = 0
    is_reasoning: bool = True  # the text so far ends inside the reasoning section

    def feed(self, chunk: str) -> tuple[str, str]:
        self._text += chunk
        return self._diff(self.fmt.scan(self._text, is_final=False))

    def flush(self) -> tuple[str, str]:
        return self._diff(self.fmt.scan(self._text, is_final=True))

    def _diff(self, scan: ReasoningScan) -> tuple[str, str]:
        self.is_reasoning = not scan.content and bool(scan.reasoning)  # from the scan just made
        reasoning = scan.reasoning[self._reasoning_len :]
        content = scan.content[self._content_len :]
        self._reasoning_len, self._content_len = len(scan.reasoning), len(scan.content)
        return reasoning, content


def parse_reasoning(fmt: ReasoningFormat, text: str) -> ReasoningScan:
    """Non-streaming: the whole text split into reasoning and content."""
    return fmt.scan(text, is_final=True)
