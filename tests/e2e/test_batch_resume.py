"""A batch survives `kill -9` of its server: the next server on the same --data-dir
resumes it, and its output holds every line once (atom/http/batch_runner.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import free_port

pytestmark = pytest.mark.slow
NUM_LINES = 24


@contextmanager
def server(data_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    env = {
        **os.environ,
        "ATOM_DATA_DIR": str(data_dir),
        "ATOM_LOG_LEVEL": "warning",
        "FAKE_REPLY": "one two three four five six seven eight",
        "FAKE_STEP_DELAY": "0.05",
    }
    command = [sys.executable, "-m", "hypercorn", "-k", "trio", "-w", "0",
               "-b", f"127.0.0.1:{port}", "tests.e2e.faulty_app:app"]  # fmt: skip
    process = subprocess.Popen(command, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None and time.monotonic() < deadline
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_a_batch_killed_midway_resumes_with_every_line_once(tmp_path: Path) -> None:
    chats = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": "SmolLM2-135M-Instruct", "prompt": f"count {i}"}}
             for i in range(NUM_LINES)]  # fmt: skip
    data = "\n".join(json.dumps(chat) for chat in chats).encode() + b"\n"
    with server(tmp_path) as (process, url):
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        uploaded = c.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
        batch = c.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions",
                                 completion_window="24h")  # fmt: skip
        while c.batches.retrieve(batch.id).request_counts.completed < 4:
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
    with server(tmp_path) as (_, url):
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        deadline = time.monotonic() + 60
        while (done := c.batches.retrieve(batch.id)).status != "completed":
            assert time.monotonic() < deadline, done
            time.sleep(0.1)
        output = [
            json.loads(line) for line in c.files.content(done.output_file_id).text.splitlines()
        ]
    custom_ids = [record["custom_id"] for record in output]
    assert sorted(custom_ids) == sorted(f"q{i}" for i in range(NUM_LINES))  # each once
    assert done.request_counts.completed == NUM_LINES and done.request_counts.failed == 0
