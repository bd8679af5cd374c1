"""The renderer of a response, by its plan's shape: OpenAI's chat and completions
formats (atom/wire.py), the Responses API's (atom/wire_responses.py) or Anthropic's
Messages format (atom/wire_anthropic.py).
The live request actor and `atom replay` both take it from here."""

from __future__ import annotations

from typing import Protocol

from atom.events import Event, RequestReceived
from atom.plan import Endpoint, ResponseShape
from atom.wire import BodyRenderer, Output, StreamRenderer
from atom.wire_anthropic import MessagesBodyRenderer, MessagesStreamRenderer
from atom.wire_responses import ResponsesBodyRenderer, ResponsesStreamRenderer


class Renderer(Protocol):
    has_started: bool  # the response's first bytes are out (its status is fixed)

    def feed(self, event: Event) -> Output | None: ...


def renderer_for(received: RequestReceived, shape: ResponseShape) -> Renderer:
    if shape.endpoint is Endpoint.RESPONSES:
        if shape.stream:
            return ResponsesStreamRenderer(received, shape)
        return ResponsesBodyRenderer(received, shape)
    if shape.endpoint is Endpoint.MESSAGES:
        if shape.stream:
            return MessagesStreamRenderer(received)
        return MessagesBodyRenderer(received)
    return StreamRenderer(received, shape) if shape.stream else BodyRenderer(received, shape)
