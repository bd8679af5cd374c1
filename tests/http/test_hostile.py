"""A hostile but legitimate client against a real hypercorn server (issue 23): limits on
bodies, queues and time, HTTP/1.0, a request log that tells endings apart, and an engine
that no request can kill. FakeRunner stands in for the model, so the limits are cheap to
reach; tests/e2e/test_bad_input.py sends the malformed bodies to the real model."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.model.catalog import ModelSpec
from atom.vocabulary.config import Settings
from atom.vocabulary.events import Envelope, RequestAborted, TokensSampled
from tests.conftest import fake_loader, serving, wait_ready
from tests.raw_http import host_port, raw_exchange

MODEL = "SmolLM2-135M-Instruct"

MSG = [{"role": "user", "content": "hi"}]
SLOW_REPLY = "word " * 60


def _http10_post(path: str, body: dict[str, Any]) -> bytes:
    raw = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.0\r\nContent-Type: application/json\r\n"
    return head.encode() + f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw


def _events_by_request(log_path: Path) -> dict[str, list[str]]:
    by_request: dict[str, list[str]] = {}
    for envelope in read_log(log_path):
        rid = getattr(envelope.event, "request_id", None)
        if rid is not None:
            by_request.setdefault(rid, []).append(envelope.event.type)
    return by_request


async def test_http10_clients_get_a_whole_answer_and_a_closed_connection(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url:
        await wait_ready(app)
        plain = await raw_exchange(url, _http10_post("/v1/chat/completions", {"messages": MSG}))
        stream_body = {"messages": MSG, "stream": True}
        streamed = await raw_exchange(url, _http10_post("/v1/chat/completions", stream_body))
        refused = await raw_exchange(url, _http10_post("/v1/chat/completions", {"n": "x"}))
    head, body = plain.split(b"\r\n\r\n", 1)
    length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0]
    assert length is not None and int(length.group(1)) == len(body)
    assert json.loads(body)["choices"][0]["finish_reason"] == "stop"
    assert streamed.endswith(b"data: [DONE]\n\n")
    assert b" 400 " in refused.split(b"\r\n")[0]


async def test_a_body_that_stops_arriving_is_a_408_and_long_streams_are_not_cut(
    tokenizer: Any,
) -> None:
    load = fake_loader(tokenizer, reply=SLOW_REPLY, step_delay_s=0.03)
    app = create_app(Settings(body_timeout=1.0), load=load)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        started = trio.current_time()
        stream_body = {"messages": MSG, "stream": True, "max_tokens": 60}
        async with client.stream("POST", "/v1/chat/completions", json=stream_body) as r:
            streamed = b"".join([chunk async for chunk in r.aiter_raw()])
        stream_s = trio.current_time() - started
        replies = {}
        for path in ("/v1/chat/completions", "/tokenize"):
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
            cut = head.encode() + b'{"messages": '
            replies[path] = await raw_exchange(url, cut, until_closed=False)
    assert stream_s > 1.0, "the stream must outlive the body timeout for this test to mean much"
    assert streamed.endswith(b"data: [DONE]\n\n")
    for path, reply in replies.items():
        assert b" 408 " in reply.split(b"\r\n")[0], path
        assert b"request_timeout" in reply, path


async def test_a_full_queue_is_a_429_and_a_long_wait_a_503_both_with_retry_after(
    tokenizer: Any,
) -> None:
    load = fake_loader(tokenizer, reply=SLOW_REPLY, step_delay_s=0.05)
    settings = Settings(max_num_seqs=1, max_queued_requests=1, max_queue_wait=0.5)
    app = create_app(settings, load=load)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        batcher = app.engine.generation(None, "test").batcher
        answers: dict[str, httpx.Response] = {}

        async def call(name: str) -> None:
            answers[name] = await client.post(
                "/v1/chat/completions", json={"messages": MSG, "max_tokens": 60}
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "running")
            while batcher.statistics().num_running_requests < 1:
                await trio.sleep(0.01)
            nursery.start_soon(call, "queued")
            while batcher.statistics().num_queued_requests < 1:
                await trio.sleep(0.01)
            await call("refused")
    assert answers["running"].status_code == 200
    refused, queued = answers["refused"], answers["queued"]
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert queued.status_code == 503 and queued.headers["retry-after"] == "1"
    assert queued.json()["error"]["code"] == "queue_timeout"


async def test_lone_surrogates_are_refused_and_the_logged_engine_keeps_serving(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "requests.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    bodies = [
        b'{"messages": [{"role": "user", "content": "hi"}], "user": "\\ud800"}',
        b'{"messages": [{"role": "user", "content": "hi"}], "metadata": {"\\ud800": "v"}}',
        b'{"messages": [{"role": "user", "content": "\\udc00 hi"}]}',
    ]
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        refused = [await client.post("/v1/chat/completions", content=b) for b in bodies]
        ok = await client.post("/v1/chat/completions", json={"messages": MSG})
        health = await client.get("/health")
    assert [r.status_code for r in refused] == [400, 400, 400]
    assert [r.json()["error"]["param"] for r in refused] == [
        "user",
        "metadata.\\ud800",
        "messages.0.content",
    ]
    assert ok.status_code == 200
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert app.engine.logger is not None and app.engine.logger.num_failed == 0


async def test_health_is_false_once_the_engine_has_died(tokenizer: Any) -> None:
    def failing_load(settings: Settings, spec: ModelSpec) -> Any:
        raise RuntimeError("no such weights")

    app = create_app(Settings(), load=failing_load, on_fatal=lambda: None)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        while not app.engine.has_stopped:
            await trio.sleep(0.01)
        health = await client.get("/health")
        chat = await client.post("/v1/chat/completions", json={"messages": MSG})
    assert health.status_code == 500 and health.json()["error"]["code"] == "engine_failed"
    assert chat.status_code == 500


async def test_finished_requests_are_logged_as_finished_not_aborted(
    tokenizer: Any, tmp_path: Path
) -> None:
    """Hypercorn sends http.disconnect after a complete response too; it is no abort."""
    log_path = tmp_path / "requests.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    async with serving(app) as url:
        await wait_ready(app)
        for stream in (False, True, False, True):
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                body = {"messages": MSG, "stream": stream}
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    await r.aread()
        # One more request, so the disconnects of the four above have been handled.
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            await client.post("/v1/chat/completions", json={"messages": MSG})
    by_request = _events_by_request(log_path)
    assert len(by_request) == 5
    for events in by_request.values():
        assert "request_completed" in events
        assert "client_disconnected" not in events and "request_aborted" not in events


async def test_a_stream_cut_by_shutdown_is_logged_as_server_shutdown(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "requests.jsonl"
    load = fake_loader(tokenizer, reply="word " * 2000, step_delay_s=0.02)
    app = create_app(Settings(request_log=str(log_path)), load=load)
    async with trio.open_nursery() as nursery, serving(app, graceful_timeout_s=0.1) as url:
        await wait_ready(app)
        got_first = trio.Event()

        async def stream_until_cut() -> None:
            body = {"prompt": "x", "stream": True, "max_tokens": 1500}
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                try:
                    async with client.stream("POST", "/v1/completions", json=body) as r:
                        async for _ in r.aiter_raw():
                            got_first.set()
                except httpx.HTTPError:
                    pass

        nursery.start_soon(stream_until_cut)
        await got_first.wait()
    aborts = [e.event for e in read_log(log_path) if e.event.type == "request_aborted"]
    assert [a.reason for a in aborts] == ["server_shutdown"]  # type: ignore[attr-defined]


async def test_kv_usage_falls_to_zero_on_an_idle_server_after_aborts(tokenizer: Any) -> None:
    load = fake_loader(tokenizer, reply="word " * 2000, step_delay_s=0.02)
    app = create_app(Settings(enable_prefix_caching=False), load=load)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        body = {"prompt": "x " * 100, "stream": True, "max_tokens": 1500}
        async with client.stream("POST", "/v1/completions", json=body) as r:
            async for _ in r.aiter_raw():
                break
        busy = app.engine.metrics.model(MODEL).kv_cache_usage
        with trio.fail_after(30):  # a deadline for a hang, not a bound on the release time
            while app.engine.metrics.model(MODEL).kv_cache_usage:
                await trio.sleep(0.01)
        metrics = (await client.get("/metrics")).text
    assert busy > 0
    assert re.search(r"^atom:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$", metrics, re.MULTILINE)


async def test_a_client_that_stops_reading_is_aborted_after_the_stall_timeout(
    tokenizer: Any, tmp_path: Path
) -> None:
    """16 choices of 2,000 tokens are ~9 MB of SSE: far more than the socket buffers hold
    (~3 MB on loopback here), so the server's send blocks once the client stops reading."""
    log_path = tmp_path / "requests.jsonl"
    load = fake_loader(tokenizer, reply="word " * 2000, max_model_len=4096)
    settings = Settings(stream_stall_timeout=1.0, request_log=str(log_path))
    app = create_app(settings, load=load)
    envelopes: list[Envelope] = []
    app.engine.bus.subscribe(envelopes.append)
    body = json.dumps({"messages": MSG, "stream": True, "n": 16, "max_tokens": 2000}).encode()
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    request = head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect(host_port(url))
        async with trio.SocketStream(sock) as stalled:
            await stalled.send_all(request)  # and never reads
            with trio.fail_after(60):  # a deadline for a hang, not a bound on the time
                while not any(isinstance(e.event, RequestAborted) for e in envelopes):
                    await trio.sleep(0.05)
            batcher = app.engine.generation(None, "test").batcher
            while batcher.statistics().num_running_requests:
                await trio.sleep(0.01)
            after = await client.post("/v1/chat/completions", json={"messages": MSG})
    (aborted,) = [e.event for e in envelopes if isinstance(e.event, RequestAborted)]
    assert aborted.reason == "stream_stalled"
    sampled = [e for e in envelopes if isinstance(e.event, TokensSampled)]
    assert len(sampled) < 16 * 2000  # it stopped long before the end
    assert after.status_code == 200
    logged = _events_by_request(log_path)[aborted.request_id]
    assert "request_aborted" in logged and "request_completed" not in logged


async def test_a_request_log_on_a_full_disk_is_counted_and_the_server_keeps_serving(
    tokenizer: Any,
) -> None:
    """/dev/full fails every write with ENOSPC, as a full disk does: the policy is to
    keep serving without the log, count what was lost and say so (docs/reliability.md)."""
    app = create_app(Settings(request_log="/dev/full"), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        answers = [
            await client.post("/v1/chat/completions", json={"messages": MSG, "stream": stream})
            for stream in (False, True, False)
        ]
        metrics = (await client.get("/metrics")).text
    assert [r.status_code for r in answers] == [200, 200, 200]
    assert answers[1].text.endswith("data: [DONE]\n\n")
    lost = re.search(r"^atom:request_log_failures_total (\d+)", metrics, re.MULTILINE)
    assert lost is not None and int(lost.group(1)) > 0


async def test_a_served_name_cannot_forge_metric_series(tokenizer: Any) -> None:
    """A name holding `"` went into /metrics raw: `x"} 1` ended its label and made a series
    of its own. Label values are escaped now, and control characters refused."""
    name = 'we"ird\\} 1\\n'  # a quote, backslashes, a brace: all legal in a name
    app = create_app(Settings(served_model_name=(name,)), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        await http.post("/v1/chat/completions", json={"model": name, "messages": MSG})
        metrics = (await http.get("/metrics")).text
    samples = [line for line in metrics.splitlines() if line and not line.startswith("#")]
    escaped = 'model_name="we\\"ird\\\\} 1\\\\n"'
    assert any(escaped in line for line in samples)
    series = re.compile(r'[a-z0-9_:]+(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? \S+')
    assert [line for line in samples if not series.fullmatch(line)] == []
    with pytest.raises(ValueError, match="control characters"):
        create_app(Settings(served_model_name=("a\nb",)), load=fake_loader(tokenizer))
