"""The Responses API's store: finished responses kept for `GET /v1/responses/{id}`,
`input_items` and `previous_response_id`, as a projection of the event stream.

It folds the same events the live renderer does (through the Responses body
renderer), so a stored response is the one that was sent; fed the request log at
start-up, it comes back after a restart (a deletion is an event too, so it stays
deleted). Bounded: the least recently used response leaves first.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from atom.events import (
    Envelope,
    RequestAborted,
    RequestEvent,
    RequestFailed,
    RequestReceived,
    ResponseDeleted,
)
from atom.plan import Endpoint
from atom.wire_responses import ResponsesBodyRenderer


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    response: dict[str, Any]  # the Response object as sent
    input_items: tuple[dict[str, Any], ...]  # the request's input, as items
    previous_response_id: str | None = None


class ResponsesStore:
    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._done: OrderedDict[str, StoredResponse] = OrderedDict()
        self._pending: dict[str, tuple[ResponsesBodyRenderer, RequestReceived]] = {}
        self._deleted: set[str] = set()  # deleted while still running

    def apply(self, envelope: Envelope) -> None:
        """A bus subscriber; also fed the request log at start-up."""
        event = envelope.event
        if not isinstance(event, RequestEvent):
            return
        if isinstance(event, RequestReceived):
            self._start(event)
            return
        if isinstance(event, ResponseDeleted):
            self._delete(event.request_id)
            return
        pending = self._pending.get(event.request_id)
        if pending is None:
            return
        if isinstance(event, RequestFailed | RequestAborted):
            self._end_early(event)
            return
        output = pending[0].feed(event)
        if output is not None and output.is_final:
            del self._pending[event.request_id]
            self._keep(pending[1], json.loads(output.body))

    def _end_early(self, event: RequestFailed | RequestAborted) -> None:
        """A background response is kept as `failed` or `cancelled`; another one that
        did not finish was never whole, and is dropped."""
        renderer, received = self._pending.pop(event.request_id)
        assert received.plan is not None
        if not received.plan.shape.request_fields.get("background"):
            return
        if isinstance(event, RequestFailed):
            self._keep(received, renderer.snapshot("failed", event))
        else:
            self._keep(received, renderer.snapshot("cancelled"))

    def _start(self, received: RequestReceived) -> None:
        plan = received.plan
        if plan is None or plan.shape.endpoint is not Endpoint.RESPONSES:
            return
        if plan.shape.request_fields.get("store", True):
            self._pending[received.request_id] = (
                ResponsesBodyRenderer(received, plan.shape),
                received,
            )

    def _keep(self, received: RequestReceived, response: dict[str, Any]) -> None:
        if received.request_id in self._deleted:
            self._deleted.discard(received.request_id)
            return
        assert received.plan is not None
        shape = received.plan.shape
        self._done[received.request_id] = StoredResponse(
            response=response,
            input_items=shape.input_items,
            previous_response_id=response.get("previous_response_id"),
        )
        while len(self._done) > self._max:
            self._done.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        """A finished response, or one still running as it stands (`in_progress`)."""
        if response_id in self._pending:
            renderer, received = self._pending[response_id]
            assert received.plan is not None
            items = received.plan.shape.input_items
            return StoredResponse(response=renderer.snapshot("in_progress"), input_items=items)
        stored = self._done.get(response_id)
        if stored is not None:
            self._done.move_to_end(response_id)
        return stored

    def has(self, response_id: str) -> bool:
        return response_id in self._pending or response_id in self._done

    def _delete(self, response_id: str) -> None:
        """Deleted while running: it is dropped when it finishes."""
        if response_id in self._pending:
            self._deleted.add(response_id)
        self._done.pop(response_id, None)

    def conversation(self, response_id: str) -> list[dict[str, Any]] | None:
        """Every input item and output item up to and including this response, oldest
        first, as input items (what `previous_response_id` continues)."""
        stored = self.get(response_id)
        if stored is None:
            return None
        earlier: list[dict[str, Any]] = []
        if stored.previous_response_id is not None:
            earlier = self.conversation(stored.previous_response_id) or []
        outputs = [item for item in stored.response["output"] if item["type"] != "reasoning"]
        return [*earlier, *stored.input_items, *outputs]
