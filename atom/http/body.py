"""Request bodies from the wire: read within a size and time limit, then decoded as JSON once,
with the nesting depth and Unicode validity checked, for every route that takes a body."""

from __future__ import annotations

import json
import re
from typing import Any

import trio

from atom.actors.request import ASGIReceive
from atom.vocabulary.errors import InvalidRequest, PayloadTooLarge, RequestTimeout

MAX_DEPTH = 64  # tool schemas nest a dozen levels; 10,000 levels crash recursive code
_SURROGATE = re.compile("[\ud800-\udfff]")


async def read_body(receive: ASGIReceive, *, max_bytes: int, timeout_s: float) -> bytes | None:
    """The whole request body, or None when the client left first. Raises PayloadTooLarge
    past `max_bytes` and RequestTimeout when it has not all arrived within `timeout_s`."""
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_after(timeout_s):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > max_bytes:
                raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
            if not message.get("more_body", False):
                return b"".join(chunks)
    raise RequestTimeout(f"the request body did not arrive within {timeout_s:g} s")


def decode_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object (read within the size limit already). Raises
    InvalidRequest (naming the field) for anything that is not JSON, not an object, nested
    deeper than MAX_DEPTH or holding a lone surrogate."""
    try:
        payload = json.loads(raw)
    except RecursionError:
        raise InvalidRequest(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InvalidRequest("the request body must be a JSON object")
    check_plain(payload)
    return payload


def check_plain(payload: dict[str, Any]) -> None:
    """Walk the decoded body without recursion: depth and valid Unicode in keys and strings.

    A lone surrogate (`"\\ud800"`) is valid JSON but no Unicode text: it cannot be
    tokenized, logged as UTF-8 or echoed in an error, so it is refused where it enters."""
    stack: list[tuple[str, Any, int]] = [("", payload, 1)]
    while stack:
        path, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidRequest(
                f"the request body nests deeper than {MAX_DEPTH} levels at {path}", param=path
            )
        if isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, f"{path}.{_printable(key)}".lstrip("."))
                stack.append((f"{path}.{key}".lstrip("."), item, depth + 1))
        elif isinstance(value, list):
            stack.extend(
                (f"{path}.{i}".lstrip("."), item, depth + 1) for i, item in enumerate(value)
            )


def _check_text(text: str, path: str) -> None:
    if _SURROGATE.search(text):
        param = _printable(path) or None
        raise InvalidRequest(
            f"{param or 'the request body'}: the string holds a lone UTF-16 surrogate, "
            "which is not valid Unicode text",
            param=param,
        )


def _printable(text: str) -> str:
    """`text` with surrogates escaped, so an error message about it can be encoded."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


async def request_json() -> dict[str, Any]:
    """The body of the Quart request being served, decoded: AtomApp has read it within
    the limits above and handed it over (atom/http/app.py)."""
    from quart import request

    raw = await request.get_data(as_text=False)
    return decode_json(raw if isinstance(raw, bytes) else raw.encode())
