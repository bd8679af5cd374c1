"""The renderer of a response, by its plan's shape: OpenAI's chat and completions
formats (`wire.py`), the Responses API's (`wire_responses.py`), Anthropic's Messages
format (`wire_anthropic.py`) or Ollama's (`wire_ollama.py`), all in this folder.
The live request actor and `atom replay` both take it from here."""

from __future__ import annotations

from typing import Protocol

from atom.projections.wire import BodyRenderer, Output, StreamRenderer
from atom.projections.wire_anthropic import MessagesBodyRenderer, MessagesStreamRenderer
from atom.projections.wire_ollama import OllamaBodyRenderer, OllamaStreamRenderer
from atom.projections.wire_responses import ResponsesBodyRenderer, ResponsesStreamRenderer
from atom.vocabulary.events import Event, RequestReceived
from atom.vocabulary.plan import Endpoint, ResponseShape


class Renderer(Protocol):
    has_started: bool  # the response's first bytes are out (its status is fixed)

    def feed(self, event: Event) -> Output | None: ...


def renderer_for(received: RequestReceived, shape: ResponseShape) -> Renderer:
    if shape.endpoint is Endpoint.RESPONSES:
        if shape.stream:
            return ResponsesStreamRenderer(received, shape)
        return ResponsesBodyRenderer(received, shape)
    if shape.endpoint in (Endpoint.OLLAMA_CHAT, Endpoint.OLLAMA_GENERATE):
        ollama = OllamaStreamRenderer if shape.stream else OllamaBodyRenderer
        return ollama(received, is_chat=shape.endpoint is Endpoint.OLLAMA_CHAT)
    if shape.endpoint is Endpoint.MESSAGES:
        if shape.stream:
            return MessagesStreamRenderer(received)
        return MessagesBodyRenderer(received)
    return StreamRenderer(received, shape) if shape.stream else BodyRenderer(received, shape)
