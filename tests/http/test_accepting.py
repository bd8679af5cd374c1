"""A burst of queued connections is accepted in one go (atom/http/accepting.py)."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from atom.http import accepting
from atom.http.accepting import DrainingListener, drain_accepts


async def test_queued_connections_come_without_a_checkpoint_after_the_first() -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]  # queued
    listener = DrainingListener(sock)
    try:
        streams = [await listener.accept()]  # waits as trio's does, takes the others
        with trio.testing.assert_no_checkpoints():  # serve_listeners starts them in one pass
            streams += [await listener.accept() for _ in range(4)]
        for i, client in enumerate(clients):
            client.sendall(bytes([i]))
        received = {(await stream.receive_some(1))[0] for stream in streams}
        assert received == set(range(5))
        for stream in streams:
            await stream.aclose()
    finally:
        await listener.aclose()
        for client in clients:
            client.close()


def test_hypercorns_listeners_are_built_draining(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trio, "SocketListener", accepting._SocketListener)
    drain_accepts()
    drain_accepts()  # idempotent
    assert trio.SocketListener is DrainingListener
