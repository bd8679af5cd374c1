"""Abort on disconnect with the real model: 20 dropped streams are released at the next
step boundary and leave no trace. bench/soak.py keeps the release time as a figure."""

from __future__ import annotations

import httpx
import pytest
import trio

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from atom.vocabulary.events import Envelope
from tests.conftest import serving, steps_before_release, wait_ready
from tests.e2e.conftest import CAPITAL

MODEL = "SmolLM2-135M-Instruct"

pytestmark = pytest.mark.slow
Q = [{"role": "user", "content": "Tell me a very long story about the sea."}]


def running_gauge(metrics_text: str) -> int:
    line = next(x for x in metrics_text.splitlines() if x.startswith("atom:num_requests_running"))
    return int(line.rsplit(" ", 1)[1])


async def test_twenty_dropped_streams_are_freed_at_the_next_step() -> None:
    app = create_app(Settings(), on_fatal=lambda: None)
    envelopes: list[Envelope] = []
    app.engine.bus.subscribe(envelopes.append)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as client:
        await wait_ready(app)
        batcher = app.engine.generation(None, "test").batcher
        all_streaming = trio.Event()
        num_streaming = 0

        async def stream_then_drop() -> None:
            nonlocal num_streaming
            body = {"messages": Q, "max_tokens": 1000, "ignore_eos": True, "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                num_content = 0
                async for line in r.aiter_lines():
                    num_content += '"content":"' in line
                    if num_content == 3:  # role chunk and two tokens: decoding now
                        break
                num_streaming += 1
                if num_streaming == 20:
                    all_streaming.set()
                await all_streaming.wait()

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(stream_then_drop)
        with trio.fail_after(60):  # a leak fails loudly instead of hanging (no speed bound)
            while (
                batcher.statistics().num_running_requests
                or app.engine.metrics.model(MODEL).num_running
            ):
                await trio.sleep(0.005)
        stats = batcher.statistics()
        gauge = running_gauge((await client.get("/metrics")).text)
        q = [{"role": "user", "content": CAPITAL}]
        ok = await client.post("/v1/chat/completions", json={"messages": q, "temperature": 0})
    steps = steps_before_release(envelopes)
    assert len(steps) == 20 and max(steps.values()) <= 1, steps
    assert (stats.num_running_seqs, stats.num_queued_requests, stats.num_runner_seqs) == (0, 0, 0)
    assert gauge == 0
    assert "Paris" in ok.json()["choices"][0]["message"]["content"]
