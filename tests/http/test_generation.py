"""The whole actor path behind a real hypercorn server, with a FakeRunner and the real tokenizer."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project
from atom.model.catalog import ModelSpec
from atom.model.fake_runner import FakeRunner
from atom.model.runner import Runtime
from atom.vocabulary.config import Settings
from atom.vocabulary.events import Envelope
from tests.conftest import FAKE_REPLY, fake_loader, serving, steps_before_release, wait_ready

MODEL = "SmolLM2-135M-Instruct"

CHAT = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def sse_payloads(raw: bytes) -> list[Any]:
    frames = [f for f in raw.decode().split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    return [f[6:] if f == "data: [DONE]" else json.loads(f[6:]) for f in frames]


async def test_stream_and_body_agree_and_replay_is_byte_identical(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "requests.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    sent: list[bytes] = []
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        body = await client.post("/v1/chat/completions", json={**CHAT, "n": 2})
        sent.append(body.content)
        stream_req = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        async with client.stream("POST", "/v1/chat/completions", json=stream_req) as r:
            sent.append(b"".join([chunk async for chunk in r.aiter_raw()]))
        stop_req = {"prompt": "x", "stop": [", this"], "stream": True}
        async with client.stream("POST", "/v1/completions", json=stop_req) as r:
            sent.append(b"".join([chunk async for chunk in r.aiter_raw()]))
    doc = json.loads(sent[0])
    assert [c["message"]["content"] for c in doc["choices"]] == [FAKE_REPLY, FAKE_REPLY]
    assert doc["usage"]["completion_tokens"] == 2 * (len(tokenizer.encode(FAKE_REPLY)) + 1)
    chunks = sse_payloads(sent[1])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-2])
    assert text == FAKE_REPLY
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["total_tokens"] > 0
    assert chunks[-1] == "[DONE]"
    stopped = sse_payloads(sent[2])
    assert "".join(c["choices"][0]["text"] for c in stopped[:-1]) == "Hello world"
    assert stopped[-2]["choices"][0]["finish_reason"] == "stop"
    replayed = project(read_log(log_path))
    assert [bytes(r.body) for r in replayed] == sent


@pytest.mark.parametrize("overlap", [False, True])
async def test_disconnected_streams_are_released_at_the_next_step(
    tokenizer: Any, overlap: bool
) -> None:
    """With overlapped steps (--async-scheduling) too: the step planned ahead is the one
    under way, and a release waits for no step after it."""
    load = fake_loader(tokenizer, reply="word " * 2000, step_delay_s=0.02)
    app = create_app(Settings(async_scheduling=overlap), load=load)
    envelopes: list[Envelope] = []
    app.engine.bus.subscribe(envelopes.append)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)

        async def open_and_drop() -> None:
            req = {"prompt": "x", "stream": True, "max_tokens": 1500}
            async with client.stream("POST", "/v1/completions", json=req) as r:
                async for _ in r.aiter_raw():
                    break

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(open_and_drop)
        batcher = app.engine.generation(None, "test").batcher
        with trio.fail_after(60):  # a leak fails loudly instead of hanging (no speed bound)
            while (
                batcher.statistics().num_running_requests
                or app.engine.metrics.model(MODEL).num_running
                or batcher.statistics().num_runner_seqs  # (after the step ahead, if any)
            ):
                await trio.sleep(0.005)
        steps = steps_before_release(envelopes)
        assert len(steps) == 20 and max(steps.values()) <= 1, steps
        ok = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
    assert ok.status_code == 200
    assert ok.json()["choices"][0]["text"] == "word word word"


async def test_health_is_503_until_the_model_is_loaded(tokenizer: Any) -> None:
    loaded = trio.Event()
    inner = fake_loader(tokenizer)
    token = trio.lowlevel.current_trio_token()  # the load runs on the engine's device thread

    def slow_load(settings: Settings, spec: ModelSpec) -> Any:
        trio.from_thread.run(loaded.wait, trio_token=token)
        return inner(settings, spec)

    app = create_app(Settings(), load=slow_load, on_fatal=lambda: None)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        early = await client.get("/health")
        early_chat = await client.post("/v1/chat/completions", json=CHAT)
        loaded.set()
        await wait_ready(app)
        late = await client.get("/health")
    assert early.status_code == 503 and early.json()["error"]["code"] == "model_loading"
    assert early_chat.status_code == 503
    assert late.status_code == 200


async def test_a_dying_batcher_fails_requests_and_stops_the_process(tokenizer: Any) -> None:
    fatal: list[bool] = []

    class Exploding(FakeRunner):
        def step(self, plan):  # type: ignore[no-untyped-def]
            raise RuntimeError("device lost")

    def load(settings: Settings, spec: ModelSpec) -> Runtime:
        return Runtime(runner=Exploding(eos_token_id=2), tokenizer=tokenizer, max_model_len=2048)

    settings = Settings(model=("SmolLM2-135M-Instruct",))
    app = create_app(settings, load=load, on_fatal=lambda: fatal.append(True))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "engine_failed"
    assert fatal == [True]


async def test_overload_is_429(tokenizer: Any) -> None:
    load = fake_loader(tokenizer, reply="word " * 100, step_delay_s=0.05)
    app = create_app(Settings(max_num_seqs=1, max_queued_requests=1), load=load)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        statuses: list[int] = []

        async def call() -> None:
            r = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 5})
            statuses.append(r.status_code)

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(call)
    assert 429 in statuses and 200 in statuses
    assert set(statuses) == {200, 429}


async def test_a_drain_refuses_new_requests_and_fails_what_outlives_the_timeout(
    tokenizer: Any, tmp_path: Path
) -> None:
    drained: list[bool] = []
    log_path = tmp_path / "log.jsonl"
    settings = Settings(model=(MODEL,), shutdown_timeout=0.5, request_log=str(log_path))
    load = fake_loader(tokenizer, reply="word " * 500, step_delay_s=0.05)
    app = create_app(settings, load=load, on_drained=lambda: drained.append(True))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        frames: list[Any] = []

        async def stream() -> None:
            body = {**CHAT, "max_tokens": 400, "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                frames.extend(sse_payloads(b"".join([c async for c in r.aiter_raw()])))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream)
            while not app.engine._open:
                await trio.sleep(0.01)
            nursery.start_soon(app.engine.drain)
            await trio.sleep(0.1)
            refused = await client.post("/v1/chat/completions", json=CHAT)
            health = await client.get("/health")
        while not drained:
            await trio.sleep(0.01)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "server_draining"
    assert health.status_code == 503
    assert frames[-1] == "[DONE]" and "shutting down" in frames[-2]["error"]["message"]
    assert drained == [True]
    failed = [e.event for e in read_log(log_path) if e.event.type == "request_failed"]
    assert len(failed) == 1  # logged before the process would exit


async def test_a_hung_model_step_fails_the_requests_and_stops_the_process(
    tokenizer: Any,
) -> None:
    release = threading.Event()
    fatal: list[bool] = []

    class Hanging(FakeRunner):
        def step(self, plan):  # type: ignore[no-untyped-def]
            release.wait(30)  # a kernel that never returns, until the test lets it
            return super().step(plan)

    def load(settings: Settings, spec: ModelSpec) -> Runtime:
        return Runtime(runner=Hanging(eos_token_id=2), tokenizer=tokenizer, max_model_len=2048)

    settings = Settings(model=(MODEL,), watchdog_timeout=0.5)
    app = create_app(settings, load=load, on_fatal=lambda: fatal.append(True))
    try:
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            await wait_ready(app)
            whole = await client.post("/v1/chat/completions", json=CHAT)
            release.set()  # so the server can stop: a step is never cut half way
    finally:
        release.set()
    assert whole.status_code == 500 and "model step ran for more than 0.5 s" in whole.text
    assert fatal == [True]


async def test_a_deep_health_check_runs_every_model(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))  # chat and embeddings
    seen: list[Any] = []
    app.engine.bus.subscribe(seen.append)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        deep = await client.get("/health", params={"deep": "1"})
        sglang = await client.get("/health_generate")
        metrics = (await client.get("/metrics")).text
    assert deep.status_code == 200 and sglang.status_code == 200
    sampled = {e.event.request_id for e in seen if e.event.type == "tokens_sampled"}
    assert len(sampled) == 2 and all(rid.startswith("health-") for rid in sampled)
    assert f'atom:generation_tokens_total{{model_name="{MODEL}"}} 0' in metrics  # not traffic


async def test_idle_streams_send_keep_alives_that_replay_byte_identical(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.jsonl"
    settings = Settings(model=(MODEL,), sse_ping_interval=0.05, request_log=str(log_path))
    app = create_app(settings, load=fake_loader(tokenizer, reply="a b c", step_delay_s=0.25))
    sent: list[bytes] = []
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        for path, body in (
            ("/v1/chat/completions", {**CHAT, "stream": True}),
            ("/v1/messages", {"max_tokens": 8, "stream": True,
                              "messages": [{"role": "user", "content": "hi"}]}),
        ):  # fmt: skip
            async with client.stream("POST", path, json=body) as r:
                sent.append(b"".join([chunk async for chunk in r.aiter_raw()]))
        whole = await client.post("/v1/chat/completions", json=CHAT)
    chat_stream, messages_stream = sent
    assert chat_stream.count(b": ping\n\n") >= 2 and messages_stream.count(b"event: ping") >= 3
    text = "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in sse_payloads(chat_stream.replace(b": ping\n\n", b""))[:-1]
        if c["choices"]
    )
    assert text == "a b c"
    assert b"ping" not in whole.content  # bodies are never pinged
    replayed = [bytes(r.body) for r in project(read_log(log_path))]
    assert replayed[:2] == sent


async def test_a_request_sends_once_a_step_whatever_its_choices(tokenizer: Any) -> None:
    """Every choice's tokens of one step leave in one write (the request wakes once a
    step, not once a token a choice); the bytes are what the events render."""
    app = create_app(Settings(), load=fake_loader(tokenizer))
    writes: list[bytes] = []

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        async def counted(message: Any) -> None:
            if scope.get("path") == "/v1/chat/completions" and "body" in message:
                writes.append(message["body"])
            await send(message)

        await app(scope, receive, counted)

    steps: list[Envelope] = []

    def keep_steps(envelope: Envelope) -> None:
        if envelope.event.type == "engine_stepped":
            steps.append(envelope)

    app.engine.bus.subscribe(keep_steps)
    async with serving(counting) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        stream = {**CHAT, "n": 3, "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=stream) as r:
            raw = b"".join([chunk async for chunk in r.aiter_raw()])
    texts = ["", "", ""]
    for chunk in sse_payloads(raw)[:-1]:
        for choice in chunk["choices"]:
            texts[choice["index"]] += choice["delta"].get("content") or ""
    assert texts == [FAKE_REPLY] * 3
    # a write a step that had output, the opening role chunks and the final [DONE]:
    # fewer than one a token of one choice (three a step when each choice wrote its own)
    assert len(writes) <= len(steps) + 2 < 2 * len(tokenizer.encode(FAKE_REPLY))
    assert b"".join(writes) == raw


async def test_tokens_sampled_while_a_chunk_is_written_go_out_together(
    tokenizer: Any, tmp_path: Path
) -> None:
    """A client slower than the Batcher: each write takes 0.2 s, longer than the whole
    reply takes to sample. The role chunk's write holds the first tokens back, and
    everything sampled meanwhile leaves as one content chunk after it, not as a backlog
    of one chunk per wake; the log replays the bytes sent."""
    log_path = tmp_path / "requests.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    writes: list[bytes] = []

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        async def written_slowly(message: Any) -> None:
            if scope.get("path") == "/v1/chat/completions" and "body" in message:
                writes.append(message["body"])
                await trio.sleep(0.2)
            await send(message)

        await app(scope, receive, written_slowly)

    async with serving(slow) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        async with client.stream(
            "POST", "/v1/chat/completions", json={**CHAT, "stream": True}
        ) as r:
            raw = b"".join([chunk async for chunk in r.aiter_raw()])
    contents = [
        c["choices"][0]["delta"]["content"]
        for c in sse_payloads(raw)[1:-1]
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]
    assert contents == [FAKE_REPLY]
    assert len(writes) == 3  # the role; the reply and its finish; the usage and [DONE]
    assert [bytes(r.body) for r in project(read_log(log_path))] == [raw]


async def test_a_stream_interval_gathers_tokens_into_one_chunk_that_replays(
    tokenizer: Any, tmp_path: Path
) -> None:
    """`--stream-interval 4`: after the first token, a chunk carries 4 tokens or more
    (deltas joined), not one; the log records the joined deltas, so replay gives the
    bytes sent."""
    log_path = tmp_path / "requests.jsonl"
    settings = Settings(request_log=str(log_path), stream_interval=4)
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        ask = {**CHAT, "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=ask) as r:
            raw = b"".join([chunk async for chunk in r.aiter_raw()])
    deltas = [c["choices"][0] for c in sse_payloads(raw)[1:-1] if c["choices"]]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == FAKE_REPLY
    num_tokens = len(tokenizer.encode(FAKE_REPLY))  # and the end of the answer
    assert 2 < len(deltas) <= 1 + -(-(num_tokens - 1) // 4) + 1 < num_tokens
    assert [bytes(r.body) for r in project(read_log(log_path))] == [raw]
