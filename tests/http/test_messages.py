"""Anthropic's Messages API through the whole server (FakeRunner with a scripted reply,
the real tokenizer, the official `anthropic` client), and its replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project, reparse
from atom.vocabulary.config import Settings
from tests.conftest import FAKE_REPLY, fake_loader, serving, wait_ready
from tests.weather import ANTHROPIC_WEATHER, CALL_REPLY, WEATHER

MODEL = "SmolLM2-135M-Instruct"
ASK = [{"role": "user", "content": "Say hello."}]
TOOL = ANTHROPIC_WEATHER


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)


async def test_a_message_whole_and_streamed_with_usage(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    async with serving(app) as url:
        await wait_ready(app)
        c = client(url)

        def both() -> tuple[Any, Any, list[str]]:
            whole = c.messages.create(model=MODEL, max_tokens=64, messages=ASK)  # type: ignore[arg-type]
            with c.messages.stream(model=MODEL, max_tokens=64, messages=ASK) as s:  # type: ignore[arg-type]
                kinds = [event.type for event in s]
                final = s.get_final_message()
            return whole, final, kinds

        whole, final, kinds = await trio.to_thread.run_sync(both)
        await trio.sleep(0.2)
    assert whole.id.startswith("msg_") and whole.type == "message" and whole.role == "assistant"
    assert [b.type for b in whole.content] == ["text"] and whole.content[0].text == FAKE_REPLY
    assert whole.stop_reason == "end_turn" and whole.stop_sequence is None
    reply_tokens = len(tokenizer.encode(FAKE_REPLY, add_special_tokens=False))
    assert whole.usage.output_tokens == reply_tokens + 1  # and the end-of-sequence token
    assert whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0) > 0
    assert final.content[0].text == FAKE_REPLY and final.stop_reason == "end_turn"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    responses = project(read_log(log_path))
    assert [r.status for r in responses] == [200, 200]
    assert json.loads(responses[0].body)["content"][0]["text"] == FAKE_REPLY
    assert responses[1].content_type == "text/event-stream"
    assert bytes(responses[1].body).startswith(b"event: message_start\ndata: ")


async def test_tool_use_stop_sequences_and_replay_with_the_parser_swapped_in(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.jsonl"
    settings = Settings(tool_call_parser="hermes", request_log=str(log_path))
    app = create_app(settings, load=fake_loader(tokenizer, reply=CALL_REPLY))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        body = {"model": MODEL, "max_tokens": 64, "messages": ASK, "tools": [TOOL]}
        whole = (await http.post("/v1/messages", json=body)).json()
        streamed = await http.post("/v1/messages", json={**body, "stream": True})
        stopped = (
            await http.post("/v1/messages", json={**body, "stop_sequences": [" check"]})
        ).json()
        await trio.sleep(0.2)
    text, call = whole["content"]
    assert text == {"type": "text", "text": "Let me check."}
    assert call["type"] == "tool_use" and call["name"] == "get_weather"
    assert call["input"] == {"city": "Paris"} and whole["stop_reason"] == "tool_use"
    assert stopped["content"] == [{"type": "text", "text": "Let me"}]
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", " check")
    assert b'"type":"input_json_delta"' in streamed.content
    log = list(read_log(log_path))
    sent = [r.body for r in project(log)]
    rebuilt = reparse(log, tokenizer, tool_call_parser="hermes", reasoning_parser=None)
    assert [r.body for r in project(rebuilt)] == sent
    plain = reparse(log, tokenizer, tool_call_parser=None, reasoning_parser=None)
    first = json.loads(project(plain)[0].body)
    assert first["content"] == [{"type": "text", "text": CALL_REPLY}]  # no parser: text
    assert first["stop_reason"] == "end_turn"


async def test_errors_in_anthropic_shape_and_count_tokens(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        no_max = await http.post("/v1/messages", json={"model": MODEL, "messages": ASK})
        wrong = await http.post(
            "/v1/messages", json={"model": "nope", "max_tokens": 4, "messages": ASK}
        )
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                              "data": "iVBORw0KGgo="}}  # fmt: skip
        pictured = await http.post(
            "/v1/messages",
            json={"max_tokens": 4, "messages": [{"role": "user", "content": [image]}]},
        )
        counted = await http.post(
            "/v1/messages/count_tokens", json={"model": MODEL, "messages": ASK, "tools": [TOOL]}
        )
        tokenized = await http.post("/tokenize", json={"messages": ASK, "tools": [WEATHER]})
        served = await http.post("/v1/messages", json={"max_tokens": 4, "messages": ASK})
    assert no_max.status_code == 400
    assert no_max.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": no_max.json()["error"]["message"]},
    }
    assert "max_tokens" in no_max.json()["error"]["message"]
    assert wrong.status_code == 404 and wrong.json()["error"]["type"] == "not_found_error"
    assert pictured.status_code == 400 and "messages.0.content.0" in pictured.text
    assert counted.json() == {"input_tokens": tokenized.json()["count"]}
    assert served.status_code == 200  # the server keeps serving
