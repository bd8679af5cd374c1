"""The Responses API's stored responses: `GET /v1/responses/{id}`, its `input_items`,
`DELETE /v1/responses/{id}` and, for a background response, `POST …/cancel`
(atom/projections/responses_store.py keeps them; atom/http/generation.py starts background ones)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import trio
from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.http.access import tenant_in
from atom.projections.responses_store import StoredResponse
from atom.projections.wire import dumps
from atom.vocabulary.errors import InvalidRequest, ResponseNotFound
from atom.vocabulary.events import ResponseCancelAsked, ResponseDeleted

CANCEL_WAIT_S = 10.0  # a cancelled response's end is awaited this long


def register(app: QuartTrio, engine: Engine) -> None:
    @app.get("/v1/responses/<response_id>")
    async def get_response(response_id: str) -> Response:
        if request.args.get("stream") == "true":
            return _resumed(engine, response_id, request.args.get("starting_after", "-1"))
        return _json(_stored(engine, response_id).response)

    @app.get("/v1/responses/<response_id>/input_items")
    async def input_items(response_id: str) -> Response:
        order = request.args.get("order", "desc")
        return _json(_items_page(_stored(engine, response_id), response_id, order))

    @app.post("/v1/responses/<response_id>/cancel")
    async def cancel_response(response_id: str) -> Response:
        return _json(await _cancel(engine, response_id))

    @app.delete("/v1/responses/<response_id>")
    async def delete_response(response_id: str) -> Response:
        _stored(engine, response_id)  # 404 for an unknown id or another key's
        engine.bus.publish(ResponseDeleted(request_id=response_id))  # logged: it stays deleted
        return _json({"id": response_id, "object": "response", "deleted": True})


def _stored(engine: Engine, response_id: str) -> StoredResponse:
    """The response as this request's key may see it: ResponseNotFound (404) for an
    unknown id and for another key's response alike."""
    found = engine.responses.get(response_id, tenant_in(request.scope))
    if found is None:
        raise ResponseNotFound(f"Response with id {response_id!r} not found.")
    return found


def _resumed(engine: Engine, response_id: str, starting_after: str) -> Response:
    """A running streamed background response's events after `starting_after` (a
    sequence number), then the rest as they come."""
    _stored(engine, response_id)  # 404 for an unknown id or another key's
    running = engine.detached.get(response_id)
    if running is None or running.tap is None:
        raise InvalidRequest(
            "only a running, streamed background response can be streamed again; "
            "GET it without stream",
            param="stream",
        )
    if not starting_after.lstrip("-").isdigit():
        raise InvalidRequest("starting_after must be a sequence number", param="starting_after")
    tap = running.tap

    async def events() -> AsyncIterator[bytes]:
        async for event, _ in tap.follow(max(int(starting_after) + 1, 0)):
            yield event

    return Response(events(), content_type="text/event-stream")


def _items_page(stored: StoredResponse, response_id: str, order: str) -> dict[str, Any]:
    """The request's input items as one page (`order` desc, OpenAI's default, or asc)."""
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be asc or desc", param="order")
    items = [
        {"id": item.get("id") or f"item_{response_id.removeprefix('resp_')}_{i}", **item}
        for i, item in enumerate(stored.input_items)
    ]
    if order == "desc":
        items.reverse()
    first, last = (items[0]["id"], items[-1]["id"]) if items else (None, None)
    return {"object": "list", "data": items, "first_id": first, "last_id": last, "has_more": False}


async def _cancel(engine: Engine, response_id: str) -> dict[str, Any]:
    """Abort a running background response and give it back `cancelled`; one that
    already ended is given back as it is."""
    _stored(engine, response_id)  # 404 for an unknown id or another key's
    running = engine.detached.get(response_id)
    if running is None:
        found = _stored(engine, response_id)
        if not found.response.get("background"):
            raise InvalidRequest("only a background response can be cancelled")
        if found.response["status"] == "in_progress":  # another replica runs it
            return await _cancel_elsewhere(engine, response_id)
        return found.response
    running.cancel("cancelled")
    with trio.move_on_after(CANCEL_WAIT_S):
        await running.done.wait()
    return _stored(engine, response_id).response


async def _cancel_elsewhere(engine: Engine, response_id: str) -> dict[str, Any]:
    """Ask the replica that runs it, through the shared store (atom/log/shared_responses.py),
    and give it back once its end has come back the same way."""
    engine.bus.publish(ResponseCancelAsked(request_id=response_id))
    with trio.move_on_after(CANCEL_WAIT_S):
        while _stored(engine, response_id).response["status"] == "in_progress":
            await trio.sleep(0.05)
    return _stored(engine, response_id).response


def _json(obj: object) -> Response:
    return Response(dumps(obj), content_type="application/json")
