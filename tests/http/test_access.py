"""API keys and CORS over real HTTP (FakeRunner, the real tokenizer, both official
clients)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready

MODEL = "SmolLM2-135M-Instruct"
ASK = [{"role": "user", "content": "hi"}]
CHAT = {"messages": ASK, "max_tokens": 4}


async def test_keys_guard_every_route_but_health_and_metrics(
    tokenizer: Any, tmp_path: Path
) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("second-key\n\n")
    settings = Settings(api_key=("first-key",), api_key_file=str(key_file))
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        bare = await http.post("/v1/chat/completions", json=CHAT)
        wrong = await http.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer nope"}
        )
        bearer = await http.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer first-key"}
        )
        messages = await http.post("/v1/messages", json={**CHAT, "messages": ASK})
        models = await http.get("/v1/models")
        health, metrics = await http.get("/health"), await http.get("/metrics")

        def official() -> tuple[Any, Any]:
            chat = openai.OpenAI(base_url=f"{url}/v1", api_key="first-key", max_retries=0)
            claude = anthropic.Anthropic(base_url=url, api_key="second-key", max_retries=0)
            return (
                chat.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4),  # type: ignore[arg-type]
                claude.messages.create(model=MODEL, messages=ASK, max_tokens=4),  # type: ignore[arg-type]
            )

        answered = await trio.to_thread.run_sync(official)
    assert bare.status_code == wrong.status_code == 401
    assert bare.json()["error"]["code"] == "invalid_api_key"
    assert "first-key" not in bare.text
    assert bearer.status_code == 200  # on the same keep-alive connection as the 401s
    assert messages.status_code == 401
    assert messages.json()["error"]["type"] == "authentication_error"  # Anthropic's shape
    assert models.status_code == 401
    assert health.status_code == 200 and metrics.status_code == 200
    assert answered[0].choices and answered[1].content


async def test_protect_metrics(tokenizer: Any) -> None:
    app = create_app(Settings(api_key=("k",), protect_metrics=True), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        closed = await http.get("/metrics")
        opened = await http.get("/metrics", headers={"x-api-key": "k"})
    assert closed.status_code == 401 and opened.status_code == 200


async def test_cors_answers_preflights_and_marks_every_answer(tokenizer: Any) -> None:
    settings = Settings(
        allowed_origins=("https://a.example",), allow_credentials=True, api_key=("k",)
    )
    app = create_app(settings, load=fake_loader(tokenizer))
    page = {"origin": "https://a.example"}
    other = {"origin": "https://b.example"}
    asks = {"access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type"}  # fmt: skip
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        preflight = await http.options("/v1/chat/completions", headers={**page, **asks})
        refused = await http.options("/v1/chat/completions", headers={**other, **asks})
        keyed = {**page, "authorization": "Bearer k"}
        body = await http.post("/v1/chat/completions", json=CHAT, headers=keyed)
        streamed = await http.post(
            "/v1/chat/completions", json={**CHAT, "stream": True}, headers=keyed
        )
        elsewhere = await http.post(
            "/v1/chat/completions", json=CHAT, headers={**other, "authorization": "Bearer k"}
        )
    assert preflight.status_code == 200  # no key needed
    assert preflight.headers["access-control-allow-origin"] == "https://a.example"
    assert preflight.headers["access-control-allow-methods"] == "POST"
    assert preflight.headers["access-control-allow-headers"] == "authorization, content-type"
    assert preflight.headers["access-control-allow-credentials"] == "true"
    assert refused.status_code == 400
    for answer in (body, streamed):
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "https://a.example"
    assert "access-control-allow-origin" not in elsewhere.headers


async def test_by_default_every_origin_is_allowed(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        answer = await http.get("/v1/models", headers={"origin": "https://any.example"})
    assert answer.headers["access-control-allow-origin"] == "*"


async def test_version_and_server_info_never_show_the_keys(tokenizer: Any) -> None:
    settings = Settings(
        api_key=("secret-key",), admin_api_key=("admin-key",), model=("SmolLM2-135M-Instruct",)
    )
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        auth = {"authorization": "Bearer secret-key"}
        version = await client.get("/version", headers=auth)
        info = await client.get("/server_info", headers=auth)
        refused = await client.get("/server_info")
    assert version.json()["version"] == importlib.metadata.version("atom")
    assert "secret-key" not in info.text and info.json()["settings"]["api_key"] == ["<hidden>"]
    assert "admin-key" not in info.text  # a key that sees all is no key's to read
    assert info.json()["settings"]["max_num_seqs"] == settings.max_num_seqs
    assert [m["id"] for m in info.json()["models"]] == ["SmolLM2-135M-Instruct"]
    assert refused.status_code == 401


async def test_a_client_request_id_is_the_request_id_and_is_echoed(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        mine = {"x-request-id": "trace-42.a:b_c"}
        answered = await http.post("/v1/chat/completions", json=chat, headers=mine)
        embedded = await http.post("/v1/embeddings", json={"input": "x"}, headers=mine)
        models = await http.get("/v1/models", headers=mine)
        bad = await http.post("/v1/chat/completions", json=chat, headers={"x-request-id": "a b"})
        plain = await http.post("/v1/chat/completions", json=chat)
    assert answered.json()["id"] == "chatcmpl-trace-42.a:b_c"
    assert embedded.json()["id"] == "embd-trace-42.a:b_c"
    for answer in (answered, embedded, models):
        assert answer.headers["x-request-id"] == "trace-42.a:b_c"
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-request-id"
    assert "x-request-id" not in plain.headers and plain.json()["id"].startswith("chatcmpl-")
    ids = {e.event.request_id for e in read_log(log_path) if e.event.type == "request_received"}
    assert "chatcmpl-trace-42.a:b_c" in ids


async def test_a_request_id_in_use_is_a_409(tokenizer: Any) -> None:
    app = create_app(
        Settings(), load=fake_loader(tokenizer, reply="word " * 200, step_delay_s=0.02)
    )
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        answers: list[httpx.Response] = []

        async def ask() -> None:
            answers.append(await http.post("/v1/chat/completions", json=chat,
                                           headers={"x-request-id": "same"}))  # fmt: skip

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            nursery.start_soon(ask)
    assert sorted(a.status_code for a in answers) == [200, 409]
