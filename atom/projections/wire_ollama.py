"""Ollama's API wire format (`/api/chat`, `/api/generate`) as a projection of a
request's events.

Streamed, one JSON object a line (NDJSON): a line for each text or reasoning delta
(chat: `message.content`, `message.thinking`; generate: `response`, `thinking`), a
line with the calls once a chat's answer ends (`message.tool_calls`, each call's
arguments an object), then the last line, `done: true`, with `done_reason` and the
counts and durations Ollama reports (nanoseconds).
Whole, one object with the complete message. Every line's `created_at` is the time the
request was received, so replay gives the same bytes. A failure is `{"error": "…"}`:
with its status before the first line, as the last line after it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from atom.projections.answer import Answer, arguments_object
from atom.projections.wire import Output, dumps
from atom.vocabulary.events import (
    ChoiceFinished,
    Event,
    FinishReason,
    ReasoningDelta,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    TextDelta,
)

NDJSON = "application/x-ndjson"


def error_body(message: str) -> dict[str, Any]:
    return {"error": message}


def timestamp(seconds: float) -> str:
    """Unix seconds as the RFC 3339 time Ollama writes (UTC)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


class _Ollama:
    """What both shapes share: the answer so far and the fields of every object. A
    chat's text goes in `message`, a generation's at the top level (`response`)."""

    def __init__(self, received: RequestReceived, *, is_chat: bool) -> None:
        self._answer = Answer()
        self._is_chat = is_chat
        self.has_started = False
        self._head = {"model": received.model, "created_at": timestamp(received.created)}

    def _content(self, text: str, thinking: str | None = None) -> dict[str, Any]:
        """`text` (and `thinking`) where this route puts them."""
        if not self._is_chat:
            return {"response": text} | ({"thinking": thinking} if thinking else {})
        message = {"role": "assistant", "content": text}
        return {"message": message | ({"thinking": thinking} if thinking else {})}

    def _error(self, failed: RequestFailed, content_type: str) -> Output:
        body = dumps(error_body(failed.message))
        if self.has_started:  # the status is sent: the error is the last line
            return Output(body=body + b"\n", content_type=content_type, is_final=True)
        return Output(
            body=body, status=failed.status, is_final=True, retry_after_s=failed.retry_after_s
        )

    def _calls(self) -> list[dict[str, Any]]:
        return [
            {
                "function": {
                    "index": idx,
                    "name": block.name,
                    "arguments": arguments_object(block.text),
                }
            }
            for idx, block in enumerate(b for b in self._answer.blocks if b.kind == "tool_use")
        ]

    def _done(self, done: RequestCompleted) -> dict[str, Any]:
        finished = self._answer.finished
        reason = "length" if finished and finished.finish_reason is FinishReason.LENGTH else "stop"
        return {
            "done": True,
            "done_reason": reason,
            "total_duration": _ns(done.latency_s),
            "load_duration": 0,
            "prompt_eval_count": done.prompt_tokens,
            "prompt_eval_duration": _ns(done.ttft_s),
            "eval_count": done.completion_tokens,
            "eval_duration": _ns(max(0.0, done.latency_s - done.ttft_s)),
        }


class OllamaBodyRenderer(_Ollama):
    """One JSON object, sent when the request completes."""

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            return self._error(event, "application/json")
        self._answer.record(event)
        if not isinstance(event, RequestCompleted):
            return None
        self.has_started = True
        content = self._content(self._text("text"), self._text("thinking"))
        if self._answer.has_calls and self._is_chat:
            content["message"]["tool_calls"] = self._calls()
        body = {**self._head, **content, **self._done(event)}
        return Output(body=dumps(body), is_final=True)

    def _text(self, kind: str) -> str:
        return "".join(b.text for b in self._answer.blocks if b.kind == kind)


class OllamaStreamRenderer(_Ollama):
    """NDJSON: a line a delta, the calls when the answer ends, then the `done` line."""

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            return self._error(event, NDJSON)
        self._answer.record(event)
        content = self._delta(event)
        if content is not None:
            return self._line({**content, "done": False})
        if isinstance(event, RequestCompleted):
            return self._line({**self._content(""), **self._done(event)}, is_final=True)
        return None

    def _delta(self, event: Event) -> dict[str, Any] | None:
        if isinstance(event, TextDelta) and event.text:
            return self._content(event.text)
        if isinstance(event, ReasoningDelta) and event.text:
            return self._content("", event.text)
        if isinstance(event, ChoiceFinished) and self._answer.has_calls and self._is_chat:
            content = self._content("")
            content["message"]["tool_calls"] = self._calls()
            return content
        return None  # a call's start and arguments: sent whole when the answer ends

    def _line(self, obj: dict[str, Any], *, is_final: bool = False) -> Output:
        self.has_started = True
        body = dumps({**self._head, **obj}) + b"\n"
        return Output(body=body, content_type=NDJSON, is_final=is_final)


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)
