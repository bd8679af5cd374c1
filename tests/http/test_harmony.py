"""gpt-oss's harmony format through the whole chat path (FakeRunner writing harmony
text with the real tokenizer): both parsers chained, streamed and whole, and the
special tokens kept in the text."""

from __future__ import annotations

import json
from typing import Any

import httpx

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready
from tests.weather import WEATHER

REPLY = (
    "<|channel|>analysis<|message|>The user wants the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary<|message|>Let me look.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}'
)
ASK = {
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [WEATHER],
    "temperature": 0,
}


async def test_harmony_reasoning_preamble_and_call_whole_and_streamed(tokenizer: Any) -> None:
    settings = Settings(
        model=("SmolLM2-135M-Instruct",), reasoning_parser="openai", tool_call_parser="openai"
    )
    served = create_app(settings, load=fake_loader(tokenizer, reply=REPLY))
    async with serving(served) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(served)
        whole = (await http.post("/v1/chat/completions", json=ASK)).json()
        rendered = (await http.post("/v1/chat/completions/render", json=ASK)).json()
        async with http.stream("POST", "/v1/chat/completions", json={**ASK, "stream": True}) as r:
            deltas = [
                json.loads(line[6:])["choices"][0]["delta"]
                async for line in r.aiter_lines()
                if line.startswith("data: {")
            ]
    choice = whole["choices"][0]
    message = choice["message"]
    assert message["reasoning_content"] == "The user wants the weather."
    assert message["content"] == "Let me look."  # the recipient-less commentary
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert choice["finish_reason"] == "tool_calls"
    assert rendered["sampling_params"]["skip_special_tokens"] is False  # markers stay text
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == message["content"]
    streamed_args = "".join(
        c["function"]["arguments"] for d in deltas for c in d.get("tool_calls") or []
    )
    assert streamed_args == call["function"]["arguments"]
