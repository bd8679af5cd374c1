"""A fixed mix of requests for replay proofs: streaming, not, n=2, stop, and a disconnect."""

from __future__ import annotations

import json
from typing import Any

import httpx

Q = [{"role": "user", "content": "What is the capital of France?"}]
MIX: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": Q, "temperature": 0, "max_tokens": 16}),
    (
        "/v1/chat/completions",
        {
            "messages": Q,
            "temperature": 0,
            "max_tokens": 16,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    (
        "/v1/chat/completions",
        {"messages": Q, "n": 2, "temperature": 0.9, "seed": 5, "max_tokens": 8},
    ),
    (
        "/v1/completions",
        {
            "prompt": "Paris is",
            "stop": [" the"],
            "temperature": 0,
            "stream": True,
            "max_tokens": 20,
        },
    ),
    ("/v1/completions", {"prompt": "Once upon a time", "temperature": 0, "max_tokens": 6}),
]


def response_id(raw: bytes) -> str:
    """The id of a response: a JSON body, OpenAI's SSE chunks, or Anthropic's or the
    Responses API's events (whose first event holds the message or response)."""
    text = raw.decode()
    start = text.find("{")
    is_stream = text.startswith(("data:", "event:"))
    first = json.loads(text[start : text.index("\n", start) if is_stream else None])
    return str(first.get("message", first.get("response", first))["id"])


async def send_mix(client: httpx.AsyncClient) -> dict[str, bytes]:
    """Send MIX plus one stream dropped after two chunks; request id → bytes received."""
    got: dict[str, bytes] = {}
    for path, body in MIX:
        async with client.stream("POST", path, json=body) as r:
            raw = b"".join([chunk async for chunk in r.aiter_raw()])
        got[response_id(raw)] = raw
    body = {"messages": Q, "temperature": 0, "max_tokens": 200, "stream": True}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        chunks = []
        async for chunk in r.aiter_raw():
            chunks.append(chunk)
            if len(chunks) == 2:
                break
    got[response_id(chunks[0])] = b"".join(chunks)
    return got
