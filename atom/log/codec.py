"""The request log's JSONL codec: one envelope per line, `{"v":1,"seq","at","type",...}`.

Events are frozen dataclasses of plain data, so encoding is generic: tuples
become lists, enums their values, nested records objects. Decoding reverses it
by the record's type hints. docs/request-log.md documents every type.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO

from atom.vocabulary.events import Envelope, event_class

SCHEMA_VERSION = 1


def encode(envelope: Envelope, *, ensure_ascii: bool = False) -> str:
    """One JSON line (no newline) for `envelope`. With `ensure_ascii` every non-ASCII
    character is a `\\u` escape: the form for text holding lone surrogates."""
    head = {"v": SCHEMA_VERSION, "seq": envelope.seq, "at": envelope.at}
    event = envelope.event
    payload = {"type": event.type, **_plain(event)}
    return json.dumps({**head, **payload}, ensure_ascii=ensure_ascii, separators=(",", ":"))


def decode(line: str) -> Envelope:
    """Parse one line back into its envelope; ValueError on an unknown version or type."""
    raw = json.loads(line)
    if raw.pop("v", None) != SCHEMA_VERSION:
        raise ValueError(f"unsupported request-log version in: {line[:80]}")
    seq, at, tag = raw.pop("seq"), raw.pop("at"), raw.pop("type")
    try:
        cls = event_class(tag)
    except KeyError:
        raise ValueError(f"unknown event type {tag!r}") from None
    return Envelope(seq=seq, at=at, event=_build(cls, raw))


# What decoding a line that is no record raises (cut JSON or UTF-8, an unknown type, ...).
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, RecursionError)
MAX_LINE_BYTES = 64 * 1024 * 1024  # a longer line is reported, not held in memory


def read_log(
    path: str | Path, *, on_torn: Callable[[int, str], None] | None = None
) -> Iterator[Envelope]:
    """Every envelope of a log file in order, read as a stream. A line that is no record
    (a crash mid-write: cut JSON, a cut UTF-8 character; or any other text, nesting past
    the parser's depth, an unknown event type, a line past MAX_LINE_BYTES) is skipped and
    passed to `on_torn` with its line number and the reason; the lines after it, such as
    those a restarted server appended, are read."""
    with open(path, "rb") as f:
        for number, raw in enumerate(_lines(f), start=1):
            if raw is None:
                reason = f"a line longer than {MAX_LINE_BYTES} bytes"
            elif not raw.strip():
                continue
            else:
                try:
                    yield decode(raw.decode("utf-8"))
                    continue
                except UNREADABLE as exc:
                    reason = f"{type(exc).__name__}: {exc}"[:200]
            if on_torn is not None:
                on_torn(number, reason)


def _lines(f: BinaryIO) -> Iterator[bytes | None]:
    """The file's lines; None for one past MAX_LINE_BYTES, whose bytes are read past."""
    while raw := f.readline(MAX_LINE_BYTES + 1):
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw
            continue
        while (rest := f.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield None


def encode_all(envelopes: Iterable[Envelope]) -> str:
    return "".join(encode(e) + "\n" for e in envelopes)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _build(cls: type, raw: dict[str, Any]) -> Any:
    """`cls` from its logged fields; a record whose fields changed reads an older line
    through its `upgrade_logged`."""
    if (upgrade := getattr(cls, "upgrade_logged", None)) is not None:
        raw = upgrade(raw)
    hints = _hints(cls)
    return cls(**{name: _convert(hints[name], value) for name, value in raw.items()})


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return _convert(args[0], value) if len(args) == 1 else value
    if origin is tuple:
        return tuple(_convert(args[0], v) for v in value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value)
    return value
