"""The OpenAI wire format as a projection of a request's events.

The live RequestActor and `atom replay` feed the same events through the same
renderer, so a replayed response is byte-identical to the one that was sent.
A renderer turns each event into the bytes to send now (or nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from atom import wire_logprobs
from atom.errors import error_body
from atom.events import (
    ChoiceFinished,
    Endpoint,
    Event,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    TextDelta,
    TokenText,
)

SSE_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """Bytes to send. The first Output of a response fixes its status and content type."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    is_final: bool = False


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def usage_of(done: RequestCompleted) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }
    if done.cached_tokens is not None:  # logs from before prefix caching have none
        usage["prompt_tokens_details"] = {"cached_tokens": done.cached_tokens}
    usage.update(ttft_s=done.ttft_s, tpot_s=done.tpot_s, latency_s=done.latency_s)
    return usage


def error_output(failed: RequestFailed) -> Output:
    body = error_body(failed.message, failed.error_type, param=failed.param, code=failed.code)
    return Output(body=dumps(body), status=failed.status, is_final=True)


def renderer_for(received: RequestReceived) -> StreamRenderer | BodyRenderer:
    if received.body.get("stream"):
        return StreamRenderer(received)
    return BodyRenderer(received)


class StreamRenderer:
    """Server-sent events: a chunk per delta, a usage chunk if asked, then [DONE]."""

    def __init__(self, received: RequestReceived) -> None:
        self._received = received
        self._is_chat = received.endpoint is Endpoint.CHAT
        options = received.body.get("stream_options") or {}
        self._include_usage = bool(options.get("include_usage"))
        self._logprobs = wire_logprobs.is_requested(received)
        self._offsets: dict[int, int] = {}  # completions text_offset per choice
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            if not self.has_started:
                return error_output(event)
            body = error_body(event.message, event.error_type, param=event.param, code=event.code)
            return Output(body=_sse(body) + SSE_DONE, is_final=True)
        frames = self._frames(event)
        if frames is None:
            return None
        self.has_started = True
        return Output(
            body=frames,
            content_type="text/event-stream",
            is_final=isinstance(event, RequestCompleted),
        )

    def _frames(self, event: Event) -> bytes | None:
        if isinstance(event, RequestAccepted):
            if not self._is_chat:
                return b""
            role = {"role": "assistant", "content": ""}
            return b"".join(self._chunk(i, role, None) for i in range(event.num_choices))
        if isinstance(event, TextDelta):
            delta = {"content": event.text} if self._is_chat else event.text
            return self._chunk(event.choice_idx, delta, None, self._delta_logprobs(event))
        if isinstance(event, ChoiceFinished):
            delta = {} if self._is_chat else ""
            return self._chunk(event.choice_idx, delta, event.finish_reason.value)
        if isinstance(event, RequestCompleted):
            usage = self._envelope([], usage_of(event)) if self._include_usage else None
            return (_sse(usage) if usage else b"") + SSE_DONE
        return None

    def _delta_logprobs(self, event: TextDelta) -> dict[str, Any] | None:
        if not self._logprobs:
            return None
        entries = event.logprobs or ()
        if self._is_chat:
            return wire_logprobs.chat(entries)
        offset = self._offsets.get(event.choice_idx, 0)
        self._offsets[event.choice_idx] = offset + sum(len(e.token) for e in entries)
        return wire_logprobs.completion(entries, offset)

    def _chunk(
        self, idx: int, delta: Any, finish_reason: str | None, logprobs: Any = None
    ) -> bytes:
        key = "delta" if self._is_chat else "text"
        choice = {"index": idx, key: delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return _sse(self._envelope([choice], None))

    def _envelope(self, choices: list[Any], usage: dict[str, Any] | None) -> dict[str, Any]:
        r = self._received
        obj = "chat.completion.chunk" if self._is_chat else "text_completion"
        out = {"id": r.request_id, "object": obj, "created": r.created, "model": r.model}
        out["choices"] = choices
        if self._include_usage:
            out["usage"] = usage
        return out


class BodyRenderer:
    """One JSON body, sent when the request completes."""

    def __init__(self, received: RequestReceived) -> None:
        self._received = received
        self._texts: dict[int, list[str]] = {}
        self._tokens: dict[int, list[TokenText]] = {}
        self._finish: dict[int, str] = {}
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            return error_output(event)
        if isinstance(event, RequestAccepted):
            self._texts = {i: [] for i in range(event.num_choices)}
        elif isinstance(event, TextDelta):
            self._texts[event.choice_idx].append(event.text)
            self._tokens.setdefault(event.choice_idx, []).extend(event.logprobs or ())
        elif isinstance(event, ChoiceFinished):
            self._finish[event.choice_idx] = event.finish_reason.value
        elif isinstance(event, RequestCompleted):
            self.has_started = True
            return Output(body=dumps(self._body(event)), is_final=True)
        return None

    def _body(self, done: RequestCompleted) -> dict[str, Any]:
        r = self._received
        is_chat = r.endpoint is Endpoint.CHAT
        choices = [self._choice(idx, "".join(parts), is_chat) for idx, parts in self._texts.items()]
        return {
            "id": r.request_id,
            "object": "chat.completion" if is_chat else "text_completion",
            "created": r.created,
            "model": r.model,
            "choices": choices,
            "usage": usage_of(done),
        }

    def _choice(self, idx: int, text: str, is_chat: bool) -> dict[str, Any]:
        finish = self._finish.get(idx)
        logprobs = None
        if wire_logprobs.is_requested(self._received):
            entries = self._tokens.get(idx, [])
            logprobs = (
                wire_logprobs.chat(entries) if is_chat else wire_logprobs.completion(entries, 0)
            )
        if is_chat:
            message = {"role": "assistant", "content": text}
            return {"index": idx, "message": message, "logprobs": logprobs, "finish_reason": finish}
        return {"index": idx, "text": text, "logprobs": logprobs, "finish_reason": finish}


def _sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"
