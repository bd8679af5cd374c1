"""A hand corpus of hostile bodies against a real server (FakeRunner model): each gets a
clear 4xx in OpenAI's shape naming what is wrong, and the server keeps serving
(issue 20; docs/reliability.md lists the limits)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready

MSG = [{"role": "user", "content": "hi"}]
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
BODY_LIMIT = 1024 * 1024


def raw(text: str) -> bytes:
    return text.encode()


# (name, path, body: a dict sent as JSON or bytes sent as they are, status, param or None)
CORPUS: list[tuple[str, str, Any, int, str | None]] = [
    ("body over the limit", CHAT, {"messages": MSG, "user": "x" * BODY_LIMIT}, 413, None),
    ("invalid UTF-8", CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None),
    ("NaN", CHAT, raw('{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}'),
     400, "temperature"),
    ("Infinity", COMPLETIONS, raw('{"prompt": "x", "top_p": Infinity}'), 400, "top_p"),
    ("deep nesting", CHAT, raw('{"messages": ' + "[" * 5000 + "]" * 5000 + "}"), 400, None),
    ("not an object", CHAT, raw("[1, 2]"), 400, None),
    ("huge n", CHAT, {"messages": MSG, "n": 10**9}, 400, "n"),
    ("huge max_tokens", CHAT, {"messages": MSG, "max_tokens": 2**63}, 400, None),
    ("huge logit_bias", CHAT, {"messages": MSG, "logit_bias": {str(i): 1 for i in range(60000)}},
     400, "logit_bias"),
    ("logit_bias out of range", CHAT, {"messages": MSG, "logit_bias": {"5": 1e300}}, 400,
     "logit_bias"),
    ("prompt id past the vocabulary", COMPLETIONS, {"prompt": [10**9]}, 400, "prompt"),
    ("negative prompt id", COMPLETIONS, {"prompt": [[1, 2], [-1]]}, 400, "prompt"),
    ("prompt id past int64", COMPLETIONS, {"prompt": [2**70]}, 400, "prompt"),
    ("stop token past the vocabulary", CHAT, {"messages": MSG, "stop_token_ids": [10**9]}, 400,
     "stop_token_ids"),
    ("allowed token past the vocabulary", CHAT,
     {"messages": MSG, "allowed_token_ids": [2**70]}, 400, "allowed_token_ids"),
    ("embedding input past the vocabulary", "/v1/embeddings", {"input": [10**9]}, 400, "input"),
    ("control characters in the model name", CHAT, {"messages": MSG, "model": "\x00\n\u202e"},
     404, "model"),
    ("control characters as a role", CHAT, {"messages": [{"role": "\x1b", "content": "x"}]}, 400,
     "messages.0.role"),
    ("a string where a list goes", CHAT, {"messages": "hi"}, 400, "messages"),
    ("huge top_logprobs", CHAT, {"messages": MSG, "logprobs": True, "top_logprobs": 10**6}, 400,
     "top_logprobs"),
    ("huge best_of", COMPLETIONS, {"prompt": "x", "best_of": 10**6}, 400, None),
    ("min_tokens past max_tokens", CHAT, {"messages": MSG, "min_tokens": 10**9}, 400,
     "min_tokens"),
]  # fmt: skip

# Accepted: the text is whatever a user may write, and the numbers mean "no limit".
ACCEPTED: list[tuple[str, str, dict[str, Any]]] = [
    ("control and bidi characters in every text field", CHAT, {
        "messages": [{"role": "user", "content": "\x00\x01\x1b[31m\u202e\ufeff\U0010ffff"}],
        "stop": ["\x00", "\u202e"], "user": "\x00\x7f",
    }),
    ("top_k past the vocabulary and past int64", CHAT, {"messages": MSG, "top_k": 2**70}),
    ("seed past int64", CHAT, {"messages": MSG, "seed": 2**70, "temperature": 1}),
    ("ten thousand stop strings", CHAT, {"messages": MSG, "stop": [f"s{i}" for i in range(10000)]}),
    ("truncate_prompt_tokens past the context", COMPLETIONS,
     {"prompt": "x", "truncate_prompt_tokens": 10**12}),
]  # fmt: skip


@pytest.fixture
async def client(tokenizer: Any) -> Any:
    settings = Settings(max_request_body_bytes=BODY_LIMIT, max_num_seqs=2, max_queued_requests=8)
    app = create_app(settings, load=fake_loader(tokenizer, step_delay_s=0.005))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        await wait_ready(app)
        yield http


async def post(client: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(path, content=content, headers={"content-type": "application/json"})


async def test_each_hostile_body_is_a_clear_4xx_and_the_server_keeps_serving(client: Any) -> None:
    for name, path, body, status, param in CORPUS:
        r = await post(client, path, body)
        assert r.status_code == status, (name, r.text[:200])
        error = r.json()["error"]
        assert error["message"] and error["type"], name
        if param is not None:
            assert error["param"] == param, (name, error)
    for name, path, body in ACCEPTED:
        r = await post(client, path, body)
        assert r.status_code == 200, (name, r.text[:200])
    health = await client.get("/health")
    assert health.status_code == 200


async def test_far_more_connections_than_sequences_get_answers_not_resets(client: Any) -> None:
    """2 running and 8 queued at most: of 80 connections at once, each is answered — a
    200 or a 429 with Retry-After — and none is reset or left hanging."""
    statuses: list[int] = []

    async def one() -> None:
        r = await client.post(CHAT, json={"messages": MSG, "max_tokens": 20})
        assert r.status_code in (200, 429), r.text
        if r.status_code == 429:
            assert r.headers["retry-after"] and r.json()["error"]["code"] == "server_overloaded"
        statuses.append(r.status_code)

    async with trio.open_nursery() as nursery:
        for _ in range(80):
            nursery.start_soon(one)
    assert len(statuses) == 80 and {200, 429} <= set(statuses)
    assert (await client.post(CHAT, json={"messages": MSG})).status_code == 200
