"""Projection replay of the live request log rebuilds the bytes the clients received."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
import trio

from atom.log.codec import read_log
from atom.log.replay import project, reparse
from atom.vocabulary.events import ClientDisconnected, RequestAborted
from tests.e2e.conftest import Server
from tests.replay_mix import Q, response_id, send_mix
from tests.weather import WEATHER

pytestmark = pytest.mark.slow


async def test_replay_of_the_live_log_is_byte_identical(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        received = await send_mix(client)
    await trio.sleep(0.5)  # the logger flushes after each burst
    command = [sys.executable, "-m", "atom.cli", "replay", str(server.log_path), "--json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    replayed = {r["request_id"]: r for r in map(json.loads, out.splitlines())}
    dropped = list(received)[-1]
    for request_id, raw in received.items():
        body = replayed[request_id]["body"].encode()
        if request_id == dropped:
            assert body.startswith(raw) and not replayed[request_id]["is_complete"]
        else:
            assert body == raw
            assert replayed[request_id]["status"] == 200
    events = [e.event for e in read_log(server.log_path)]
    kinds = {type(e) for e in events if getattr(e, "request_id", None) == dropped}
    assert {ClientDisconnected, RequestAborted} <= kinds


PLANNED: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": Q, "tools": [WEATHER], "tool_choice": "required"}),
    (
        "/v1/chat/completions",
        {
            "messages": Q,
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "stream": True,
        },
    ),
    ("/v1/completions", {"prompt": "Paris is", "echo": True, "logprobs": 2}),
    ("/v1/completions", {"prompt": ["Paris is", "Rome is"], "prompt_logprobs": 1, "n": 2}),
    ("/v1/completions", {"prompt": "Once upon a time", "best_of": 3, "temperature": 0.8}),
    ("/v1/chat/completions", {"messages": Q, "n": 2, "logprobs": True, "top_logprobs": 2}),
    ("/v1/messages", {"messages": Q, "stop_sequences": [" is"]}),
    ("/v1/responses", {"input": Q, "max_output_tokens": 12, "stream": True}),
    (
        "/v1/responses",
        {
            "input": Q,
            "tools": [WEATHER["function"] | {"type": "function"}],
            "tool_choice": "required",
            "max_output_tokens": 40,
        },
    ),
    (
        "/v1/messages",
        {
            "messages": Q,
            "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
            "tool_choice": {"type": "any"},
            "stream": True,
        },
    ),
]


async def test_every_plan_replays_byte_identical_and_rebuilt_through_the_pipelines(
    server: Server, tokenizer: Any
) -> None:
    """Forced and named tool choice, echo, prompt logprobs, several prompts, best_of and
    n > 1: the log replays to the bytes sent, and so does rebuilding every choice's
    text events from the recorded tokens with the parsers the server used (none)."""
    received: dict[str, bytes] = {}
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        for path, body in PLANNED:
            # Each API's own length field; Anthropic's and the Responses API have no seed.
            extra = {
                "/v1/messages": {"max_tokens": 12},
                "/v1/responses": {},
            }.get(path, {"max_tokens": 12, "seed": 3})
            r = await client.post(path, json={**extra, **body})
            assert r.status_code == 200, r.text
            received[response_id(r.content)] = r.content
    await trio.sleep(0.5)  # the logger flushes after each burst
    log = list(read_log(server.log_path))
    rebuilt = reparse(log, tokenizer, tool_call_parser=None, reasoning_parser=None)
    for replayed in (project(log), project(rebuilt)):
        by_id = {r.request_id: bytes(r.body) for r in replayed}
        for request_id, raw in received.items():
            assert by_id[request_id] == raw
