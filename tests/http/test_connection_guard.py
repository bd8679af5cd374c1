"""An error inside one connection's protocol code closes that connection; the server
keeps serving (atom/http/connection_guard.py). Without the guard, hypercorn's trio
worker ends the process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader
from tests.e2e.conftest import free_port


@contextmanager
def guard_app(guard: bool) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    env = {**os.environ, "GUARD": "1" if guard else "0"}
    command = [sys.executable, "-m", "hypercorn", "-k", "trio", "-w", "0"]
    proc = subprocess.Popen(
        [*command, "-b", f"127.0.0.1:{port}", "tests.http.guard_app:app"],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                httpx.get(url)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield proc, url
    finally:
        proc.kill()
        proc.wait(timeout=30)


def boom(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /BOOM HTTP/1.1\r\nhost: x\r\n\r\n")
        s.settimeout(10)
        assert s.recv(100) == b""  # closed, no answer


@pytest.mark.parametrize("guard", [True, False])
def test_a_failing_connection_does_not_end_the_server(guard: bool) -> None:
    with guard_app(guard) as (proc, url):
        boom(int(url.rsplit(":", 1)[1]))
        if guard:
            assert httpx.get(url).text == "hello"
            assert proc.poll() is None
        else:  # what the guard prevents
            assert proc.wait(timeout=10) != 0


def test_create_app_installs_the_guard(tokenizer: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from hypercorn.trio.tcp_server import TCPServer

    unguarded = getattr(TCPServer.run, "__wrapped__", TCPServer.run)
    monkeypatch.setattr(TCPServer, "run", unguarded)
    assert not getattr(TCPServer.run, "_atom_guarded", False)
    create_app(Settings(), load=fake_loader(tokenizer))
    assert getattr(TCPServer.run, "_atom_guarded", False)
