"""A real `hypercorn -k trio atom.http:app` process serving the real default model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest


@dataclass(frozen=True)
class Server:
    url: str
    log_path: Path
    model: str

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0)

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a non-streaming chat completion that must succeed; its JSON body."""
        r = httpx.post(f"{self.url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(log_path: Path, **env: str) -> Iterator[Server]:
    """A server process with the given `ATOM_*` settings, healthy, stopped afterwards."""
    port = free_port()
    env = {
        **os.environ,
        "ATOM_REQUEST_LOG": str(log_path),
        "ATOM_LOG_LEVEL": "warning",
        **env,
    }
    command = [sys.executable, "-m", "hypercorn", "-k", "trio", "-b", f"127.0.0.1:{port}"]
    proc = subprocess.Popen([*command, "atom.http:app"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        # Room for a cold start on a busy machine: a kernel build (up to ~250 s) and
        # the GGUF's dequantization (~60 s) when make setup did not do them first.
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, "the server exited during start-up"
            assert time.monotonic() < deadline, "the server did not become healthy"
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield Server(url=url, log_path=log_path, model="SmolLM2-135M-Instruct")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# A question the default model answers "The capital of France is Paris." by a clear
# margin in every weight form. Not "What is the capital of France?": its first token
# is a near tie ("The" -1.88, "L" -1.97, "La" -2.27 in float32), which a last-bit change
# in a kernel turns into "La femme de France, ..." until max_tokens.
CAPITAL = "Name the capital of France."

FAULTY_APP = "tests.e2e.faulty_app:app"  # its model step hangs or raises on a flag file


@contextmanager
def server_process(
    log_path: Path, app: str = "atom.http:app", **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`hypercorn -k trio -w 0 <app>` with these `ATOM_*` settings, once healthy."""
    port = free_port()
    env = {
        **os.environ,
        "ATOM_MODEL": "SmolLM2-135M-Instruct",
        "ATOM_REQUEST_LOG": str(log_path),
        "ATOM_LOG_LEVEL": "warning",
        **env,
    }
    command = [sys.executable, "-m", "hypercorn", "-k", "trio", "-w", "0"]
    proc = subprocess.Popen([*command, "-b", f"127.0.0.1:{port}", app], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "no healthy server"
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("log") / "requests.jsonl") as started:
        yield started
