"""A batch survives `kill -9` of its server: the next server on the same --data-dir
resumes it, and its output holds every line once (atom/http/batch_runner.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import server_process

pytestmark = pytest.mark.slow
NUM_LINES = 24


def server(data_dir: Path) -> AbstractContextManager[tuple[subprocess.Popen[bytes], str]]:
    """A FakeRunner server (a step every 0.05 s) keeping its batches in `data_dir`."""
    return server_process(
        data_dir / "requests.jsonl",
        "tests.e2e.faulty_app:app",
        ATOM_DATA_DIR=str(data_dir),
        FAKE_REPLY="one two three four five six seven eight",
        FAKE_STEP_DELAY="0.05",
    )


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
