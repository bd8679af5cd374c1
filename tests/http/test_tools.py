"""Tool calls and reasoning through the whole server (FakeRunner scripted with a model's
real output format, the real tokenizer, the openai client), and replay with parser swap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project, reparse
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready
from tests.weather import CALL_REPLY, WEATHER

TOOLS = [WEATHER]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


async def test_tool_calls_whole_and_streamed(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    settings = Settings(tool_call_parser="hermes", request_log=str(log_path))
    app = create_app(settings, load=fake_loader(tokenizer, reply=CALL_REPLY))
    async with serving(app) as url:
        await wait_ready(app)
        c = client(url)

        def whole() -> Any:
            return c.chat.completions.create(
                model="SmolLM2-135M-Instruct", messages=ASK, tools=TOOLS
            )

        def streamed() -> list[Any]:
            kw = {"model": "SmolLM2-135M-Instruct", "messages": ASK, "tools": TOOLS, "stream": True}
            return list(c.chat.completions.create(**kw))  # type: ignore[call-overload]

        done = await trio.to_thread.run_sync(whole)
        chunks = await trio.to_thread.run_sync(streamed)
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "Paris"
    }
    assert call.id.startswith("call_")
    calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert calls[0].id and calls[0].type == "function" and calls[0].function.name == "get_weather"
    assert all(tc.id is None and tc.function.name is None for tc in calls[1:])
    assert "".join(tc.function.arguments or "" for tc in calls) == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    whole_body, stream_body = (
        json.loads(r.body) if i == 0 else r.body for i, r in enumerate(project(read_log(log_path)))
    )
    assert whole_body["choices"][0]["message"]["tool_calls"][0]["id"] == call.id
    assert b'"tool_calls":[{"index":0,"id":"call_' in stream_body
    # The parser the server used, given as a swap, rebuilds the same bytes.
    rebuilt = reparse(
        read_log(log_path), tokenizer, tool_call_parser="hermes", reasoning_parser=None
    )
    assert [r.body for r in project(rebuilt)] == [r.body for r in project(read_log(log_path))]


async def test_reasoning_is_separated_under_both_names(tokenizer: Any) -> None:
    settings = Settings(reasoning_parser="deepseek_r1")
    app = create_app(
        settings, load=fake_loader(tokenizer, reply="<think>Thinking hard.</think>Paris.")
    )
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        doc = (await http.post("/v1/chat/completions", json={"messages": ASK})).json()
        raw = (await http.post("/v1/chat/completions", json={"messages": ASK, "stream": True})).text
    message = doc["choices"][0]["message"]
    assert message["content"] == "Paris."
    assert message["reasoning_content"] == message["reasoning"] == "Thinking hard."
    assert doc["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
    deltas = [
        json.loads(x[6:])["choices"][0]["delta"]
        for x in raw.split("\n\n")
        if x.startswith("data: {")
    ]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Thinking hard."
    assert "".join(d.get("content", "") for d in deltas) == "Paris."


async def test_history_with_tool_messages_renders_and_unknown_named_tool_is_refused(
    tokenizer: Any,
) -> None:
    app = create_app(Settings(tool_call_parser="hermes"), load=fake_loader(tokenizer))
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        ok = await http.post("/v1/chat/completions", json={"messages": history, "tools": TOOLS})
        named = {"type": "function", "function": {"name": "nope"}}
        unknown = await http.post(
            "/v1/chat/completions", json={"messages": ASK, "tools": TOOLS, "tool_choice": named}
        )
    assert ok.status_code == 200
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "tool_choice"


async def test_replay_swaps_in_a_tool_parser(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    app = create_app(
        Settings(request_log=str(log_path)), load=fake_loader(tokenizer, reply=CALL_REPLY)
    )
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        plain = await http.post("/v1/chat/completions", json={"messages": ASK, "tools": TOOLS})
        await trio.sleep(0.2)
    assert plain.json()["choices"][0]["message"]["content"] == CALL_REPLY  # no parser: text
    command = [sys.executable, "-m", "atom.cli", "replay", str(log_path), "--json"]
    same = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert same["body"].encode() == plain.content
    swapped = subprocess.run(
        [*command, "--tool-call-parser", "hermes"], capture_output=True, text=True, check=True
    ).stdout
    message = json.loads(json.loads(swapped)["body"])["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert message["content"] == "Let me check."


async def test_parallel_tool_calls_false_keeps_one_call(tokenizer: Any) -> None:
    two = (
        CALL_REPLY + '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    app = create_app(Settings(tool_call_parser="hermes"), load=fake_loader(tokenizer, reply=two))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        body = {"messages": ASK, "tools": TOOLS}
        both = (await http.post("/v1/chat/completions", json=body)).json()
        one = (
            await http.post("/v1/chat/completions", json={**body, "parallel_tool_calls": False})
        ).json()
        none = (
            await http.post("/v1/chat/completions", json={**body, "tool_choice": "none"})
        ).json()
    assert len(both["choices"][0]["message"]["tool_calls"]) == 2
    assert len(one["choices"][0]["message"]["tool_calls"]) == 1
    assert "tool_calls" not in none["choices"][0]["message"]  # tool_choice none: plain text
    assert none["choices"][0]["message"]["content"] == two
