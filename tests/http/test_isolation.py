"""A fault inside one request's own work ends that request with an error and nothing
else: the Batcher, the other requests and the server carry on (issue 20)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import trio

from atom.http.app import create_app
from atom.model.catalog import ModelSpec
from atom.model.fake_runner import FakeRunner
from atom.model.runner import Runtime
from atom.text import parsers
from atom.text.tools.base import Scan
from atom.vocabulary.config import Settings
from tests.conftest import serving, wait_ready
from tests.weather import WEATHER

MODEL = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class Exploding:
    """A tool-call parser with a bug: it raises on the text "BOOM"."""

    def scan(self, text: str, *, is_final: bool) -> Scan:
        if "BOOM" in text:
            raise RuntimeError("a parser bug")
        return Scan(content=text)


def ask(word: str, *, stream: bool) -> dict[str, Any]:
    message = {"role": "user", "content": f"say {word}"}
    return {"messages": [message], "tools": [WEATHER], "stream": stream, "max_tokens": 40}


def app(tokenizer: Any) -> Any:
    boom = tuple(tokenizer.encode(" boom", add_special_tokens=False))

    def script(prompt_ids: tuple[int, ...], params: Any, seed: int) -> list[int]:
        """BOOM for a prompt that asks for it, a long harmless reply for the others."""
        asked = any(prompt_ids[i : i + len(boom)] == boom for i in range(len(prompt_ids)))
        text = "all is well " * 6 if not asked else "fine so far, then BOOM"
        return tokenizer.encode(text, add_special_tokens=False)

    def load(settings: Settings, spec: ModelSpec) -> Runtime:
        runner = FakeRunner(eos_token_id=tokenizer.eos_token_id, script=script, step_delay_s=0.01)
        return Runtime(runner=runner, tokenizer=tokenizer, max_model_len=2048)

    settings = Settings(model=(MODEL,), tool_call_parser="hermes")  # made to explode
    return create_app(settings, load=load)


async def streamed(http: httpx.AsyncClient, body: dict[str, Any]) -> list[Any]:
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        return [
            line[6:] if line == "data: [DONE]" else json.loads(line[6:])
            async for line in r.aiter_lines()
            if line.startswith("data: ")
        ]


async def test_a_fault_in_one_requests_parser_ends_that_request_alone(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(parsers.TOOL_PARSERS, "hermes", lambda tools: Exploding())
    served = app(tokenizer)
    seen: list[Any] = []
    served.engine.bus.subscribe(seen.append)
    streams: dict[str, list[Any]] = {}
    async with serving(served) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(served)

        async def run(key: str, word: str) -> None:
            streams[key] = await streamed(http, ask(word, stream=True))

        async with trio.open_nursery() as nursery:
            for key, word in [("a", "hi"), ("b", "hello"), ("boom", "boom"), ("c", "hey")]:
                nursery.start_soon(run, key, word)
        wholes = [
            await http.post("/v1/chat/completions", json=ask("boom", stream=False))
            for _ in range(3)
        ]
        after = await http.post("/v1/chat/completions", json=ask("hi", stream=False))
        stats = served.engine.models.registry.cores[MODEL].batcher.statistics()
    for key in ("a", "b", "c"):
        text = "".join(f["choices"][0]["delta"].get("content") or "" for f in streams[key][:-1])
        assert text == "all is well " * 6 and streams[key][-1] == "[DONE]"
    assert streams["boom"][-1] == "[DONE]"
    assert "internal error" in streams["boom"][-2]["error"]["message"]
    for whole in wholes:
        assert whole.status_code == 500 and whole.json()["error"]["code"] == "engine_failed"
    assert after.status_code == 200  # the server carries on
    assert stats.num_running_requests == stats.num_queued_requests == stats.num_runner_seqs == 0
    failed = {e.event.request_id for e in seen if e.event.type == "request_failed"}
    completed = {e.event.request_id for e in seen if e.event.type == "request_completed"}
    assert len(failed) == 4  # the BOOM requests, and nothing else
    assert not failed & completed  # a failed request never also ends as complete
    assert len(completed) == 4
