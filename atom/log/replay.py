"""Projection replay: fold a request log back into the exact HTTP responses that were sent.

No model and no clock: the renderer is fed the same events, in the same order,
as the live request actor fed it, so the bytes are identical. `reparse` first
rebuilds the text events from the recorded tokens with other parsers, to show
how they would have answered the same traffic (this needs the tokenizer).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from atom.log.legacy import plan_of, with_params
from atom.projections.renderers import Renderer, renderer_for
from atom.projections.wire_audio import TranscriptionRenderer
from atom.projections.wire_pooling import PoolingRenderer
from atom.text.gathering import fed
from atom.text.pipeline import ChoicePipeline, pipeline_for
from atom.vocabulary.events import (
    ChoiceFinished,
    Envelope,
    Event,
    PoolingRequested,
    PromptChunkComputed,
    ReasoningDelta,
    RequestAccepted,
    RequestCompleted,
    RequestEvent,
    RequestReceived,
    RequestReleased,
    RequestScheduled,
    TextDelta,
    TokensSampled,
    ToolArgumentsDelta,
    ToolCallStarted,
    TranscriptionRequested,
    WeightsUpdated,
)


@dataclass(slots=True, kw_only=True)
class ReplayedResponse:
    """What the client received: status and content type (None if nothing was sent) and body."""

    request_id: str
    status: int | None = None
    content_type: str | None = None
    body: bytearray = field(default_factory=bytearray)
    is_complete: bool = False
    # Which weights sampled its tokens, in order: "initial" (those the server started
    # with) or a weights_updated event's weight_version (else its source).
    weights: list[str] = field(default_factory=list)

    def feed(self, renderer: Renderer, event: Event) -> None:
        output = renderer.feed(event)
        if output is None:
            return
        if self.status is None:
            self.status, self.content_type = output.status, output.content_type
        self.body += output.body
        self.is_complete = output.is_final


def project(envelopes: Iterable[Envelope]) -> list[ReplayedResponse]:
    """One response per logged request (generation or pooling), in arrival order. A
    request id a client reused after its first request ended names the newest one from
    its `request_received` on; the earlier one keeps what it had."""
    replayed: list[ReplayedResponse] = []
    live: dict[str, tuple[Renderer, ReplayedResponse, str]] = {}  # id → renderer, answer, model
    weights: dict[str, str] = {}  # served model → the weights it runs, once replaced
    for envelope in envelopes:
        event = envelope.event
        if isinstance(event, RequestReceived | PoolingRequested | TranscriptionRequested):
            response = ReplayedResponse(request_id=event.request_id)
            live[event.request_id] = (renderer_of(event), response, event.model)
            replayed.append(response)
        elif isinstance(event, WeightsUpdated):
            weights[event.model] = event.weight_version or event.source
        elif isinstance(event, RequestEvent) and event.request_id in live:
            renderer, response, model = live[event.request_id]
            response.feed(renderer, event)
            if isinstance(event, TokensSampled):
                label = weights.get(model, "initial")
                if response.weights[-1:] != [label]:
                    response.weights.append(label)
    return replayed


def renderer_of(received: RequestReceived | PoolingRequested | TranscriptionRequested) -> Renderer:
    if isinstance(received, PoolingRequested):
        return PoolingRenderer(received)
    if isinstance(received, TranscriptionRequested):
        return TranscriptionRenderer(received)
    return renderer_for(received, plan_of(received).shape)


_TEXT_EVENTS = (TextDelta, ReasoningDelta, ToolCallStarted, ToolArgumentsDelta, ChoiceFinished)
# What the Batcher publishes for a request: never a sign that the request took its tokens.
_ENGINE_EVENTS = (TokensSampled, RequestScheduled, PromptChunkComputed, RequestReleased)


def reparse(
    envelopes: Iterable[Envelope],
    tokenizer: Any,
    *,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> Iterator[Envelope]:
    """The log as it would have been with other parsers: each request's plan gets the
    given parsers, and every choice's text events are rebuilt from the recorded tokens
    by the pipeline the live server builds from a plan (atom.text.pipeline)."""
    rebuild = _Reparse(tokenizer, tool_call_parser, reasoning_parser)
    for envelope in envelopes:
        yield from rebuild.feed(envelope)
    yield from rebuild.flush()


class _Reparse:
    def __init__(
        self, tokenizer: Any, tool_call_parser: str | None, reasoning_parser: str | None
    ) -> None:
        self._tokenizer = tokenizer
        self._parsers = (tool_call_parser, reasoning_parser)
        self._received: dict[str, RequestReceived] = {}
        self._pipelines: dict[str, list[ChoicePipeline]] = {}  # a request's, a choice
        self._taken: dict[str, list[Envelope]] = {}  # a request's tokens since its output
        self._reasoning_tokens: dict[str, int] = {}

    def feed(self, envelope: Envelope) -> Iterator[Envelope]:
        event = envelope.event
        rid = getattr(event, "request_id", None)
        if rid in self._taken and not isinstance(event, _ENGINE_EVENTS):
            # The request's first output since it took these tokens: as live, their
            # text comes out of one feed (atom/text/gathering.py), just before it.
            yield from self._rebuilt(rid, self._taken.pop(rid))
        if isinstance(event, _TEXT_EVENTS):
            return  # rebuilt from the tokens
        if isinstance(event, RequestReceived):
            self._received[event.request_id] = event
        elif isinstance(event, RequestAccepted):
            self._start(event)
        elif isinstance(event, RequestCompleted):
            total = self._reasoning_tokens.get(event.request_id, 0)
            event = replace(event, reasoning_tokens=total if self._parsers[1] else None)
        yield replace(envelope, event=event)
        if isinstance(event, TokensSampled) and event.request_id in self._pipelines:
            self._taken.setdefault(event.request_id, []).append(envelope)

    def flush(self) -> Iterator[Envelope]:
        """The text of tokens no output followed (the log ends there)."""
        for rid, taken in self._taken.items():
            yield from self._rebuilt(rid, taken)
        self._taken.clear()

    def _start(self, accepted: RequestAccepted) -> None:
        received = self._received.get(accepted.request_id)
        if received is None:
            return  # the log began after this request did
        plan = with_params(plan_of(received), received, accepted)
        plan = replace(plan, text=plan.text.with_parsers(*self._parsers))
        prompts = accepted.prompts
        self._pipelines[accepted.request_id] = [
            pipeline_for(accepted.request_id, plan, prompts, idx, self._tokenizer)
            for idx in range(accepted.num_choices)
        ]

    def _rebuilt(self, request_id: str, taken: list[Envelope]) -> Iterator[Envelope]:
        """The text events of the tokens a request took in one wake, stamped like the
        last of them."""
        steps = [e.event for e in taken if isinstance(e.event, TokensSampled)]
        for new in fed(self._pipelines[request_id], steps):
            if isinstance(new, ChoiceFinished) and new.num_reasoning_tokens:
                self._reasoning_tokens[request_id] = (
                    self._reasoning_tokens.get(request_id, 0) + new.num_reasoning_tokens
                )
            yield Envelope(seq=taken[-1].seq, at=taken[-1].at, event=new)
