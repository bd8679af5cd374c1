"""The mixed load of bench/soak.py: one request body per index, drawn from a fixed mix of
what clients send (and some bad requests)."""

from __future__ import annotations

import random
from typing import Any

from tests.weather import WEATHER

ASK = [{"role": "user", "content": "What is the capital of France?"}]
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


def mixed_body(rng: random.Random, idx: int) -> tuple[str, dict[str, Any]]:
    """(path, body) of the idx-th request: chat or completions, streamed or not, n > 1,
    tools, JSON output, or one of the bad requests (each a 4xx)."""
    kind = idx % 10
    stream = rng.random() < 0.5
    tokens = rng.randint(4, 40)
    if kind <= 2:
        return CHAT, {"messages": ASK, "max_tokens": tokens, "stream": stream}
    if kind == 3:
        return CHAT, {
            "messages": ASK,
            "max_tokens": tokens,
            "n": 3,
            "stream": stream,
            "temperature": 0.8,
            "seed": idx,
        }
    if kind == 4:
        return CHAT, {"messages": ASK, "tools": [WEATHER], "max_tokens": tokens, "stream": stream}
    if kind == 5:
        return CHAT, {
            "messages": ASK,
            "response_format": {"type": "json_object"},
            "max_tokens": tokens,
            "stream": stream,
        }
    if kind <= 7:
        return COMPLETIONS, {
            "prompt": f"Once upon a time {idx}",
            "max_tokens": tokens,
            "stream": stream,
            "logprobs": 2 if kind == 7 else None,
        }
    if kind == 8:
        return CHAT, {
            "messages": ASK,
            "max_tokens": tokens,
            "stream": stream,
            "stream_options": {"include_usage": True},
            "stop": ["a", "e"],
        }
    return _bad(idx)


def _bad(idx: int) -> tuple[str, dict[str, Any]]:
    bad: list[tuple[str, dict[str, Any]]] = [
        (CHAT, {"messages": []}),
        (CHAT, {"messages": ASK, "n": 1000}),
        (CHAT, {"messages": ASK, "temperature": -1}),
        (COMPLETIONS, {"prompt": [10**9]}),
        (CHAT, {"messages": ASK, "model": "no-such-model"}),
    ]
    return bad[(idx // 10) % len(bad)]
