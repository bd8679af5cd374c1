"""The Responses API's stored responses: `GET /v1/responses/{id}`, its `input_items`,
and `DELETE /v1/responses/{id}` (atom/responses_store.py keeps them)."""

from __future__ import annotations

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.errors import InvalidRequest, ResponseNotFound
from atom.events import ResponseDeleted
from atom.responses_store import StoredResponse
from atom.wire import dumps


def register(app: QuartTrio, engine: Engine) -> None:
    def stored(response_id: str) -> StoredResponse:
        found = engine.responses.get(response_id)
        if found is None:
            raise ResponseNotFound(f"Response with id {response_id!r} not found.")
        return found

    @app.get("/v1/responses/<response_id>")
    async def get_response(response_id: str) -> Response:
        return _json(stored(response_id).response)

    @app.get("/v1/responses/<response_id>/input_items")
    async def input_items(response_id: str) -> Response:
        order = request.args.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidRequest("order must be asc or desc", param="order")
        items = [
            {"id": item.get("id") or f"item_{response_id.removeprefix('resp_')}_{i}", **item}
            for i, item in enumerate(stored(response_id).input_items)
        ]
        if order == "desc":
            items.reverse()
        first, last = (items[0]["id"], items[-1]["id"]) if items else (None, None)
        page = {"object": "list", "data": items, "first_id": first, "last_id": last}
        return _json({**page, "has_more": False})

    @app.delete("/v1/responses/<response_id>")
    async def delete_response(response_id: str) -> Response:
        if not engine.responses.has(response_id):
            raise ResponseNotFound(f"Response with id {response_id!r} not found.")
        engine.bus.publish(ResponseDeleted(request_id=response_id))  # logged: it stays deleted
        return _json({"id": response_id, "object": "response", "deleted": True})


def _json(obj: object) -> Response:
    return Response(dumps(obj), content_type="application/json")
