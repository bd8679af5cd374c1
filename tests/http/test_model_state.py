"""New weights from disk, sleep and wake-up, over real HTTP (FakeRunner models whose
"weights" are a text file holding the reply they give: tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project
from atom.vocabulary.config import Settings
from tests.conftest import FAKE_REPLY, fake_loader, serving, wait_ready

MODEL = "SmolLM2-135M-Instruct"
LONG = {"role": "user", "content": "hi " * 40}  # fills whole KV blocks: a cached prefix
CHAT = {"model": MODEL, "messages": [LONG], "max_tokens": 64, "temperature": 0}


def admin_app(tokenizer: Any, *, step_delay_s: float = 0.0, **settings: Any) -> Any:
    settings = {"model": (MODEL,), "enable_admin_routes": True, **settings}
    return create_app(Settings(**settings), load=fake_loader(tokenizer, step_delay_s=step_delay_s))


def weights_file(tmp_path: Path, reply: str) -> str:
    path = tmp_path / f"weights-{len(reply)}.txt"
    path.write_text(reply)
    return str(path)


async def streamed_text(http: httpx.AsyncClient, started: trio.Event, out: list[str]) -> None:
    async with http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                out.append(delta.get("content") or "")
                if len(out) > 3:
                    started.set()


async def test_new_weights_swap_in_between_steps_and_running_streams_continue_on_them(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.jsonl"
    app = admin_app(tokenizer, step_delay_s=0.02, request_log=str(log_path))
    seen: list[Any] = []
    app.engine.bus.subscribe(seen.append)
    new = weights_file(tmp_path, " new weights speaking here, all of it different")
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        before = (await http.post("/v1/chat/completions", json=CHAT)).json()
        pieces: list[str] = []
        started = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(streamed_text, http, started, pieces)
            await started.wait()
            body = {"model_path": new, "weight_version": "v2"}
            updated = await http.post("/update_weights_from_disk", json=body)
        after = (await http.post("/v1/chat/completions", json=CHAT)).json()
    assert before["choices"][0]["message"]["content"] == FAKE_REPLY
    assert updated.status_code == 200, updated.text
    assert updated.json() == {
        "success": True,
        "message": f"Updated the model weights from {new}.",
        "num_paused_requests": 1,
    }
    streamed = "".join(pieces)
    assert streamed != FAKE_REPLY and FAKE_REPLY.startswith(streamed[:4])  # old, then new
    assert (
        after["choices"][0]["message"]["content"]
        == " new weights speaking here, all of it different"
    )
    (event,) = [e.event for e in seen if e.event.type == "weights_updated"]
    assert (event.source, event.weight_version, event.num_paused_requests) == (new, "v2", 1)
    assert event.num_blocks > 0  # the first request's prompt was cached, and is forgotten
    steps = [e.event for e in seen if e.event.type == "engine_stepped"]
    assert steps[-1].prefix_cache_hits == 0  # the same prompt after: nothing cached to hit
    replayed = project(read_log(log_path))  # replay knows which weights answered
    assert [r.weights for r in replayed] == [["initial"], ["initial", "v2"], ["v2"]]


async def test_weights_that_do_not_load_are_refused_in_sglangs_shape(
    tokenizer: Any, tmp_path: Path
) -> None:
    app = admin_app(tokenizer)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        missing = await http.post("/update_weights_from_disk", json={"model_path": "/nope"})
        aborting = await http.post(
            "/update_weights_from_disk", json={"model_path": "/nope", "abort_all_requests": True}
        )
        answer = (await http.post("/v1/chat/completions", json=CHAT)).json()
    assert missing.status_code == 400
    assert missing.json()["success"] is False and "/nope" in missing.json()["message"]
    assert aborting.status_code == 400 and aborting.json()["error"]["param"] == "abort_all_requests"
    assert answer["choices"][0]["message"]["content"] == FAKE_REPLY  # still the old weights


async def test_sleep_waits_for_running_requests_refuses_new_ones_and_wakes(
    tokenizer: Any,
) -> None:
    app = admin_app(tokenizer, step_delay_s=0.01)
    seen: list[Any] = []
    app.engine.bus.subscribe(seen.append)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        pieces: list[str] = []
        started = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(streamed_text, http, started, pieces)
            await started.wait()
            slept = await http.post("/sleep", params={"level": "1"})
        asleep = await http.get("/is_sleeping")
        refused = await http.post("/v1/chat/completions", json=CHAT)
        health = await http.get("/health", params={"deep": "1"})
        woke = await http.post("/wake_up")
        answer = (await http.post("/v1/chat/completions", json=CHAT)).json()
    assert "".join(pieces) == FAKE_REPLY  # the running stream finished first
    assert slept.json() == {"is_sleeping": True, "level": 1}
    assert asleep.json() == {"is_sleeping": True}
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert refused.json()["error"]["code"] == "model_asleep"
    assert health.status_code == 200  # a sleeping model is not a failing one
    assert woke.json() == {"is_sleeping": False}
    assert answer["choices"][0]["message"]["content"] == FAKE_REPLY
    kinds = [e.event.type for e in seen if e.event.type in {"model_slept", "model_woke"}]
    assert kinds == ["model_slept", "model_woke"]
    types = [e.event.type for e in seen]
    last_completed = len(types) - 1 - types[::-1].index("request_completed")
    assert last_completed > types.index("model_woke")  # the last answer came after the wake-up


async def test_while_asleep_wait_queues_requests_until_the_wake_up(tokenizer: Any) -> None:
    app = admin_app(tokenizer, while_asleep="wait")
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        await http.post("/sleep")
        answers: list[httpx.Response] = []

        async def ask() -> None:
            answers.append(await http.post("/v1/chat/completions", json=CHAT))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            while (
                not app.engine.models.registry.cores[MODEL].batcher.statistics().num_queued_requests
            ):
                await trio.sleep(0.01)
            assert not answers  # it waits
            await http.post("/wake_up")
    assert answers[0].status_code == 200
    assert answers[0].json()["choices"][0]["message"]["content"] == FAKE_REPLY


async def test_a_level_2_sleep_drops_the_weights_and_the_wake_up_reads_the_last_ones(
    tokenizer: Any, tmp_path: Path
) -> None:
    app = admin_app(tokenizer)
    seen: list[Any] = []
    app.engine.bus.subscribe(seen.append)
    new = weights_file(tmp_path, " the updated reply")
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        await http.post("/update_weights_from_disk", json={"model_path": new})
        slept = await http.post("/sleep", params={"level": "2"})
        runner = app.engine.models.registry.cores[MODEL].batcher._runner
        asleep_at = runner.is_asleep_at
        updating = await http.post("/update_weights_from_disk", json={"model_path": new})
        bad_level = await http.post("/sleep", params={"level": "3"})
        await http.post("/wake_up")
        answer = (await http.post("/v1/chat/completions", json=CHAT)).json()
    assert slept.status_code == 200 and asleep_at == 2
    assert updating.status_code == 409 and "asleep" in updating.json()["message"]
    assert bad_level.status_code == 400
    assert answer["choices"][0]["message"]["content"] == " the updated reply"
    (woke,) = [e.event for e in seen if e.event.type == "model_woke"]
    assert woke.source == new  # read again from where the weights last came from
