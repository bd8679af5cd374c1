"""`atom serve --data-parallel-size 2`: two replicas (FakeRunner, `tests/e2e/scaled.py`)
behind the real sglang-router, driven with the official client.

One launcher serves the first tests and is then drained; the last test kills a
launcher with SIGKILL and finds no replica or router left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import free_port

pytestmark = pytest.mark.slow
REPLY = "two replicas answer alike"
MODEL = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Launcher:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def events(self, name: str) -> list[dict[str, Any]]:
        """The launcher's records named `name`. Its replicas share its stderr, so one
        process's line can land inside another's: each record is read on its own."""
        text = self.log.read_text(errors="replace").replace("}{", "}\n{")
        records = []
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # hypercorn's and the router's own lines, or a torn one
        return [r for r in records if isinstance(r, dict) and r.get("event") == name]

    def pids(self) -> list[int]:
        """The replicas' and the router's: the launcher's children."""
        found = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(self.process.pid)], capture_output=True, text=True
        )
        return [int(pid) for pid in found.stdout.split()]

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0)


def launch(tmp: Path, policy: str) -> Launcher:
    port, log = free_port(), tmp / "launcher.log"
    env = {**os.environ, "ATOM_DATA_PARALLEL_SIZE": "2", "ATOM_ROUTER_POLICY": policy,
           "FAKE_REPLY": REPLY, "ATOM_LOG_LEVEL": "info"}  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.scaled", str(port)], env=env, stderr=out
        )
    launcher = Launcher(process=process, url=f"http://127.0.0.1:{port}", log=log)
    deadline = time.monotonic() + 120
    try:
        while not launcher.events("serving"):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the launcher did not start serving"
            time.sleep(0.2)
    except BaseException:
        process.terminate()  # it drains its replicas and router
        process.wait(timeout=60)
        raise
    return launcher


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    started = launch(tmp_path_factory.mktemp("scaled"), "round_robin")
    yield started
    if started.process.poll() is None:
        started.process.kill()
        started.process.wait()


def served(url: str) -> int:
    """Requests a replica finished, from its own /metrics."""
    text = httpx.get(f"{url}/metrics").text
    return sum(int(float(n)) for n in re.findall(r"^atom:request_success_total\{.*\} (\S+)$",
                                                 text, re.M))  # fmt: skip


def test_the_router_serves_the_api_from_every_replica(launcher: Launcher) -> None:
    client = launcher.client()
    for _ in range(4):
        chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
        assert chat.choices[0].message.content == REPLY
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert (
        "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == REPLY
    )
    completion = client.completions.create(model=MODEL, prompt="hi", max_tokens=32)
    assert completion.choices[0].text == REPLY
    embedded = client.embeddings.create(model="all-MiniLM-L6-v2", input=["hi", "there"])
    assert [e.index for e in embedded.data] == [0, 1]  # (the FakePoolingRunner's vectors)
    assert embedded.data[0].embedding and embedded.model == "all-MiniLM-L6-v2"
    (serving,) = launcher.events("serving")
    assert [served(url) > 0 for url in serving["replicas"]] == [True, True]


def test_a_stored_response_is_continued_and_found_on_every_replica(launcher: Launcher) -> None:
    """The launcher gives its replicas one --responses-store-dir; round robin sends the
    follow-ups to both."""
    client = launcher.client()
    first = client.responses.create(model=MODEL, input="hi")
    follow_ups = [
        client.responses.create(model=MODEL, input="and?", previous_response_id=first.id)
        for _ in range(2)
    ]
    assert [r.output_text for r in follow_ups] == [REPLY, REPLY]
    (serving,) = launcher.events("serving")
    for url in serving["replicas"]:
        found = httpx.get(f"{url}/v1/responses/{first.id}")
        assert found.status_code == 200 and found.json()["output"][0]["content"][0]["text"] == REPLY


def test_a_killed_replica_is_left_out_and_sigterm_drains(launcher: Launcher) -> None:
    first, second = launcher.events("replica_started")
    os.kill(first["pid"], signal.SIGKILL)
    client = launcher.client()
    answered = 0
    deadline = time.monotonic() + 30
    while answered < 6 and time.monotonic() < deadline:  # the router's check takes ~3 s
        try:
            reply = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], timeout=10
            )
            assert reply.choices[0].message.content == REPLY
            answered += 1
        except openai.APIError:
            answered = 0
            time.sleep(0.5)
    assert answered == 6, "the router kept sending to the dead replica"
    assert launcher.process.poll() is None  # one replica is still serving
    (exited,) = launcher.events("child_exited")
    assert exited["child"] == "replica 0" and exited["status"] == -signal.SIGKILL
    children = launcher.pids()
    assert second["pid"] in children
    launcher.process.send_signal(signal.SIGTERM)
    assert launcher.process.wait(timeout=60) == 0
    assert not any(_alive(pid) for pid in children)


def test_a_killed_launcher_leaves_no_process(tmp_path: Path) -> None:
    launcher = launch(tmp_path, "cache_aware")
    children = launcher.pids()
    launcher.process.kill()
    launcher.process.wait()
    assert len(children) == 3  # two replicas and the router
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in children)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that is gone counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
