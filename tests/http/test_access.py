"""API keys and CORS over real HTTP (FakeRunner, the real tokenizer, both official
clients)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import trio

from atom.config import Settings
from atom.http.app import create_app
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
