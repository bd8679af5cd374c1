"""Projection replay: fold a request log back into the exact HTTP responses that were sent.

No model and no clock: the renderer is fed the same events, in the same order,
as the live request actor fed it, so the bytes are identical.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from atom.events import Envelope, Event, RequestEvent, RequestReceived
from atom.wire import BodyRenderer, StreamRenderer, renderer_for


@dataclass(slots=True, kw_only=True)
class ReplayedResponse:
    """What the client received: status and content type (None if nothing was sent) and body."""

    request_id: str
    status: int | None = None
    content_type: str | None = None
    body: bytearray = field(default_factory=bytearray)
    is_complete: bool = False

    def feed(self, renderer: StreamRenderer | BodyRenderer, event: Event) -> None:
        output = renderer.feed(event)
        if output is None:
            return
        if self.status is None:
            self.status, self.content_type = output.status, output.content_type
        self.body += output.body
        self.is_complete = output.is_final


def project(envelopes: Iterable[Envelope]) -> list[ReplayedResponse]:
    """One response per logged generation request, in arrival order."""
    renderers: dict[str, StreamRenderer | BodyRenderer] = {}
    responses: dict[str, ReplayedResponse] = {}
    for envelope in envelopes:
        event = envelope.event
        if isinstance(event, RequestReceived):
            renderers[event.request_id] = renderer_for(event)
            responses[event.request_id] = ReplayedResponse(request_id=event.request_id)
        elif isinstance(event, RequestEvent) and event.request_id in renderers:
            responses[event.request_id].feed(renderers[event.request_id], event)
    return list(responses.values())
