"""Loading and unloading models while the server runs (FakeRunner models, real HTTP)."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import httpx
import trio

from atom.http.admin import ADMIN_PATHS
from atom.http.app import create_app
from atom.model.catalog import ModelSpec
from atom.model.fake_runner import FakeRunner
from atom.model.runner import Runtime
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready
from tests.raw_http import http11_request, raw_exchange, status_of

CHAT_MODEL = "SmolLM2-135M-Instruct"


def chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class Tracked(FakeRunner):
    """A FakeRunner a weak reference can follow (the dataclass has slots)."""

    cycle: Any = None


def generation_folder(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return str(folder)


async def test_admin_routes_are_closed_without_a_key_or_the_flag(tokenizer: Any) -> None:
    closed = create_app(Settings(model=(CHAT_MODEL,)), load=fake_loader(tokenizer))
    keyed = create_app(Settings(model=(CHAT_MODEL,), api_key=("k",)), load=fake_loader(tokenizer))
    async with serving(closed) as url, serving(keyed) as keyed_url:
        await wait_ready(closed)
        await wait_ready(keyed)
        async with httpx.AsyncClient() as http:
            refused = await http.post(f"{url}/models/unload", json={"model": CHAT_MODEL})
            no_key = await http.post(f"{keyed_url}/models/unload", json={"model": CHAT_MODEL})
            unknown = await http.post(
                f"{keyed_url}/models/unload",
                json={"model": "nope"},
                headers={"authorization": "Bearer k"},
            )
    assert refused.status_code == 403 and "--enable-admin-routes" in refused.text
    assert no_key.status_code == 401
    assert unknown.status_code == 404  # with the key, the route itself answers


def error_code(response: bytes) -> str:
    """`status code` of a raw error answer: `403 forbidden`, `404 not_found`."""
    body = response.partition(b"\r\n\r\n")[2]
    return f"{status_of(response)} {json.loads(body)['error']['code']}"


def path_variants(path: str) -> list[str]:
    """What a router may take for `path`: doubled, dotted and encoded slashes, a trailing
    slash, and another case."""
    tail = path.removeprefix("/")
    return [f"/{path}", f"/.{path}", f"{path}/", f"/%2F{tail}", f"/%2f{tail}", path.upper()]


async def test_admin_routes_are_decided_on_the_route_that_serves_them(tokenizer: Any) -> None:
    """`//sleep` was routed to /sleep while the check compared the raw path: a 200 with no
    credentials. Every variant of every admin route now reaches no admin route unasked."""
    closed = create_app(Settings(model=(CHAT_MODEL,)), load=fake_loader(tokenizer))
    keyed = create_app(
        Settings(model=(CHAT_MODEL,), api_key=("user",), admin_api_key=("root",)),
        load=fake_loader(tokenizer),
    )
    body = json.dumps({"model": "nope", "level": 1, "lora_name": "x"}).encode()
    async with serving(closed) as url, serving(keyed) as keyed_url:
        await wait_ready(closed)
        await wait_ready(keyed)
        answers: dict[str, int] = {}
        for path in sorted(ADMIN_PATHS):
            for target in [path, *path_variants(path)]:
                sent = await raw_exchange(
                    url, http11_request("POST", target, body), until_closed=False
                )
                answers[target] = error_code(sent)
            as_user = http11_request("POST", f"/{path}", body, "authorization: Bearer user\r\n")
            answers[f"user {path}"] = error_code(
                await raw_exchange(keyed_url, as_user, until_closed=False)
            )
        async with httpx.AsyncClient(base_url=keyed_url) as http:
            root = await http.post(
                "/models/unload", json={"model": "nope"}, headers={"x-api-key": "root"}
            )
    # Refused, or routed nowhere; never an admin route's own answer (its 200, 400 or 404).
    assert set(answers.values()) == {"403 forbidden", "404 not_found"}
    assert all(answers[path] == "403 forbidden" for path in ADMIN_PATHS)
    assert answers["//sleep"] == answers["/%2Fsleep"] == "403 forbidden"  # Quart's /sleep
    assert all(answers[f"user {path}"] == "403 forbidden" for path in ADMIN_PATHS)
    assert root.status_code == 404  # the admin key reaches the route itself


async def test_a_model_loads_while_the_others_serve_and_unloads(
    tokenizer: Any, tmp_path: Path
) -> None:
    gate = trio.Event()
    token = trio.lowlevel.current_trio_token()
    inner = fake_loader(tokenizer)
    second = generation_folder(tmp_path, "second")

    runners: list[weakref.ref[Any]] = []

    def load(settings: Settings, spec: ModelSpec) -> Any:
        if spec.source == second:
            trio.from_thread.run(gate.wait, trio_token=token)  # held until the test lets go
        if spec.source == "broken":
            raise FileNotFoundError("no weights here")
        if spec.source != second:
            return inner(settings, spec)
        runner = Tracked(eos_token_id=tokenizer.eos_token_id)
        runner.cycle = runner  # only the cyclic collector frees it, as a real model's modules
        runners.append(weakref.ref(runner))
        return Runtime(runner=runner, tokenizer=tokenizer, max_model_len=2048)

    settings = Settings(model=(CHAT_MODEL,), enable_admin_routes=True)
    app = create_app(settings, load=load)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        loading: dict[str, httpx.Response] = {}

        async def load_second() -> None:
            loading["r"] = await http.post("/models/load", json={"model": second})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load_second)
            while "second" not in app.engine.models.registry.specs:
                await trio.sleep(0.01)
            during = await http.post("/v1/chat/completions", json=chat(CHAT_MODEL))
            waiting = await http.post("/v1/chat/completions", json=chat("second"))
            listed = (await http.get("/v1/models")).json()["data"]
            gate.set()
        answered = await http.post("/v1/chat/completions", json=chat("second"))
        frozen = gc.get_freeze_count()  # the loads froze the heap (atom/model/heap.py)
        again = await http.post("/models/load", json={"model": second})
        broken = await http.post("/models/load", json={"model": "broken"})
        unloaded = await http.post("/models/unload", json={"model": "second"})
        gone = await http.post("/v1/chat/completions", json=chat("second"))
        still = await http.post("/v1/chat/completions", json=chat(CHAT_MODEL))
        gc.collect()
        assert runners[0]() is None  # nothing holds the unloaded model's runner
    assert frozen > 0
    assert during.status_code == 200  # the load never stalled the served model
    assert waiting.status_code == 503 and waiting.headers["retry-after"]
    assert {m["id"]: m["status"] for m in listed} == {CHAT_MODEL: "loaded", "second": "loading"}
    assert loading["r"].json() == {"id": "second", "object": "model", "status": "loaded",
                                   "kind": "generate"}  # fmt: skip
    assert answered.status_code == 200 and answered.json()["model"] == "second"
    assert again.status_code == 409
    assert broken.status_code == 400 and "no weights here" in broken.json()["error"]["message"]
    assert unloaded.json()["status"] == "unloaded"
    assert gone.status_code == 404 and still.status_code == 200


async def test_models_max_unloads_the_least_recently_used(tokenizer: Any, tmp_path: Path) -> None:
    first, second = generation_folder(tmp_path, "first"), generation_folder(tmp_path, "second")
    settings = Settings(
        model=(CHAT_MODEL, first), models_max=2, enable_admin_routes=True
    )  # fmt: skip
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        await http.post("/v1/chat/completions", json=chat("first"))
        await http.post("/v1/chat/completions", json=chat(CHAT_MODEL))  # "first" is now LRU
        loaded = await http.post("/models/load", json={"model": second})
        names = [m["id"] for m in (await http.get("/v1/models")).json()["data"]]
    assert loaded.status_code == 200
    assert names == [CHAT_MODEL, "second"]


async def test_the_last_model_cannot_be_unloaded_and_the_server_keeps_serving(
    tokenizer: Any,
) -> None:
    """Unloading the only generation model left /health at 500 for good, the process up."""
    settings = Settings(model=(CHAT_MODEL, "all-MiniLM-L6-v2"), enable_admin_routes=True)
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        last_generation = await http.post("/models/unload", json={"model": CHAT_MODEL})
        embedding = await http.post("/models/unload", json={"model": "all-MiniLM-L6-v2"})
        only = await http.post("/models/unload", json={"model": CHAT_MODEL})
        health = await http.get("/health")
        served = await http.post("/v1/chat/completions", json=chat(CHAT_MODEL))
    assert last_generation.status_code == 409
    assert "last generation model" in last_generation.json()["error"]["message"]
    assert embedding.status_code == 200
    assert only.status_code == 409 and "only model" in only.json()["error"]["message"]
    assert health.status_code == 200 and served.status_code == 200


async def test_an_engine_whose_models_all_stopped_unasked_stops_the_process(
    tokenizer: Any,
) -> None:
    """Whatever ends every model's actor without a drain or a fatal error is fatal too."""
    stops: list[str] = []
    app = create_app(Settings(), load=fake_loader(tokenizer), on_fatal=lambda: stops.append("x"))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        app.engine.models.stop("gone")  # as if the last actor ended by itself
        while not app.engine.has_stopped:
            await trio.sleep(0.01)
        health = await http.get("/health")
    assert stops == ["x"]
    assert health.status_code == 500


async def test_reset_prefix_cache_is_an_admin_route_and_an_event(tokenizer: Any) -> None:
    settings = Settings(model=(CHAT_MODEL,), enable_admin_routes=True)
    app = create_app(settings, load=fake_loader(tokenizer))
    seen: list[Any] = []
    app.engine.bus.subscribe(seen.append)
    long_chat = {**chat(CHAT_MODEL), "messages": [{"role": "user", "content": "hi " * 40}]}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        await http.post("/v1/chat/completions", json=long_chat)
        reset = await http.post("/reset_prefix_cache")
        while not any(e.event.type == "prefix_cache_reset" for e in seen):
            await trio.sleep(0.01)
        again = await http.post("/v1/chat/completions", json=long_chat)
    assert reset.json() == {"status": "ok"} and again.status_code == 200
    (event,) = [e.event for e in seen if e.event.type == "prefix_cache_reset"]
    assert event.model == CHAT_MODEL and event.num_blocks > 0
    hits = [e.event.prefix_cache_hits for e in seen if e.event.type == "engine_stepped"]
    assert sum(hits) == 0  # the second prompt found nothing cached
