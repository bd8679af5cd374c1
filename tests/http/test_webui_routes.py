"""The web page's routes and feeds over real HTTP (FakeRunner, the real tokenizer); the
page itself is driven in a real browser by tests/e2e/test_webui.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from atom.http.app import create_app
from atom.http.webui import PAGE_DIR, VENDOR_DIR
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, wait_ready

MODEL = "SmolLM2-135M-Instruct"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def test_the_page_and_its_files_are_served_with_a_strict_policy(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/")
        script = await http.get("/webui/chat.js")
        vendored = await http.get("/webui/purify.min.js")
        style = await http.get("/webui/style.css")
        missing = await http.get("/webui/secrets.txt")
        escaped = await http.get("/webui/..%2Fconfig.py")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text == (PAGE_DIR / "index.html").read_text()
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("style-src")[0]
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.text == (PAGE_DIR / "chat.js").read_text()
    assert vendored.content == (VENDOR_DIR / "purify.min.js").read_bytes()
    assert style.headers["content-type"].startswith("text/css")
    assert missing.status_code == escaped.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


async def test_every_file_the_page_names_is_served(tokenizer: Any) -> None:
    """index.html's links and scripts, and the modules' imports, all resolve."""
    named = set(re.findall(r'"/webui/([\w.-]+)"', (PAGE_DIR / "index.html").read_text()))
    for module in PAGE_DIR.glob("*.js"):
        named |= set(re.findall(r'from "\./([\w.-]+)"', module.read_text()))
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        statuses = {name: (await http.get(f"/webui/{name}")).status_code for name in named}
    assert {"marked.umd.js", "highlight.min.js", "chat.js", "api.js"} <= named
    assert set(statuses.values()) == {200}, statuses


async def test_with_keys_the_page_loads_but_its_feeds_need_one(tokenizer: Any) -> None:
    app = create_app(Settings(api_key=("k",)), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        open_ = [await http.get(path) for path in ("/", "/webui/main.js")]
        bare = [await http.get(p) for p in ("/webui/api/engine", "/webui/api/requests")]
        keyed = await http.get("/webui/api/engine", headers={"authorization": "Bearer k"})
    assert [r.status_code for r in open_] == [200, 200]
    assert [r.status_code for r in bare] == [401, 401]
    assert keyed.status_code == 200


async def test_the_engine_feed_is_the_metrics_fold(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        for _ in range(2):
            assert (await http.post("/v1/chat/completions", json=CHAT)).status_code == 200
        feed = (await http.get("/webui/api/engine")).json()
        metrics = (await http.get("/metrics")).text
    ours = feed["models"][MODEL]
    for family in ("generation_tokens_total", "prompt_tokens_total", "num_requests_running"):
        sample = re.search(rf'atom:{family}{{model_name="{MODEL}"}} (\S+)', metrics)
        assert sample and float(sample.group(1)) == ours[family], family
    assert ours["generation_tokens_total"] == 8 and ours["num_requests_running"] == 0
    assert ours["time_to_first_token_seconds_count"] == 2
    assert feed["request_log"] is False and feed["at"] > 0


async def test_without_a_request_log_there_is_no_request_to_show(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        answer = await http.post("/v1/chat/completions", json=CHAT)
        listing = (await http.get("/webui/api/requests")).json()
        one = await http.get(f"/webui/api/requests/{answer.json()['id']}")
    assert listing == {"request_log": False, "data": []}
    assert one.status_code == 404 and "--request-log" in one.json()["error"]["message"]


async def test_the_request_feed_gives_the_events_and_the_exact_bytes_sent(
    tokenizer: Any, tmp_path: Path
) -> None:
    settings = Settings(request_log=str(tmp_path / "log.jsonl"))
    app = create_app(settings, load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_ready(app)
        first = await http.post("/v1/chat/completions", json=CHAT)
        streamed = await http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3,
                                                            "stream": True})  # fmt: skip
        listing = (await http.get("/webui/api/requests")).json()
        details = [
            (await http.get(f"/webui/api/requests/{item['id']}")).json() for item in listing["data"]
        ]
    assert listing["request_log"] is True
    assert [item["endpoint"] for item in listing["data"]] == ["completions", "chat.completions"]
    assert [item["state"] for item in listing["data"]] == ["completed", "completed"]
    assert listing["data"][1]["id"] == first.json()["id"]
    for sent, shown in zip((streamed, first), details, strict=True):
        assert shown["response"]["status"] == 200 and shown["response"]["is_complete"]
        assert shown["response"]["body"] == sent.text
        types = [event["type"] for event in shown["events"]]
        assert types[0] == "request_received" and "tokens_sampled" in types
        assert shown["num_events"] == len(shown["events"]) and shown["num_dropped"] == 0
    assert details[1]["events"][0]["body"] == CHAT
