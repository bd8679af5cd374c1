"""Graceful drain under real signals, and the watchdog: `hypercorn -k trio -w 0` serving
the real chat model, concurrent streams, SIGTERM (and a second signal), a hung step."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from atom.log.codec import read_log
from tests.e2e.conftest import FAULTY_APP, server_process

pytestmark = pytest.mark.slow


class Stream(threading.Thread):
    """One streamed chat completion, read whole in its own thread."""

    def __init__(self, url: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url, self.max_tokens = url, max_tokens
        self.started = threading.Event()
        self.frames: list[Any] = []
        self.was_cut = False  # the connection closed mid-stream

    def run(self) -> None:
        try:
            self._read()
        except httpx.TransportError:
            self.was_cut = True

    def _read(self) -> None:
        body = {
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
        }
        with httpx.stream("POST", f"{self.url}/v1/chat/completions", json=body, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    self.frames.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
                    self.started.set()


def start_streams(url: str, count: int, max_tokens: int) -> list[Stream]:
    streams = [Stream(url, max_tokens) for _ in range(count)]
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.started.wait(120)
    return streams


def test_sigterm_lets_running_streams_finish_refuses_new_ones_and_exits_0(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "log.jsonl"
    with server_process(log_path, ATOM_SHUTDOWN_TIMEOUT="120") as (proc, url):
        streams = start_streams(url, 3, max_tokens=160)  # still streaming when the signal comes
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)  # at once, as under `make serve`: the same stop
        time.sleep(0.5)  # the signals reach the engine
        health = httpx.get(f"{url}/health")
        ask = {"messages": [{"role": "user", "content": "hi"}]}
        refused = httpx.post(f"{url}/v1/chat/completions", json=ask, timeout=30)
        for stream in streams:
            stream.join(timeout=120)
        assert proc.wait(timeout=60) == 0
    assert health.status_code == 503 and health.json()["error"]["code"] == "server_draining"
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    for stream in streams:
        assert stream.frames[-1] == "[DONE]"
        assert stream.frames[-2]["choices"][0]["finish_reason"] == "length"
    completed = [e for e in read_log(log_path) if e.event.type == "request_completed"]
    assert len(completed) == 3  # every answer is in the log


def test_past_the_shutdown_timeout_streams_get_an_error_and_a_second_signal_exits_at_once(
    tmp_path: Path,
) -> None:
    with server_process(tmp_path / "a.jsonl", ATOM_SHUTDOWN_TIMEOUT="1") as (proc, url):
        (cut,) = start_streams(url, 1, max_tokens=4000)
        proc.send_signal(signal.SIGTERM)
        cut.join(timeout=120)
        assert proc.wait(timeout=60) == 0
    assert cut.frames[-1] == "[DONE]"
    assert "shutting down" in cut.frames[-2]["error"]["message"]
    failed = [e.event for e in read_log(tmp_path / "a.jsonl") if e.event.type == "request_failed"]
    assert len(failed) == 1
    with server_process(tmp_path / "b.jsonl", ATOM_SHUTDOWN_TIMEOUT="300") as (proc, url):
        (held,) = start_streams(url, 1, max_tokens=4000)
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)  # past SAME_STOP_S: a second stop, not the first one repeated
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 1
        assert time.monotonic() - began < 10  # not the 300 s the first signal allowed
    held.join(timeout=30)
    assert held.was_cut and held.frames[-1] != "[DONE]"  # cut short


def test_a_hung_model_step_fails_every_waiting_request_and_the_process_exits_1(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "hang"
    env = {"ATOM_WATCHDOG_TIMEOUT": "3", "FAULT_FLAG": str(flag), "FAULT": "hang"}
    with server_process(tmp_path / "log.jsonl", FAULTY_APP, **env) as (proc, url):
        ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        fine = httpx.post(f"{url}/v1/chat/completions", json=ask, timeout=60)
        flag.touch()  # the next step never returns
        (stream,) = start_streams(url, 1, max_tokens=64)
        hung = httpx.post(f"{url}/v1/chat/completions", json=ask, timeout=60)
        stream.join(timeout=60)
        assert proc.wait(timeout=60) == 1
    assert fine.status_code == 200
    assert hung.status_code == 500 and "model step ran for more than 3 s" in hung.text
    assert "model step ran for more than 3 s" in stream.frames[-2]["error"]["message"]


def test_a_runner_fault_under_concurrent_streams_fails_each_and_exits_1_within_seconds(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "raise"
    log_path = tmp_path / "log.jsonl"
    dumps = tmp_path / "dumps"
    env = {"FAULT_FLAG": str(flag), "FAULT": "raise", "ATOM_CRASH_DUMP_DIR": str(dumps)}
    with server_process(log_path, FAULTY_APP, **env) as (proc, url):
        streams = start_streams(url, 3, max_tokens=400)
        flag.touch()  # the next step raises
        for stream in streams:
            stream.join(timeout=60)
        began = time.monotonic()
        assert proc.wait(timeout=30) == 1
        assert time.monotonic() - began < 10
    for stream in streams:
        assert stream.frames[-1] == "[DONE]"
        assert stream.frames[-2]["error"]["code"] == "engine_failed"
        assert "the engine failed" in stream.frames[-2]["error"]["message"]
    failed = [e.event for e in read_log(log_path) if e.event.type == "request_failed"]
    assert len(failed) == 3  # every in-flight request's end is in the log
    assert {f.message for f in failed} == {"the engine failed; the server is shutting down"}
    (dump,) = dumps.iterdir()  # the crash dump holds the same ends, written before the exit
    dumped = [e.event for e in read_log(dump) if e.event.type == "request_failed"]
    assert dumped == failed
