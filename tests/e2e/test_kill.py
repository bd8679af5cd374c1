"""`kill -9` while the request log is written fast: every whole line parses, at most the
last one is torn, and `atom replay` reports it and rebuilds every request before it
(issue 20). The model is a FakeRunner in a real server process (tests/e2e/faulty_app.py),
so the log takes thousands of events a second."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from atom.log.codec import decode
from tests.e2e.conftest import FAULTY_APP, server_process

pytestmark = pytest.mark.slow


def stream_until_cut(url: str, idx: int) -> None:
    body = {"prompt": f"story {idx}", "max_tokens": 1500, "stream": True, "n": 4}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
            for _ in r.iter_raw():
                pass
    except httpx.TransportError:
        pass  # the kill cut it


def test_kill_9_under_heavy_logging_leaves_whole_lines_and_a_replayable_log(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "log.jsonl"
    env = {"FAKE_REPLY": "word " * 2000}
    with server_process(log_path, FAULTY_APP, **env) as (proc, url):
        done = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 5})
        threads = [threading.Thread(target=stream_until_cut, args=(url, i)) for i in range(8)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 120
        while log_path.stat().st_size < 2_000_000:  # heavy logging under way
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        proc.kill()  # SIGKILL: no handler runs, the kernel keeps what was written
        proc.wait(timeout=30)
        for thread in threads:
            thread.join(timeout=60)
    lines = log_path.read_bytes().split(b"\n")
    whole, last = lines[:-1], lines[-1]
    envelopes = [decode(line.decode()) for line in whole]  # every whole line parses
    received = [e.event.request_id for e in envelopes if e.event.type == "request_received"]
    assert len(received) == 9
    replay = subprocess.run(
        [sys.executable, "-m", "atom.cli", "replay", str(log_path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    responses = [json.loads(line) for line in replay.stdout.splitlines()]
    assert [r["request_id"] for r in responses] == received  # every request is rebuilt
    assert json.loads(responses[0]["body"]) == done.json()  # the finished one, exactly
    if last:  # the kill landed inside a write: only the last line is torn, and reported
        assert f"{log_path}:{len(lines)}: skipped a torn line" in replay.stderr
