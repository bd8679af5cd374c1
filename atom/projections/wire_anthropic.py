"""Anthropic's Messages API wire format as a projection of a request's events.

The same events the OpenAI renderers read (atom/projections/wire.py) become content blocks:
reasoning → `thinking`, text → `text`, each tool call → `tool_use` (its arguments
parsed into `input`). `stop_reason` is `max_tokens` at the length limit, `tool_use`
when the answer calls tools, `stop_sequence` when a stop string ended it, else
`end_turn`. `usage.input_tokens` counts the prompt tokens not read from the prefix
cache, `cache_read_input_tokens` those that were (Anthropic's split).
"""

from __future__ import annotations

from typing import Any

from atom.projections.answer import Answer, Block, arguments_object, is_content
from atom.projections.wire import Output, dumps
from atom.vocabulary.events import (
    ChoiceFinished,
    Event,
    FinishReason,
    KeepAliveSent,
    ReasoningDelta,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    TextDelta,
    ToolArgumentsDelta,
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error object for an HTTP status."""
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _error_output(failed: RequestFailed) -> Output:
    body = dumps(error_body(failed.status, failed.message))
    return Output(
        body=body, status=failed.status, is_final=True, retry_after_s=failed.retry_after_s
    )


def _block(block: Block) -> dict[str, Any]:
    if block.kind == "tool_use":
        return {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": arguments_object(block.text),
        }
    if block.kind == "thinking":
        return {"type": "thinking", "thinking": block.text, "signature": ""}
    return {"type": "text", "text": block.text}


def _stop(answer: Answer) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence)."""
    finished = answer.finished
    if finished is None:
        return None, None
    if finished.finish_reason is FinishReason.LENGTH:
        return "max_tokens", None
    if answer.has_calls:
        return "tool_use", None
    if finished.stop_string is not None:
        return "stop_sequence", finished.stop_string
    return "end_turn", None


def _usage(done: RequestCompleted) -> dict[str, Any]:
    cached = done.cached_tokens or 0
    return {
        "input_tokens": done.prompt_tokens - cached,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": done.completion_tokens,
    }


class MessagesBodyRenderer:
    """One JSON message, sent when the request completes."""

    def __init__(self, received: RequestReceived) -> None:
        self._received = received
        self._answer = Answer()
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            return _error_output(event)
        self._answer.record(event)
        if isinstance(event, RequestCompleted):
            self.has_started = True
            return Output(body=dumps(self._message(event)), is_final=True)
        return None

    def _message(self, done: RequestCompleted) -> dict[str, Any]:
        stop_reason, stop_sequence = _stop(self._answer)
        return {
            "id": self._received.request_id,
            "type": "message",
            "role": "assistant",
            "model": self._received.model,
            "content": [_block(block) for block in self._answer.blocks],
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": _usage(done),
        }


class MessagesStreamRenderer:
    """Server-sent events with `event:` names: message_start, a ping, then per block
    content_block_start / _delta / _stop, then message_delta and message_stop."""

    def __init__(self, received: RequestReceived) -> None:
        self._received = received
        self._answer = Answer()
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            if not self.has_started:
                return _error_output(event)
            error = error_body(event.status, event.message)
            return Output(body=_sse(error), content_type="text/event-stream", is_final=True)
        frames = self._frames(event)
        if frames is None:
            return None
        self.has_started = True
        is_final = isinstance(event, RequestCompleted)
        return Output(body=frames, content_type="text/event-stream", is_final=is_final)

    def _frames(self, event: Event) -> bytes | None:
        if isinstance(event, KeepAliveSent):
            return _sse({"type": "ping"})
        if isinstance(event, RequestAccepted):
            return _sse(self._start(len(event.prompt_ids))) + _sse({"type": "ping"})
        if is_content(event):
            return self._content(event)
        if isinstance(event, ChoiceFinished):
            self._answer.finished = event
            last = len(self._answer.blocks) - 1
            return _sse({"type": "content_block_stop", "index": last}) if last >= 0 else b""
        if isinstance(event, RequestCompleted):
            stop_reason, stop_sequence = _stop(self._answer)
            delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
            message_delta = {"type": "message_delta", "delta": delta, "usage": _usage(event)}
            return _sse(message_delta) + _sse({"type": "message_stop"})
        return None

    def _start(self, num_prompt: int) -> dict[str, Any]:
        message: dict[str, Any] = {
            "id": self._received.request_id,
            "type": "message",
            "role": "assistant",
            "model": self._received.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": num_prompt, "output_tokens": 0},
        }
        return {"type": "message_start", "message": message}

    def _content(self, event: Event) -> bytes:
        closed, opened = self._answer.add(event)
        out = b""
        index = len(self._answer.blocks) - 1
        if closed is not None:
            out += _sse({"type": "content_block_stop", "index": index - 1})
        if opened is not None:
            block = _block(Block(opened.kind, id=opened.id, name=opened.name))  # empty
            out += _sse({"type": "content_block_start", "index": index, "content_block": block})
            if opened.kind == "tool_use":
                return out  # its arguments come as input_json_delta
        return out + _sse({"type": "content_block_delta", "index": index, "delta": _delta(event)})


def _delta(event: Event) -> dict[str, Any]:
    if isinstance(event, TextDelta):
        return {"type": "text_delta", "text": event.text}
    if isinstance(event, ReasoningDelta):
        return {"type": "thinking_delta", "thinking": event.text}
    assert isinstance(event, ToolArgumentsDelta)
    return {"type": "input_json_delta", "partial_json": event.text}


def _sse(obj: dict[str, Any]) -> bytes:
    return b"event: " + obj["type"].encode() + b"\ndata: " + dumps(obj) + b"\n\n"
