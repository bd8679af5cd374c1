"""Two servers sharing `--responses-store-dir` (as `--data-parallel-size` replicas do):
a stored response made on one is found, continued, cancelled and deleted through the
other (atom/log/shared_responses.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import FAKE_REPLY, fake_loader, serving, wait_ready

MODEL = "SmolLM2-135M-Instruct"
FOLDED_S = 1.0  # past the store's poll (0.25 s) with room for a busy machine


async def test_a_response_made_on_one_replica_is_served_by_the_other(
    tokenizer: Any, tmp_path: Path
) -> None:
    settings = Settings(responses_store_dir=str(tmp_path / "store"))
    # 0.1 s a step (~2 s a reply): a background response is still running when asked.
    loader = fake_loader(tokenizer, step_delay_s=0.1)
    one, two = create_app(settings, load=loader), create_app(settings, load=loader)
    async with (
        serving(one) as url_one,
        serving(two) as url_two,
        httpx.AsyncClient(base_url=url_one, timeout=30) as first,
        httpx.AsyncClient(base_url=url_two, timeout=30) as second,
    ):
        await wait_ready(one)
        await wait_ready(two)
        body = {"model": MODEL, "input": "Say hello."}
        made = (await first.post("/v1/responses", json=body)).json()
        found = (await second.get(f"/v1/responses/{made['id']}")).json()  # at once: a miss reads
        follow = {**body, "previous_response_id": made["id"]}
        continued = await second.post("/v1/responses", json=follow)
        running = (await first.post("/v1/responses", json={**body, "background": True})).json()
        cancelled = (await second.post(f"/v1/responses/{running['id']}/cancel")).json()
        at_home = (await first.get(f"/v1/responses/{running['id']}")).json()
        deleted = await second.delete(f"/v1/responses/{made['id']}")
        await trio.sleep(FOLDED_S)
        gone = await first.get(f"/v1/responses/{made['id']}")
        unknown = await second.get("/v1/responses/resp_nobody")
    assert found["output"] == made["output"] and found["status"] == "completed"
    assert found["output"][0]["content"][0]["text"] == FAKE_REPLY
    assert continued.status_code == 200, continued.text
    assert continued.json()["previous_response_id"] == made["id"]
    assert cancelled["status"] == at_home["status"] == "cancelled"
    assert deleted.status_code == 200 and gone.status_code == 404
    assert unknown.status_code == 404
    assert len(list((tmp_path / "store").glob("*.jsonl"))) == 2  # one file a server
