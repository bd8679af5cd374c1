"""The Responses API's store: finished responses kept for `GET /v1/responses/{id}`,
`input_items` and `previous_response_id`, as a projection of the event stream.

It folds the same events the live renderer does (through the Responses body
renderer), so a stored response is the one that was sent; fed the request log at
start-up, it comes back after a restart (a deletion is an event too, so it stays
deleted). Bounded: the least recently used response leaves first.

With `--responses-store-dir` every replica's store also folds the others' stored
responses (atom/log/shared_responses.py), so any replica finds any of them.

Each response belongs to the API key that made it (`RequestReceived.owner`): a lookup
by another key finds nothing (a 404), unless that key sees all (atom/vocabulary/tenant.py).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from atom.projections.wire_responses import ResponsesBodyRenderer
from atom.vocabulary.events import (
    Envelope,
    RequestAborted,
    RequestEvent,
    RequestFailed,
    RequestReceived,
    ResponseCancelAsked,
    ResponseDeleted,
)
from atom.vocabulary.plan import Endpoint
from atom.vocabulary.tenant import Tenant

MAX_CHAIN = 100  # previous_response_id links a conversation may follow


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    response: dict[str, Any]  # the Response object as sent
    input_items: tuple[dict[str, Any], ...]  # the request's input, as items
    previous_response_id: str | None = None
    owner: str | None = None  # the key that made it (RequestReceived.owner)


class ResponsesStore:
    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._done: OrderedDict[str, StoredResponse] = OrderedDict()
        self._pending: dict[str, tuple[ResponsesBodyRenderer, RequestReceived]] = {}
        self._deleted: set[str] = set()  # deleted while still running
        self._gone: OrderedDict[str, None] = OrderedDict()  # deleted ids, not to be reused
        # Brings in other replicas' events before a miss is final (atom/log/shared_responses.py).
        self.refresh: Callable[[], None] | None = None

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
        if isinstance(event, ResponseCancelAsked):
            return  # a request to the replica running it; its end follows as events
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
        if not received.plan.shape.background:
            return
        if isinstance(event, RequestFailed):
            self._keep(received, renderer.snapshot("failed", event))
        else:
            self._keep(received, renderer.snapshot("cancelled"))

    def _start(self, received: RequestReceived) -> None:
        plan = received.plan
        if plan is None or plan.shape.endpoint is not Endpoint.RESPONSES:
            return
        if plan.shape.store:
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
            owner=received.owner,
        )
        while len(self._done) > self._max:
            self._done.popitem(last=False)

    def get(self, response_id: str, tenant: Tenant) -> StoredResponse | None:
        """A finished response, or one still running as it stands (`in_progress`); None
        for an unknown id or another key's response."""
        found = self._get(response_id, tenant)
        if self.refresh is not None and (
            found is None or found.response["status"] == "in_progress"
        ):
            self.refresh()  # another replica's, or its end, may have come since the last poll
            found = self._get(response_id, tenant)
        return found

    def _get(self, response_id: str, tenant: Tenant) -> StoredResponse | None:
        if response_id in self._pending:
            renderer, received = self._pending[response_id]
            if not tenant.may_see(received.owner):
                return None  # checked before the snapshot is rendered
            assert received.plan is not None
            items = received.plan.shape.input_items
            response = renderer.snapshot("in_progress")
            return StoredResponse(response=response, input_items=items, owner=received.owner)
        stored = self._done.get(response_id)
        if stored is None or not tenant.may_see(stored.owner):
            return None
        self._done.move_to_end(response_id)
        return stored

    def has(self, response_id: str) -> bool:
        """Whether any key's response holds this id, or held it until it was deleted."""
        return (
            response_id in self._pending or response_id in self._done or response_id in self._gone
        )

    def _delete(self, response_id: str) -> None:
        """Deleted while running: it is dropped when it finishes."""
        if response_id in self._pending:
            self._deleted.add(response_id)
        self._done.pop(response_id, None)
        self._gone[response_id] = None
        while len(self._gone) > self._max:
            self._gone.popitem(last=False)

    def conversation(self, response_id: str, tenant: Tenant) -> list[dict[str, Any]]:
        """Every input item and output item up to and including this response, oldest
        first, as input items (what `previous_response_id` continues). LookupError
        for a response this tenant cannot see; ValueError for a chain that loops or runs
        past MAX_CHAIN links."""
        chain: list[StoredResponse] = []
        seen: set[str] = set()
        next_id: str | None = response_id
        while next_id is not None:
            if next_id in seen:
                raise ValueError(
                    f"the conversation's previous_response_id links loop at {next_id!r}"
                )
            stored = self.get(next_id, tenant)
            if stored is None and not chain:
                raise LookupError(next_id)
            if stored is None:
                break  # an earlier link the store let go (LRU): the conversation from here
            if len(chain) == MAX_CHAIN:
                raise ValueError(f"the conversation is longer than {MAX_CHAIN} responses")
            chain.append(stored)
            seen.add(next_id)
            next_id = stored.previous_response_id
        items: list[dict[str, Any]] = []
        for stored in reversed(chain):
            outputs = [item for item in stored.response["output"] if item["type"] != "reasoning"]
            items += [*stored.input_items, *outputs]
        return items
