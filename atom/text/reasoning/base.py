"""Reasoning formats scan all text so far into (reasoning, content); `ReasoningStream`
emits only what is new. As for tool calls, every scan is monotone, so the streamed
pieces concatenate to exactly the non-streaming split for any chunking."""

from __future__ import annotations

import re
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
    def start_marker(self) -> str:
        """The text that opens the reasoning section ("" when there is none)."""
        ...

    @property
    def end_marker(self) -> str:
        """The text that ends the reasoning section ("" when there is none)."""
        ...


def split_at(
    text: str, start: int, end_markers: tuple[str, ...], *, is_final: bool
) -> ReasoningScan:
    """Reasoning from `start` to the first of `end_markers`, content after it; while none
    has come, everything is reasoning except a possible marker prefix at the end."""
    found = [(i, m) for m in end_markers if (i := text.find(m, start)) >= 0]
    if not found:
        body = text[start:]
        keep = 0 if is_final else held_back(body, end_markers)
        return ReasoningScan(reasoning=body[: len(body) - keep], content="")
    end, marker = min(found)
    return ReasoningScan(reasoning=text[start:end], content=text[end + len(marker) :])


_EMPTY_BLOCK = re.compile(r"<think>\s*</think>\s*")
_EMPTY_BLOCK_SO_FAR = re.compile(r"<think>\s*(?:<(?:/(?:t(?:h(?:i(?:n(?:k>?)?)?)?)?)?)?)?")


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """`<think>…</think>` then content (deepseek_r1, qwen3).

    `starts_open`: the rendered prompt ends inside an open `<think>` (templates that
    write it themselves: DeepSeek-R1, Qwen3-Thinking-2507), so the output starts in
    the reasoning and holds only `</think>`. Otherwise the output is reasoning when it
    starts with `<think>`, and text before a lone `</think>` is reasoning too (as vLLM
    and SGLang split); output with no marker at all is content. Such output cannot be
    told from reasoning until a `</think>` or the end comes, so its text waits: the
    stream and the whole answer agree. An unterminated block is all reasoning.
    `enabled=False` (thinking switched off in the template kwargs): everything is
    content, but for an empty `<think></think>` block the model may still write first."""

    enabled: bool = True
    starts_open: bool = False
    open: str = "<think>"
    close: str = "</think>"

    @property
    def start_marker(self) -> str:
        return self.open if self.enabled else ""

    @property
    def end_marker(self) -> str:
        return self.close if self.enabled else ""

    def scan(self, text: str, *, is_final: bool) -> ReasoningScan:
        if not self.enabled:
            return ReasoningScan(reasoning="", content=_without_empty_block(text, is_final))
        if self.starts_open:
            return split_at(text, 0, (self.close,), is_final=is_final)
        if text.startswith(self.open):
            return split_at(text, len(self.open), (self.close,), is_final=is_final)
        end = text.find(self.close)
        if end >= 0:  # a lone close tag: what came before it was reasoning
            return ReasoningScan(reasoning=text[:end], content=text[end + len(self.close) :])
        if not is_final:
            return ReasoningScan(reasoning="", content="")  # a close tag may still come
        return ReasoningScan(reasoning="", content=text)


def _without_empty_block(text: str, is_final: bool) -> str:
    """`text` without an empty think block at its start (waiting while it may be one)."""
    empty = _EMPTY_BLOCK.match(text)
    if empty is not None and (is_final or empty.end() < len(text)):
        return text[empty.end() :]
    if not is_final and (
        empty is not None or _EMPTY_BLOCK_SO_FAR.fullmatch(text) or "<think>".startswith(text)
    ):
        return ""
    return text


@dataclass(frozen=True, slots=True)
class Granite:
    """ "Here is my thought process:" reasoning "Here is my response:" content (or
    "Here's …", as Granite 3.2+ also writes them)."""

    thoughts: tuple[str, ...] = ("Here is my thought process:", "Here's my thought process:")
    responses: tuple[str, ...] = ("Here is my response:", "Here's my response:")

    @property
    def start_marker(self) -> str:
        return self.thoughts[0]

    @property
    def end_marker(self) -> str:
        return self.responses[0]

    def scan(self, text: str, *, is_final: bool) -> ReasoningScan:
        thought = next((t for t in self.thoughts if text.startswith(t)), None)
        if thought is None:
            if not is_final and any(t.startswith(text) for t in self.thoughts):
                return ReasoningScan(reasoning="", content="")
            return ReasoningScan(reasoning="", content=text)
        return split_at(text, len(thought), self.responses, is_final=is_final)


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
