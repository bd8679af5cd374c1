"""Projection replay of the live request log rebuilds the bytes the clients received."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
import trio

from atom.events import ClientDisconnected, RequestAborted
from atom.request_log import read_log
from tests.e2e.conftest import Server
from tests.replay_mix import send_mix

pytestmark = pytest.mark.slow


async def test_replay_of_the_live_log_is_byte_identical(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        received = await send_mix(client)
    await trio.sleep(0.5)  # the logger flushes after each burst
    command = [sys.executable, "-m", "atom.cli", "replay", str(server.log_path), "--json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    replayed = {r["request_id"]: r for r in map(json.loads, out.splitlines())}
    dropped = list(received)[-1]
    for request_id, raw in received.items():
        body = replayed[request_id]["body"].encode()
        if request_id == dropped:
            assert body.startswith(raw) and not replayed[request_id]["is_complete"]
        else:
            assert body == raw
            assert replayed[request_id]["status"] == 200
    events = [e.event for e in read_log(server.log_path)]
    kinds = {type(e) for e in events if getattr(e, "request_id", None) == dropped}
    assert {ClientDisconnected, RequestAborted} <= kinds
