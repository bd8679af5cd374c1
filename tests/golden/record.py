"""Re-record the golden request logs: `python -m tests.golden.record` (real default model).

Writes mix.jsonl (the request log) and mix.responses.json (request id → the bytes
the client received). Re-record only when the log schema or the wire format changes
on purpose, and say so in the commit.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import httpx
import trio

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import serving, wait_ready
from tests.replay_mix import send_mix

HERE = Path(__file__).parent


async def record() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "mix.jsonl"
        app = create_app(Settings(request_log=str(log_path)))
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            await wait_ready(app)
            received = await send_mix(client)
            await trio.sleep(0.5)
        (HERE / "mix.jsonl").write_text(log_path.read_text())
    responses = {rid: raw.decode() for rid, raw in received.items()}
    (HERE / "mix.responses.json").write_text(json.dumps(responses, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    trio.run(record)
