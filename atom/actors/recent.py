"""RecentRequests: the last requests' events in memory, for the web page's request view.

A bus subscriber, made with `--request-log` (the events it shows are those the log
gets). It keeps the envelopes of the last `max_requests` requests from their
`request_received` (or `pooling_requested`, `transcription_requested`) on, at most
`max_events` a request (a long answer's later tokens are dropped and counted), so
memory stays bounded.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from atom.actors.bus import EventBus
from atom.vocabulary.events import (
    Envelope,
    PoolingFinished,
    PoolingRequested,
    RequestAborted,
    RequestCompleted,
    RequestEvent,
    RequestFailed,
    RequestReceived,
    TranscriptionFinished,
    TranscriptionRequested,
)

MAX_REQUESTS = 100
MAX_EVENTS = 20_000
OPENING = (RequestReceived, PoolingRequested, TranscriptionRequested)  # a request's first event


@dataclass(slots=True)
class Recorded:
    """One request's envelopes, in publishing order."""

    envelopes: list[Envelope] = field(default_factory=list)  # from request_received on
    num_dropped: int = 0  # envelopes past max_events
    state: str = "running"  # then "completed", "failed" or "aborted"

    @property
    def first(self) -> Envelope:
        """Its request_received or pooling_requested."""
        return self.envelopes[0]

    @property
    def owner(self) -> str | None:
        """The key that made it (atom/vocabulary/tenant.py)."""
        event = self.first.event
        assert isinstance(event, OPENING)
        return event.owner

    @property
    def model(self) -> str:
        event = self.first.event
        assert isinstance(event, OPENING)
        return event.model

    @property
    def endpoint(self) -> str:
        event = self.first.event
        if isinstance(event, PoolingRequested):
            return "pooling"
        assert isinstance(event, RequestReceived | TranscriptionRequested)
        return event.endpoint.value


_ENDS = {
    RequestCompleted: "completed",
    PoolingFinished: "completed",
    TranscriptionFinished: "completed",
    RequestFailed: "failed",
    RequestAborted: "aborted",
}


class RecentRequests:
    def __init__(self, max_requests: int = MAX_REQUESTS, max_events: int = MAX_EVENTS) -> None:
        self._max_requests = max_requests
        self._max_events = max_events
        self._requests: OrderedDict[str, Recorded] = OrderedDict()  # oldest first

    @classmethod
    def on(cls, bus: EventBus) -> RecentRequests:
        recent = cls()
        bus.subscribe(recent.keep)
        return recent

    def keep(self, envelope: Envelope) -> None:
        """Bus subscriber: note a request event (a new request may push out the oldest)."""
        event = envelope.event
        if not isinstance(event, RequestEvent):
            return
        if isinstance(event, OPENING):
            self._keep_earlier(event.request_id)
            self._requests[event.request_id] = Recorded()
            while len(self._requests) > self._max_requests:
                self._requests.popitem(last=False)
        recorded = self._requests.get(event.request_id)
        if recorded is None:
            return
        if len(recorded.envelopes) < self._max_events:
            recorded.envelopes.append(envelope)
        else:
            recorded.num_dropped += 1
        recorded.state = _ENDS.get(type(event), recorded.state)

    def _keep_earlier(self, request_id: str) -> None:
        """A client may reuse its `x-request-id` once the first request has ended: the
        earlier one stays, under `<id>@<seq of its first event>`."""
        earlier = self._requests.pop(request_id, None)
        if earlier is not None:
            self._requests[f"{request_id}@{earlier.first.seq}"] = earlier

    def newest_first(self) -> list[tuple[str, Recorded]]:
        return list(reversed(self._requests.items()))

    def get(self, request_id: str) -> Recorded | None:
        return self._requests.get(request_id)
