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

from atom.events import (
    ChoiceFinished,
    Envelope,
    Event,
    ReasoningDelta,
    RequestAccepted,
    RequestCompleted,
    RequestEvent,
    RequestReceived,
    TextDelta,
    TokensSampled,
    ToolArgumentsDelta,
    ToolCallStarted,
)
from atom.text.choice import ChoiceText
from atom.text.parsers import choice_formats
from atom.text.pipeline import ChoicePipeline, ChoiceSetup
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


_TEXT_EVENTS = (TextDelta, ReasoningDelta, ToolCallStarted, ToolArgumentsDelta, ChoiceFinished)


def reparse(
    envelopes: Iterable[Envelope],
    tokenizer: Any,
    *,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> Iterator[Envelope]:
    """The log as it would have been with other parsers: every choice's text events are
    rebuilt from the recorded tokens (through the same ChoicePipeline as live)."""
    pipelines: dict[tuple[str, int], ChoicePipeline] = {}
    bodies: dict[str, dict[str, Any]] = {}
    reasoning_tokens: dict[str, int] = {}
    for env in envelopes:
        event = env.event
        if isinstance(event, RequestReceived):
            bodies[event.request_id] = event.body
        elif isinstance(event, RequestAccepted):
            pipelines.update(
                _pipelines(
                    event,
                    bodies.get(event.request_id, {}),
                    tokenizer,
                    tool_call_parser,
                    reasoning_parser,
                )
            )
        elif isinstance(event, _TEXT_EVENTS):
            continue
        if isinstance(event, RequestCompleted) and reasoning_parser:
            event = replace(event, reasoning_tokens=reasoning_tokens.get(event.request_id, 0))
        yield replace(env, event=event)
        if isinstance(event, TokensSampled):
            for new in pipelines[(event.request_id, event.choice_idx)].feed(event):
                if isinstance(new, ChoiceFinished) and new.num_reasoning_tokens:
                    rid = new.request_id
                    reasoning_tokens[rid] = reasoning_tokens.get(rid, 0) + new.num_reasoning_tokens
                yield Envelope(seq=env.seq, at=env.at, event=new)


def _pipelines(
    accepted: RequestAccepted,
    body: dict[str, Any],
    tokenizer: Any,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> dict[tuple[str, int], ChoicePipeline]:
    fmt, reasoning = choice_formats(
        tool_call_parser,
        reasoning_parser,
        tools=body.get("tools") or [],
        tool_choice=body.get("tool_choice"),
        parallel_tool_calls=body.get("parallel_tool_calls", True) is not False,
        template_kwargs=body.get("chat_template_kwargs") or {},
    )
    prompts = (accepted.prompt_ids, *accepted.more_prompt_ids)
    per_prompt = accepted.num_choices // len(prompts)
    out = {}
    for idx in range(accepted.num_choices):
        setup = ChoiceSetup(
            request_id=accepted.request_id,
            choice_idx=idx,
            prompt_ids=prompts[idx // per_prompt],
            tool_format=fmt,
            reasoning_format=reasoning,
        )
        out[(accepted.request_id, idx)] = ChoicePipeline(
            setup, ChoiceText(tokenizer, accepted.params)
        )
    return out
