"""`x-request-id`: a client's own id for its request, validated once, echoed on the
answer, and carried into the request id (`chatcmpl-<id>`, as vLLM builds it)."""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from atom.http.access import header
from atom.http.asgi import ASGISend
from atom.vocabulary.errors import InvalidRequest

SCOPE_KEY = "atom.client_request_id"  # where AtomApp leaves the validated id
_VALID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def client_request_id(scope: MutableMapping[str, Any]) -> str | None:
    """The request's `x-request-id`, if sent; InvalidRequest (400) when it is not 1 to 128
    letters, digits or `.`, `_`, `:`, `-`."""
    raw = header(scope, b"x-request-id")
    if raw is None:
        return None
    value = raw.decode("latin-1")
    if not _VALID.fullmatch(value):
        raise InvalidRequest(
            "x-request-id must be 1 to 128 letters, digits, '.', '_', ':' or '-'",
            param="x-request-id",
        )
    return value


def echoing(send: ASGISend, request_id: str) -> ASGISend:
    """`send` that puts `x-request-id` on the answer's headers."""

    async def sending(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def admitted_request_id(scope: Mapping[str, Any]) -> str | None:
    """The `x-request-id` AtomApp validated for this request, if any."""
    value = scope.get(SCOPE_KEY)
    return value if isinstance(value, str) else None
