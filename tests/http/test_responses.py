"""OpenAI's Responses API through the whole server (FakeRunner with a scripted reply,
the real tokenizer, the official `openai` client), and its replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project, reparse
from atom.vocabulary.config import Settings
from tests.conftest import FAKE_REPLY, fake_loader, serving, wait_ready
from tests.weather import CALL_REPLY, WEATHER

MODEL = "SmolLM2-135M-Instruct"
TOOL = {"type": "function", **WEATHER["function"]}  # type: ignore[dict-item]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


async def test_a_response_whole_and_streamed(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    async with serving(app) as url:
        await wait_ready(app)
        c = client(url)

        def both() -> tuple[Any, Any, list[Any]]:
            whole = c.responses.create(model=MODEL, input="Say hello.", instructions="Be brief.")
            with c.responses.stream(model=MODEL, input="Say hello.") as stream:
                events = list(stream)
                final = stream.get_final_response()
            return whole, final, events

        whole, final, events = await trio.to_thread.run_sync(both)
        await trio.sleep(0.2)
    assert whole.id.startswith("resp_") and whole.status == "completed"
    assert whole.output_text == FAKE_REPLY and whole.instructions == "Be brief."
    assert whole.usage is not None and whole.usage.total_tokens == (
        whole.usage.input_tokens + whole.usage.output_tokens
    )
    assert final.output_text == FAKE_REPLY and final.status == "completed"
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    sent = project(read_log(log_path))
    assert json.loads(sent[0].body)["output"][0]["content"][0]["text"] == FAKE_REPLY
    assert bytes(sent[1].body).startswith(b"event: response.created\ndata: ")


async def test_function_calls_their_outputs_and_replay_with_the_parser_swapped_in(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.jsonl"
    settings = Settings(tool_call_parser="hermes", request_log=str(log_path))
    app = create_app(settings, load=fake_loader(tokenizer, reply=CALL_REPLY))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        body = {"model": MODEL, "input": "Weather in Paris?", "tools": [TOOL]}
        whole = (await http.post("/v1/responses", json=body)).json()
        streamed = await http.post("/v1/responses", json={**body, "stream": True})
        call = whole["output"][1]
        history = [
            {"role": "user", "content": "Weather in Paris?"},
            {k: call[k] for k in ("type", "call_id", "name", "arguments")},
            {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"},
        ]
        followed = await http.post("/v1/responses", json={**body, "input": history})
        cut = (await http.post("/v1/responses", json={**body, "max_output_tokens": 2})).json()
        web = await http.post("/v1/responses", json={**body, "tools": [{"type": "web_search"}]})
        await trio.sleep(0.2)
    message, call = whole["output"]
    assert message["content"][0]["text"] == "Let me check."
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert b"response.function_call_arguments.delta" in streamed.content
    assert followed.status_code == 200
    assert cut["status"] == "incomplete"
    assert cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert web.status_code == 400 and web.json()["error"]["param"] == "tools.0.type"
    log = list(read_log(log_path))
    sent = [r.body for r in project(log)]
    rebuilt = reparse(log, tokenizer, tool_call_parser="hermes", reasoning_parser=None)
    assert [r.body for r in project(rebuilt)] == sent


async def test_the_store_serves_continues_deletes_and_survives_a_restart(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.jsonl"
    settings = Settings(request_log=str(log_path))
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url:
        await wait_ready(app)
        c = client(url)

        def use() -> dict[str, Any]:
            first = c.responses.create(model=MODEL, input="Say hello.")
            later = c.responses.create(
                model=MODEL, input="Again.", previous_response_id=first.id, stream=False
            )
            unstored = c.responses.create(model=MODEL, input="Say hello.", store=False)
            items = c.responses.input_items.list(later.id, order="asc")
            got = c.responses.retrieve(first.id)
            return {"first": first, "later": later, "unstored": unstored, "items": items,
                    "got": got}  # fmt: skip

        seen = await trio.to_thread.run_sync(use)
        async with httpx.AsyncClient(base_url=url) as http:
            gone = await http.get(f"/v1/responses/{seen['unstored'].id}")
            unknown = await http.post(
                "/v1/responses", json={"input": "hi", "previous_response_id": "resp_nope"}
            )
            deleted = await http.delete(f"/v1/responses/{seen['later'].id}")
            after_delete = await http.get(f"/v1/responses/{seen['later'].id}")
        await trio.sleep(0.2)
    first, later = seen["first"], seen["later"]
    assert seen["got"].model_dump() == first.model_dump()
    assert later.previous_response_id == first.id
    assert later.usage.input_tokens > first.usage.input_tokens  # the conversation came along
    assert [i.content[0].text for i in seen["items"].data] == ["Again."]  # type: ignore[union-attr]
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "invalid_request_error"
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "previous_response_id"
    assert deleted.status_code == 200 and after_delete.status_code == 404
    restarted = create_app(settings, load=fake_loader(tokenizer))
    async with serving(restarted) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(restarted)
        again = await http.get(f"/v1/responses/{first.id}")
        still_gone = await http.get(f"/v1/responses/{later.id}")
    assert again.json() == json.loads(first.model_dump_json(exclude_unset=True))
    assert still_gone.status_code == 404  # the deletion is in the log too


async def test_background_responses_finish_in_the_store_or_are_cancelled(
    tokenizer: Any,
) -> None:
    # 0.2 s a step (~4 s a reply): still running when the next request reaches it,
    # even on a busy machine.
    app = create_app(Settings(), load=fake_loader(tokenizer, step_delay_s=0.2))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        body = {"model": MODEL, "input": "Say hello.", "background": True}
        queued = (await http.post("/v1/responses", json=body)).json()
        rid = queued["id"]
        while (await http.get(f"/v1/responses/{rid}")).json()["status"] != "completed":
            await trio.sleep(0.05)
        done = (await http.get(f"/v1/responses/{rid}")).json()
        doomed = (await http.post("/v1/responses", json=body)).json()
        cancelled = (await http.post(f"/v1/responses/{doomed['id']}/cancel")).json()
        later = (await http.get(f"/v1/responses/{doomed['id']}")).json()
        plain = (await http.post("/v1/responses", json={**body, "background": False})).json()
        refused = await http.post(f"/v1/responses/{plain['id']}/cancel")
        served = await http.post("/v1/responses", json={**body, "background": False})
    assert queued["status"] == "queued" and queued["background"] is True
    assert done["output"][0]["content"][0]["text"] == FAKE_REPLY and done["background"] is True
    assert cancelled["status"] == later["status"] == "cancelled"
    assert refused.status_code == 400
    assert served.status_code == 200


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(chunk.split(b"\ndata: ", 1)[1]) for chunk in raw.split(b"\n\n") if chunk]


async def test_a_streamed_background_response_outlives_its_client_and_resumes(
    tokenizer: Any,
) -> None:
    # 0.2 s a step (~4 s a reply): still running when the next request reaches it,
    # even on a busy machine.
    app = create_app(Settings(), load=fake_loader(tokenizer, step_delay_s=0.2))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        body = {"model": MODEL, "input": "Say hello.", "background": True, "stream": True}
        async with http.stream("POST", "/v1/responses", json=body) as r:
            first = await r.aiter_raw().__anext__()  # then the client leaves
        rid = _events(first)[0]["response"]["id"]
        after_two = {"stream": "true", "starting_after": "2"}
        resumed = await http.get(f"/v1/responses/{rid}", params=after_two)
        while (await http.get(f"/v1/responses/{rid}")).json()["status"] != "completed":
            await trio.sleep(0.05)
        done = (await http.get(f"/v1/responses/{rid}")).json()
        too_late = await http.get(f"/v1/responses/{rid}", params={"stream": "true"})
    events = _events(resumed.content)
    assert events[0]["sequence_number"] == 3 and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(3, 3 + len(events)))
    assert done["output"][0]["content"][0]["text"] == FAKE_REPLY
    assert events[-1]["response"]["output"] == done["output"]
    assert too_late.status_code == 400 and too_late.json()["error"]["param"] == "stream"


async def test_bad_bodies_are_400s_naming_the_field(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        bodies = {
            "input": {"model": MODEL},
            "nope": {"input": "hi", "nope": 1},
            "temperature": {"input": "hi", "temperature": 3},
            "input.0.content.0": {"input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]},
        }  # fmt: skip
        answers = {p: await http.post("/v1/responses", json=b) for p, b in bodies.items()}
        served = await http.post("/v1/responses", json={"input": "hi"})
    for param, answer in answers.items():
        assert answer.status_code == 400, (param, answer.text)
        assert answer.json()["error"]["param"] == param, answer.text
    assert served.status_code == 200


async def test_bad_lines_in_the_log_are_skipped_at_start_up(tokenizer: Any, tmp_path: Path) -> None:
    """A line `5` or an unknown event type stopped the server from starting (engine_died)."""
    log_path = tmp_path / "log.jsonl"
    settings = Settings(request_log=str(log_path))
    first = create_app(settings, load=fake_loader(tokenizer))
    async with serving(first) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(first)
        made = (await http.post("/v1/responses", json={"input": "hi"})).json()
    with log_path.open("a") as log:
        log.write('5\n{"v":1,"seq":9,"at":0,"type":"no_such_event"}\n')
    again = create_app(settings, load=fake_loader(tokenizer))
    async with serving(again) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(again)
        kept = await http.get(f"/v1/responses/{made['id']}")
        health = await http.get("/health")
    assert health.status_code == 200
    assert kept.status_code == 200 and kept.json()["output"] == made["output"]
