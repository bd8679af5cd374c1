"""`--kv-events-config`: the server publishes its KV-cache changes over ZMQ in vLLM's
array form (atom/actors/kv_events.py); a subscriber reads what a prompt stored, what a
reset removed, and replays from a sequence number."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgpack
import pytest
import trio
import zmq

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready
from tests.e2e.conftest import free_port

MODEL = "SmolLM2-135M-Instruct"
PROMPT = list(range(1000, 1040))  # 40 tokens: two full blocks of 16 before the last token


def test_a_config_that_is_not_vllms_names_the_setting() -> None:
    with pytest.raises(ValueError, match=r"ATOM_KV_EVENTS_CONFIG.*unknown fields"):
        Settings(kv_events_config='{"enable_kv_cache_events": true, "port": 5557}')
    off = Settings(kv_events_config='{"enable_kv_cache_events": false, "publisher": "zmq"}')
    assert off.kv_events is None


async def test_stored_blocks_a_reset_and_a_replay_reach_a_subscriber(tokenizer: Any) -> None:
    port, replay_port = free_port(), free_port()
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "topic": "kv",
        "endpoint": f"tcp://*:{port}",
        "replay_endpoint": f"tcp://*:{replay_port}",
    }
    settings = Settings(kv_events_config=json.dumps(config), enable_admin_routes=True)
    app = create_app(settings, load=fake_loader(tokenizer))
    context = zmq.Context.instance()
    subscriber = context.socket(zmq.SUB)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"kv")
    subscriber.connect(f"tcp://127.0.0.1:{port}")
    try:
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            await wait_ready(app)
            await trio.sleep(0.3)  # the subscription reaches the publisher first
            body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2}
            assert (await http.post("/v1/completions", json=body)).status_code == 200
            stored = await _next_batch(subscriber)
            assert (await http.post("/reset_prefix_cache")).status_code == 200
            removed = await _next_batch(subscriber)
            replayed = await trio.to_thread.run_sync(_replay, context, replay_port, 0)
    finally:
        subscriber.close(linger=0)
    (topic, seq, (ts, events, rank)) = stored
    first = events[0]
    assert (topic, seq, rank) == (b"kv", 0, 0) and ts > 0
    assert first[0] == "BlockStored" and len(first[1]) == 2 and first[2] is None
    assert first[3:] == [PROMPT[:32], 16, None, "CPU"]
    assert all(0 <= h < 2**64 for h in first[1])
    assert removed[1] == 1 and removed[2][1][-1][0] == "BlockRemoved"
    assert set(first[1]) <= {h for e in removed[2][1] for h in e[1]}
    assert [seq for seq, _ in replayed] == [0, 1]


async def _next_batch(subscriber: Any) -> tuple[bytes, int, Any]:
    with trio.fail_after(10):
        while True:
            try:
                topic, seq, payload = subscriber.recv_multipart(zmq.NOBLOCK)
                return topic, int.from_bytes(seq, "big"), msgpack.unpackb(payload)
            except zmq.Again:
                await trio.sleep(0.02)


def _replay(context: Any, port: int, start: int) -> list[tuple[int, Any]]:
    """Every kept batch from `start`, until the end marker."""
    asker = context.socket(zmq.DEALER)
    asker.connect(f"tcp://127.0.0.1:{port}")
    asker.setsockopt(zmq.RCVTIMEO, 5000)
    try:
        asker.send_multipart((b"", start.to_bytes(8, "big")))
        out = []
        while True:
            _, seq, payload = asker.recv_multipart()
            number = int.from_bytes(seq, "big", signed=True)
            if number == -1:
                return out
            out.append((number, msgpack.unpackb(payload)))
    finally:
        asker.close(linger=0)
