"""API keys as tenants over real HTTP (FakeRunner, the real tokenizer): a key's stored
responses and request views are its own, the admin key sees all, a request id is never
taken over, and a previous_response_id chain is bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project
from atom.projections.responses_store import MAX_CHAIN
from atom.vocabulary.config import Settings
from atom.vocabulary.tenant import fingerprint
from tests.conftest import fake_loader, serving, wait_ready

A, B, ROOT = ({"authorization": f"Bearer {key}"} for key in ("key-a", "key-b", "root"))


def respond(previous: str | None = None) -> dict[str, Any]:
    return {"input": "my secret plan", "max_output_tokens": 4, "previous_response_id": previous}


async def test_a_keys_responses_and_requests_are_its_own(tokenizer: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "log.jsonl"
    settings = Settings(
        api_key=("key-a", "key-b"), admin_api_key=("root",), request_log=str(log_path)
    )
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        made = (await http.post("/v1/responses", json=respond(), headers=A)).json()
        path = f"/v1/responses/{made['id']}"
        by_b = {
            "get": await http.get(path, headers=B),
            "items": await http.get(f"{path}/input_items", headers=B),
            "cancel": await http.post(f"{path}/cancel", headers=B),
            "delete": await http.delete(path, headers=B),
            "continue": await http.post("/v1/responses", json=respond(made["id"]), headers=B),
            "view": await http.get(f"/webui/api/requests/{made['id']}", headers=B),
        }
        listed_b = (await http.get("/webui/api/requests", headers=B)).json()["data"]
        listed_root = (await http.get("/webui/api/requests", headers=ROOT)).json()["data"]
        by_root = await http.get(path, headers=ROOT)
        continued = await http.post("/v1/responses", json=respond(made["id"]), headers=A)
        deleted = await http.delete(path, headers=A)
        gone = await http.get(path, headers=A)
        suffix = made["id"].removeprefix("resp_")
        taken = await http.post(
            "/v1/responses", json=respond(), headers={**B, "x-request-id": suffix}
        )
    assert {name: answer.status_code for name, answer in by_b.items()} == {
        "get": 404, "items": 404, "cancel": 404, "delete": 404, "continue": 404, "view": 404
    }  # fmt: skip
    assert "my secret plan" not in "".join(answer.text for answer in by_b.values())
    assert by_b["continue"].json()["error"]["param"] == "previous_response_id"
    assert made["id"] not in [entry["id"] for entry in listed_b]
    assert made["id"] in [entry["id"] for entry in listed_root]
    assert by_root.status_code == 200 and by_root.json()["id"] == made["id"]
    assert continued.status_code == 200 and deleted.status_code == 200
    assert gone.status_code == 404
    assert taken.status_code == 409  # a deleted id is not made again, by any key
    owners = {e.event.owner for e in read_log(log_path) if e.event.type == "request_received"}
    assert owners == {fingerprint(b"key-a")}  # B's requests were all refused
    assert "key-a" not in log_path.read_text()  # the log names keys by fingerprint only


async def test_a_request_id_reused_after_the_first_ended_keeps_both(
    tokenizer: Any, tmp_path: Path
) -> None:
    """Replay and the web view kept only the second of two requests with one id."""
    log_path = tmp_path / "log.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        first = await http.post("/v1/chat/completions", json=chat, headers={"x-request-id": "r"})
        second = await http.post("/v1/chat/completions", json=chat, headers={"x-request-id": "r"})
        listed = (await http.get("/webui/api/requests")).json()["data"]
        views = [(await http.get(f"/webui/api/requests/{e['id']}")).json() for e in listed]
    assert first.status_code == second.status_code == 200
    assert len(listed) == 2 and {e["id"].split("@")[0] for e in listed} == {"chatcmpl-r"}
    assert [v["response"]["body"] for v in views] == [second.text, first.text]
    replayed = project(read_log(log_path))
    assert [bytes(r.body).decode() for r in replayed] == [first.text, second.text]


async def test_a_previous_response_chain_is_bounded(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer, max_model_len=16384))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        previous = None
        for _ in range(MAX_CHAIN + 1):  # the last one continues a chain of MAX_CHAIN
            previous = (await http.post("/v1/responses", json=respond(previous))).json()["id"]
        past = await http.post("/v1/responses", json=respond(previous))
        health = await http.get("/health")
    assert past.status_code == 400
    error = past.json()["error"]
    assert error["param"] == "previous_response_id" and str(MAX_CHAIN) in error["message"]
    assert health.status_code == 200


@pytest.mark.parametrize("keys", [("key-a", ""), ("key-a", "  ")])
def test_an_empty_key_is_refused_at_start_up(tokenizer: Any, keys: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="may not be empty"):
        create_app(Settings(api_key=keys), load=fake_loader(tokenizer))
