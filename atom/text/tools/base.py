"""Tool-call parsing: records, the format protocol, and one streaming driver for all formats.

A format only *scans*: given all text so far it says which content is certain and
which calls it has seen (name known, arguments so far). `parse` is one final scan;
`ToolStream` rescans as chunks arrive and emits only what is new. Every format keeps
its scan monotone — what a partial scan reports is a prefix of what later scans
report — so the streamed content and argument fragments concatenate to exactly the
non-streaming result, whatever the chunking. A call is committed once its name is
complete; its arguments are the model's own text (JSON formats) or, for formats
whose arguments need converting, arrive whole when the call closes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from atom.text.scanning import held_back


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialCall:
    name: str
    arguments: str  # so far
    is_complete: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    content: str
    calls: tuple[PartialCall, ...] = ()


class ToolFormat(Protocol):
    def scan(self, text: str, *, is_final: bool) -> Scan: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedTools:
    content: str
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentDelta:
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ArgumentsDelta:
    index: int
    text: str


ToolDelta = ContentDelta | ToolCallStart | ArgumentsDelta


def is_valid(call: PartialCall) -> bool:
    """A call a whole answer may hold: complete, its arguments one JSON object."""
    if not call.is_complete:
        return False
    try:
        return isinstance(json.loads(call.arguments), dict)
    except ValueError:  # JSONDecodeError, and an invalid number
        return False


def strict(scan: Scan, text: str, *, is_final: bool) -> Scan:
    """The final scan of a format whose calls follow its content (one section): if any
    call is not valid, none is, and the whole text is content (nothing is lost)."""
    if is_final and not all(is_valid(c) for c in scan.calls):
        return Scan(content=text)
    return scan


def beside_calls(content: str, calls: tuple[PartialCall, ...], *, is_final: bool) -> str:
    """Content next to calls that is only whitespace is not content; while more may come,
    whitespace waits (a call may follow it)."""
    if content.strip() == "" and (calls or not is_final):
        return ""
    return content


def scan_blocks(
    text: str,
    *,
    open_marker: str,
    close_marker: str,
    is_final: bool,
    read: Callable[[int, int], PartialCall | None],
    body_end: Callable[[int], int | None] | None = None,
) -> Scan:
    """Content with `open … close` call blocks anywhere in it (hermes, qwen3_coder).

    `read(start, limit)` reads the call in text[start:limit] (None until its name is
    complete). A possible marker prefix at the end waits; a closed block, or one cut
    off by the end of the output, without a call stays in the content, and so, in the
    final scan, does a block whose call is not valid (`is_valid`). With
    `body_end(start)` (where the block's JSON body ends, None while unfinished) the
    close marker counts only after the body: one inside a JSON string is text. Text
    that is only whitespace next to a call is not content (`_joined`)."""
    pieces: list[str | PartialCall] = []  # content and calls, in order
    pos = 0
    while True:
        i = text.find(open_marker, pos)
        if i < 0:
            tail = text[pos:]
            pieces.append(tail[: len(tail) - (0 if is_final else held_back(tail, [open_marker]))])
            return _joined(pieces, is_final=is_final)
        pieces.append(text[pos:i])
        j = _close(text, i + len(open_marker), close_marker, body_end)
        limit = j if j >= 0 else len(text) - (0 if is_final else held_back(text, [close_marker]))
        call = read(i + len(open_marker), limit)
        if call is not None and (is_valid(call) or not is_final):
            pieces.append(call)
        elif j >= 0 or is_final:
            pieces.append(text[i : j + len(close_marker) if j >= 0 else len(text)])
        if j < 0:
            return _joined(pieces, is_final=is_final)
        pos = j + len(close_marker)


def _joined(pieces: list[str | PartialCall], *, is_final: bool) -> Scan:
    """The scan of content pieces and calls: a whitespace-only piece beside a call is
    dropped, and one at the end waits while more may come (a call may follow it)."""
    content: list[str] = []
    for k, piece in enumerate(pieces):
        if isinstance(piece, PartialCall):
            continue
        if piece.strip() == "" and (
            (k > 0 and isinstance(pieces[k - 1], PartialCall))
            or (k + 1 < len(pieces) and isinstance(pieces[k + 1], PartialCall))
            or (k == len(pieces) - 1 and not is_final)
        ):
            continue
        content.append(piece)
    calls = tuple(p for p in pieces if isinstance(p, PartialCall))
    return Scan(content="".join(content), calls=calls)


def _close(text: str, start: int, marker: str, body_end: Callable[[int], int | None] | None) -> int:
    """Where the block opened before `start` closes; -1 while it has not."""
    if body_end is None:
        return text.find(marker, start)
    end = body_end(start)
    return -1 if end is None else text.find(marker, end)


def call_id(id_seed: str, index: int) -> str:
    """Deterministic, unique per (request choice, call index): replay gives the same ids."""
    digest = hashlib.sha256(f"{id_seed}/{index}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def parse(fmt: ToolFormat, text: str, *, id_seed: str = "") -> ParsedTools:
    """Non-streaming: content and complete list of calls of a whole text."""
    scan = fmt.scan(text, is_final=True)
    calls = tuple(
        ToolCall(id=call_id(id_seed, i), name=c.name, arguments=c.arguments)
        for i, c in enumerate(scan.calls)
    )
    return ParsedTools(content=scan.content, calls=calls)


@dataclass(slots=True)
class ToolStream:
    """Feed text chunks of any size; get deltas. `flush()` at the end of the output.

    `is_deferred` (a whole-body answer): nothing comes out before `flush`, which gives
    the final scan, so the body never holds a call that is not valid. Streamed, the
    final scan is given too unless it drops a call already announced (the output
    ended inside it, or its arguments are no JSON object): then the stream ends as it
    stood, that call with the arguments it had (docs/parsers.md)."""

    fmt: ToolFormat
    id_seed: str = ""
    is_deferred: bool = False
    _text: str = ""
    _content: str = ""  # the content given out so far
    _args_len: list[int] = field(default_factory=list)

    def feed(self, chunk: str) -> list[ToolDelta]:
        self._text += chunk
        if self.is_deferred:
            return []
        return self._diff(self.fmt.scan(self._text, is_final=False))

    def flush(self) -> list[ToolDelta]:
        final = self.fmt.scan(self._text, is_final=True)
        if len(final.calls) < len(self._args_len) or not final.content.startswith(self._content):
            final = self.fmt.scan(self._text, is_final=False)  # it ends as it stood
        return self._diff(final)

    @property
    def num_calls(self) -> int:
        return len(self._args_len)

    def _diff(self, scan: Scan) -> list[ToolDelta]:
        out: list[ToolDelta] = []
        if len(scan.content) > len(self._content):
            out.append(ContentDelta(text=scan.content[len(self._content) :]))
            self._content = scan.content
        for i, call in enumerate(scan.calls):
            if i == len(self._args_len):
                out.append(ToolCallStart(index=i, id=call_id(self.id_seed, i), name=call.name))
                self._args_len.append(0)
            if len(call.arguments) > self._args_len[i]:
                out.append(ArgumentsDelta(index=i, text=call.arguments[self._args_len[i] :]))
                self._args_len[i] = len(call.arguments)
        return out


def limited(fmt: ToolFormat, max_calls: int) -> ToolFormat:
    """`parallel_tool_calls: false`: keep at most `max_calls` calls (later ones are dropped)."""
    return Limited(fmt, max_calls)


@dataclass(frozen=True, slots=True)
class Limited:
    inner: ToolFormat
    max_calls: int

    def scan(self, text: str, *, is_final: bool) -> Scan:
        scan = self.inner.scan(text, is_final=is_final)
        return Scan(content=scan.content, calls=scan.calls[: self.max_calls])
