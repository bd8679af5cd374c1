"""On a fatal engine error the last minutes of events are written to --crash-dump-dir as
a request log, without --request-log, and `atom replay` rebuilds from it the very bytes
each client received, failures included (issue 20)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project
from atom.model.catalog import ModelSpec
from atom.model.fake_runner import FakeRunner
from atom.model.runner import Runtime, StepPlan
from atom.vocabulary.config import Settings
from tests.conftest import replying, serving, wait_ready

MODEL = "SmolLM2-135M-Instruct"


class Breaking(FakeRunner):
    """A FakeRunner whose steps raise once `is_broken` is set (a runner bug)."""

    is_broken = False

    def step(self, plan: StepPlan) -> Any:
        if self.is_broken:
            raise RuntimeError("an injected runner fault")
        return super().step(plan)


async def test_a_fatal_error_writes_a_crash_dump_that_replays_what_clients_got(
    tokenizer: Any, tmp_path: Path
) -> None:
    runner = Breaking(
        eos_token_id=tokenizer.eos_token_id,
        script=replying(tokenizer, "word " * 300),
        step_delay_s=0.01,
    )

    def load(settings: Settings, spec: ModelSpec) -> Runtime:
        return Runtime(runner=runner, tokenizer=tokenizer, max_model_len=2048)

    dumps = tmp_path / "dumps"
    app = create_app(
        Settings(model=(MODEL,), crash_dump_dir=str(dumps)), load=load, on_fatal=lambda: None
    )
    received: dict[int, bytes] = {}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(app)
        finished = await client.post("/v1/completions", json={"prompt": "a", "max_tokens": 3})
        streaming = trio.Semaphore(0)

        async def stream(idx: int) -> None:
            body = {"prompt": f"p{idx}", "stream": True, "max_tokens": 300}
            async with client.stream("POST", "/v1/completions", json=body) as r:
                chunks = []
                async for chunk in r.aiter_raw():
                    if not chunks:
                        streaming.release()
                    chunks.append(chunk)
            received[idx] = b"".join(chunks)

        async with trio.open_nursery() as nursery:
            for idx in range(2):
                nursery.start_soon(stream, idx)
            for _ in range(2):
                await streaming.acquire()
            runner.is_broken = True
    (dump,) = dumps.iterdir()
    replayed = project(read_log(dump))
    assert [r.status for r in replayed] == [200, 200, 200]
    assert replayed[0].body == finished.content  # an earlier request, whole
    assert sorted(bytes(r.body) for r in replayed[1:]) == sorted(received.values())
    for body in received.values():
        assert b'"code":"engine_failed"' in body and body.endswith(b"data: [DONE]\n\n")
