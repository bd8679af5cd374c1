"""OpenAI's Batch API through the official client: a file uploaded, a batch over it run
at low priority to its output and error files, cancelled, kept apart between keys, and
resumed after a restart without a line answered twice (atom/http/batch_runner.py)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import FAKE_REPLY, fake_loader, serving_in_thread

MODEL = "SmolLM2-135M-Instruct"


def lines(count: int, *, bad: bool = False) -> bytes:
    chats = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": MODEL, "messages": [{"role": "user", "content": f"hi {i}"}]}}
             for i in range(count)]  # fmt: skip
    text = "\n".join(json.dumps(chat) for chat in chats)
    return (text + ("\n{not json\n" if bad else "\n")).encode()


def client(url: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def finished(c: openai.OpenAI, batch_id: str) -> Any:
    deadline = time.monotonic() + 60
    while (batch := c.batches.retrieve(batch_id)).status not in ("completed", "cancelled"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.1)
    return batch


def test_a_batch_runs_to_its_output_and_error_files(tokenizer: Any, tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)), load=fake_loader(tokenizer))
    with serving_in_thread(app) as url:
        c = client(url)
        uploaded = c.files.create(
            file=("in.jsonl", io.BytesIO(lines(5, bad=True))), purpose="batch"
        )
        batch = c.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                 completion_window="24h")  # fmt: skip
        done = finished(c, batch.id)
        output = c.files.content(done.output_file_id).text.splitlines()
        errors = c.files.content(done.error_file_id).text.splitlines()
        listed = [b.id for b in c.batches.list()]
    assert batch.status == "validating" and done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed) == (6, 5)
    assert done.request_counts.failed == 1
    records = [json.loads(line) for line in output]
    assert sorted(r["custom_id"] for r in records) == [f"q{i}" for i in range(5)]
    body = records[0]["response"]["body"]
    assert records[0]["response"]["status_code"] == 200
    assert body["choices"][0]["message"]["content"] == FAKE_REPLY
    (error,) = [json.loads(line) for line in errors]
    assert error["response"] is None and error["error"]["code"] == "invalid_request"
    assert listed == [batch.id]


def test_bad_batches_and_other_keys_get_errors_in_openais_shape(
    tokenizer: Any, tmp_path: Path
) -> None:
    settings = Settings(data_dir=str(tmp_path), api_key=("key-a", "key-b"))
    app = create_app(settings, load=fake_loader(tokenizer))
    with serving_in_thread(app) as url:
        a, b = client(url, "key-a"), client(url, "key-b")
        uploaded = a.files.create(file=("in.jsonl", io.BytesIO(lines(2))), purpose="batch")
        twice = a.files.create(file=("in.jsonl", io.BytesIO(lines(1) * 2)), purpose="batch")
        with pytest.raises(openai.NotFoundError):
            b.files.retrieve(uploaded.id)
        with pytest.raises(openai.NotFoundError):
            b.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                             completion_window="24h")  # fmt: skip
        with pytest.raises(openai.BadRequestError, match="appears twice"):
            a.batches.create(input_file_id=twice.id, endpoint="/v1/chat/completions",
                             completion_window="24h")  # fmt: skip
        with pytest.raises(openai.BadRequestError, match="endpoint"):
            a.batches.create(input_file_id=uploaded.id, endpoint="/v1/moderations",  # type: ignore[arg-type]
                             completion_window="24h")  # fmt: skip
        batch = a.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                 completion_window="24h")  # fmt: skip
        with pytest.raises(openai.NotFoundError):
            b.batches.retrieve(batch.id)
        assert [f.id for f in b.files.list()] == []
        finished(a, batch.id)
