"""Ollama's API (`/api/chat`, `/api/tags`, `/api/version`) through the whole server
(FakeRunner with a scripted reply, the real tokenizer, the official `ollama` client),
and its replay."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import ollama
import trio

from atom.http.app import create_app
from atom.http.ollama import sampling
from atom.http.ollama_schemas import OllamaOptions
from atom.log.codec import read_log
from atom.log.replay import project, reparse
from atom.vocabulary.config import Settings
from tests.conftest import FAKE_REPLY, fake_loader, serving, wait_ready
from tests.weather import CALL_REPLY, WEATHER

MODEL = "SmolLM2-135M-Instruct"
ASK = [{"role": "user", "content": "Say hello."}]


@asynccontextmanager
async def ollama_server(
    tokenizer: Any, settings: Settings, reply: str = FAKE_REPLY
) -> AsyncIterator[tuple[ollama.Client, str]]:
    """A served app over the FakeRunner replying `reply`: the official client and the URL."""
    app = create_app(settings, load=fake_loader(tokenizer, reply=reply))
    async with serving(app) as url:
        await wait_ready(app)
        yield ollama.Client(host=url), url


async def test_a_chat_whole_and_streamed_and_the_model_list(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    async with ollama_server(tokenizer, Settings(request_log=str(log_path))) as (client, url):

        def calls() -> tuple[Any, list[Any], Any, Any]:
            options = {"temperature": 0, "num_predict": 64, "num_ctx": 4096}
            whole = client.chat(model=MODEL, messages=ASK, stream=False, options=options)
            parts = list(client.chat(model=MODEL, messages=ASK, stream=True, options=options))
            return whole, parts, client.list(), httpx.get(f"{url}/api/version").json()

        whole, parts, listed, version = await trio.to_thread.run_sync(calls)
        await trio.sleep(0.2)
    assert whole.message.role == "assistant" and whole.message.content == FAKE_REPLY
    assert whole.done and whole.done_reason == "stop" and whole.model == MODEL
    reply_tokens = len(tokenizer.encode(FAKE_REPLY, add_special_tokens=False))
    assert whole.eval_count == reply_tokens + 1 and (whole.prompt_eval_count or 0) > 0
    assert (whole.total_duration or 0) >= (whole.prompt_eval_duration or 0) > 0
    assert "".join(p.message.content for p in parts) == FAKE_REPLY
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].eval_count == whole.eval_count and parts[-1].created_at == parts[0].created_at
    assert MODEL in [m.model for m in listed.models] and version["version"]
    responses = project(read_log(log_path))
    assert [r.status for r in responses] == [200, 200]
    assert json.loads(responses[0].body)["message"]["content"] == FAKE_REPLY
    assert responses[1].content_type == "application/x-ndjson"
    lines = [json.loads(line) for line in bytes(responses[1].body).splitlines()]
    assert "".join(line["message"]["content"] for line in lines) == FAKE_REPLY


async def test_tool_calls_whole_streamed_and_reparsed(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    settings = Settings(tool_call_parser="hermes", request_log=str(log_path))
    async with ollama_server(tokenizer, settings, CALL_REPLY) as (client, _):
        asked = {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}
        history = [
            *ASK,
            {"role": "assistant", "content": "", "tool_calls": [asked]},
            {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
        ]

        def calls() -> tuple[Any, list[Any]]:
            whole = client.chat(model=MODEL, messages=history, tools=[WEATHER], stream=False)
            parts = list(client.chat(model=MODEL, messages=ASK, tools=[WEATHER], stream=True))
            return whole, parts

        whole, parts = await trio.to_thread.run_sync(calls)
    [call] = whole.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    assert whole.message.content == "Let me check." and whole.done_reason == "stop"
    streamed = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [c.function.arguments for c in streamed] == [{"city": "Paris"}]
    log = list(read_log(log_path))
    sent = [r.body for r in project(log)]
    rebuilt = reparse(log, tokenizer, tool_call_parser="hermes", reasoning_parser=None)
    assert [r.body for r in project(rebuilt)] == sent


async def test_thinking_comes_back_as_message_thinking(tokenizer: Any) -> None:
    settings = Settings(reasoning_parser="deepseek_r1")
    async with ollama_server(tokenizer, settings, "<think>Easy.</think>Hello!") as (client, _):

        def calls() -> tuple[Any, list[Any]]:
            whole = client.chat(model=MODEL, messages=ASK, think=True, stream=False)
            return whole, list(client.chat(model=MODEL, messages=ASK, think=True, stream=True))

        whole, parts = await trio.to_thread.run_sync(calls)
    assert whole.message.thinking == "Easy." and whole.message.content == "Hello!"
    assert "".join(p.message.thinking or "" for p in parts) == "Easy."
    assert "".join(p.message.content for p in parts) == "Hello!"


async def test_generate_templated_raw_and_streamed(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    async with ollama_server(tokenizer, Settings(request_log=str(log_path))) as (client, url):

        def calls() -> tuple[Any, Any, list[Any], bytes]:
            templated = client.generate(model=MODEL, prompt="Hi", system="Be brief.", stream=False)
            raw = client.generate(model=MODEL, prompt="Hi", raw=True, stream=False)
            parts = list(client.generate(model=MODEL, prompt="Hi", stream=True))
            sent = httpx.post(f"{url}/api/generate", json={"model": MODEL, "prompt": "Hi"})
            return templated, raw, parts, sent.content

        templated, raw, parts, sent = await trio.to_thread.run_sync(calls)
    assert templated.response == FAKE_REPLY and raw.response == FAKE_REPLY
    assert raw.prompt_eval_count == len(tokenizer.encode("Hi", add_special_tokens=False))
    assert (templated.prompt_eval_count or 0) > (raw.prompt_eval_count or 0) + 5  # the template
    assert "".join(p.response for p in parts) == FAKE_REPLY and parts[-1].done
    replayed = project(read_log(log_path))
    assert bytes(replayed[3].body) == sent  # replay gives the bytes the client got
    streamed = replayed[2]
    lines = [json.loads(line) for line in bytes(streamed.body).splitlines()]
    assert lines and all(set(line) >= {"model", "created_at", "response", "done"} for line in lines)


async def test_embed_and_the_older_embeddings_equal_openais(tokenizer: Any) -> None:
    embedder = "all-MiniLM-L6-v2"
    async with ollama_server(tokenizer, Settings()) as (client, url):

        def openai_style(**body: Any) -> list[list[float]]:
            answer = httpx.post(f"{url}/v1/embeddings", json={"model": embedder, **body})
            return [d["embedding"] for d in answer.json()["data"]]

        def calls() -> tuple[Any, ...]:
            embedded = client.embed(model=embedder, input=["Paris", "a fox"], dimensions=8)
            older = client.embeddings(model=embedder, prompt="Paris")
            wrong = httpx.post(f"{url}/api/embed", json={"model": MODEL, "input": "x"})
            same_dims = openai_style(input=["Paris", "a fox"], dimensions=8)
            return embedded, older, wrong, same_dims, openai_style(input="Paris")

        embedded, older, wrong, same_dims, whole = await trio.to_thread.run_sync(calls)
    assert embedded.embeddings == same_dims and len(same_dims[0]) == 8
    assert embedded.model == embedder
    assert older.embedding == whole[0] and len(whole[0]) == 8
    assert wrong.status_code == 400 and set(wrong.json()) == {"error"}


async def test_show_and_ps_describe_the_served_models(tokenizer: Any) -> None:
    settings = Settings(tool_call_parser="hermes")
    async with ollama_server(tokenizer, settings) as (client, url):

        def calls() -> tuple[Any, ...]:
            missing = httpx.post(f"{url}/api/show", json={"model": "no-such-model"})
            return client.show(MODEL), client.show("all-MiniLM-L6-v2"), client.ps(), missing

        shown, embedder, running, missing = await trio.to_thread.run_sync(calls)
    assert shown.capabilities == ["completion", "tools"] and "im_start" in (shown.template or "")
    assert shown.modelinfo is not None and shown.modelinfo["kind"] == "generate"
    assert embedder.capabilities == ["embedding"]
    loaded = {m.model: m.context_length for m in running.models}
    assert set(loaded) == {MODEL, "all-MiniLM-L6-v2", "whisper-base"} and loaded[MODEL] == 2048
    assert missing.status_code == 404 and "no-such-model" in missing.json()["error"]


async def test_load_requests_and_bad_bodies(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        bad_predict = {"model": MODEL, "messages": ASK, "options": {"num_predict": 0}}
        refused = await client.post("/api/chat", json=bad_predict)
        unknown = await client.post("/api/chat", json={"model": MODEL, "messages": ASK, "x": 1})
        load = await client.post("/api/chat", json={"model": MODEL, "messages": []})
        load_generate = await client.post("/api/generate", json={"model": MODEL})
        load_missing = await client.post("/api/generate", json={"model": "no-such-model"})
        wrong_method = await client.get("/api/chat")
        suffix = await client.post("/api/generate", json={"prompt": "a", "suffix": "b"})
        raw_system = await client.post(
            "/api/generate", json={"prompt": "a", "raw": True, "system": "s"}
        )
        ok = await client.post(
            "/api/chat", json={"model": MODEL, "messages": ASK, "stream": False, "format": "json"}
        )
    assert refused.status_code == 400 and "num_predict" in refused.json()["error"]
    assert unknown.status_code == 400 and "x" in unknown.json()["error"]
    assert load.status_code == 200 and load.json()["done_reason"] == "load"
    assert load.json()["message"] == {"role": "assistant", "content": ""}
    assert load_generate.json()["done_reason"] == "load" and load_generate.json()["response"] == ""
    assert load_missing.status_code == 404 and set(load_missing.json()) == {"error"}
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()
    assert suffix.status_code == 400 and "suffix" in suffix.json()["error"]
    assert raw_system.status_code == 400 and "system" in raw_system.json()["error"]
    assert ok.status_code == 200 and ok.json()["done"] is True


def test_options_become_the_chat_bodys_sampling_fields() -> None:
    given = {
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.1,
        "seed": 7,
        "stop": "END",
        "repeat_penalty": 1.2,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "num_predict": 30,
        "num_ctx": 4096,  # the server's setting: ignored, with a warning
    }
    assert sampling(OllamaOptions.model_validate(given)) == {
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.1,
        "seed": 7,
        "stop": ["END"],
        "repetition_penalty": 1.2,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "max_tokens": 30,
    }
    assert sampling(OllamaOptions(num_predict=-1)) == {}
    assert sampling(OllamaOptions(num_predict=-2)) == {}
