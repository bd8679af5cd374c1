"""/openapi.json describes every route the app serves, and Schemathesis fuzzes each one
from it against a real hypercorn server (FakeRunner models): valid and invalid bodies,
a fixed number of seeded examples per operation. No answer is a 5xx, and every answer
has a documented status, content type and schema."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from atom.http.app import create_app
from atom.http.generation import ROUTES
from atom.http.openapi import openapi_document
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader, serving, serving_in_thread, wait_ready

# CI's run; a long one: FUZZ_EXAMPLES=300 FUZZ_PHASES=examples,coverage,fuzzing (the
# coverage phase tries every boundary the schemas define: ~4x the time at 8 examples).
EXAMPLES_PER_OPERATION = int(os.environ.get("FUZZ_EXAMPLES", "8"))
PHASES = os.environ.get("FUZZ_PHASES", "examples,fuzzing").split(",")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def served_routes(app: Any) -> set[tuple[str, str]]:
    """(method, path) of every route: Quart's rules and the raw-ASGI generation routes."""
    routes = {("post", path) for path in ROUTES}
    for rule in app.quart.url_map.iter_rules():
        path = rule.rule.replace("<", "{").replace(">", "}")
        if path.startswith("/static"):
            continue
        routes |= {(m.lower(), path) for m in rule.methods if m not in {"HEAD", "OPTIONS"}}
    return routes


async def test_the_document_lists_every_served_route_and_nothing_else(tokenizer: Any) -> None:
    app = create_app(Settings(), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        document = (await client.get("/openapi.json")).json()
    assert document == openapi_document(Settings())
    documented = {(m, p) for p, ops in document["paths"].items() for m in ops}
    assert documented == served_routes(app)
    assert document["openapi"] == "3.1.0"
    chat = document["paths"]["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ChatCompletionRequest"
    }
    assert "security" not in document


async def test_with_keys_every_route_but_health_metrics_and_the_page_needs_one(
    tokenizer: Any,
) -> None:
    app = create_app(Settings(api_key=("k",)), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        refused = await client.get("/openapi.json")
        document = (await client.get("/openapi.json", headers={"x-api-key": "k"})).json()
    assert refused.status_code == 401
    assert document["security"] == [{"bearer": []}, {"x-api-key": []}]
    open_ops = {
        p for p, ops in document["paths"].items() if ops.get("get", {}).get("security") == []
    }
    assert open_ops == {"/health", "/metrics", "/", "/webui/{name}"}


async def test_without_the_web_page_its_routes_are_neither_served_nor_documented(
    tokenizer: Any,
) -> None:
    app = create_app(Settings(no_webui=True), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_ready(app)
        document = (await client.get("/openapi.json")).json()
        page = await client.get("/")
    assert page.status_code == 404 and page.json()["error"]["code"] == "not_found"
    documented = {(m, p) for p, ops in document["paths"].items() for m in ops}
    assert documented == served_routes(app)
    assert not any(p == "/" or p.startswith("/webui/") for _, p in documented)


@pytest.fixture(scope="module")
def server_url(tokenizer: Any) -> Iterator[str]:
    """A real server in a thread of its own (Schemathesis calls it synchronously)."""
    with serving_in_thread(create_app(FUZZ_SETTINGS, load=fake_loader(tokenizer))) as url:
        yield url


# The schema the server below serves (the first test checks the served one is this).
FUZZ_SETTINGS = Settings(max_n=4)
fuzzed = schemathesis.openapi.from_dict(openapi_document(FUZZ_SETTINGS))
fuzzed.config.phases.update(phases=PHASES)
fuzzed.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], deterministic=True
)


@fuzzed.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_every_operation_answers_as_documented(case: Any, server_url: str) -> None:
    case.call_and_validate(base_url=server_url, checks=CHECKS, timeout=30)
