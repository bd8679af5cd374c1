"""POST /start_profile and /stop_profile over real HTTP (a FakeRunner model): the trace
file holds each Batcher's loop phases on a track of its own."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx

from atom.http.app import create_app
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready

MODEL = "SmolLM2-135M-Instruct"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
PHASES = {"schedule", "model step", "delivery", "between steps"}


async def test_a_profile_holds_the_batchers_phases_and_is_written_as_a_chrome_trace(
    tokenizer: Any, tmp_path: Path
) -> None:
    settings = Settings(model=(MODEL,), enable_admin_routes=True, profile_dir=str(tmp_path))
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        await wait_ready(app)
        early_stop = await http.post("/stop_profile")
        started = await http.post("/start_profile")
        twice = await http.post("/start_profile")
        answered = await http.post("/v1/chat/completions", json=CHAT)
        stopped = await http.post("/stop_profile")
    assert early_stop.status_code == 409 and twice.status_code == 409
    assert started.json() == {"status": "profiling"} and answered.status_code == 200
    path = Path(stopped.json()["trace"])
    assert path.parent == tmp_path and path.name.endswith(".pt.trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    (track,) = [
        e for e in events if e.get("ph") == "M" and e["args"].get("name") == f"batcher {MODEL}"
    ]
    spans = [e for e in events if e.get("tid") == track["tid"] and e.get("ph") == "X"]
    assert {s["name"] for s in spans} >= PHASES
    assert all(s["dur"] >= 0 for s in spans)
    ordered = sorted(spans, key=lambda s: s["ts"])
    for before, after in itertools.pairwise(ordered):  # phases never overlap
        assert before["ts"] + before["dur"] <= after["ts"] + 1e-3


async def test_profiling_routes_are_404_without_a_profile_dir(tokenizer: Any) -> None:
    app = create_app(
        Settings(model=(MODEL,), enable_admin_routes=True), load=fake_loader(tokenizer)
    )
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        start = await http.post("/start_profile")
    assert start.status_code == 404 and "--profile-dir" in start.json()["error"]["message"]
