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
    PromptLogprobs,
    PromptToken,
    ReasoningDelta,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    TextDelta,
    TokenText,
    ToolArgumentsDelta,
    ToolCallStarted,
)

SSE_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """Bytes to send. The first Output of a response fixes its status and content type."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    is_final: bool = False
    retry_after_s: int | None = None  # an error's Retry-After header


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
    if done.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": done.reasoning_tokens}
    usage.update(ttft_s=done.ttft_s, tpot_s=done.tpot_s, latency_s=done.latency_s)
    return usage


def error_output(failed: RequestFailed) -> Output:
    body = error_body(failed.message, failed.error_type, param=failed.param, code=failed.code)
    return Output(
        body=dumps(body), status=failed.status, is_final=True, retry_after_s=failed.retry_after_s
    )


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
        if isinstance(event, ReasoningDelta | ToolCallStarted | ToolArgumentsDelta):
            return self._chunk(event.choice_idx, parsed_delta(event), None)
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


def parsed_delta(event: ReasoningDelta | ToolCallStarted | ToolArgumentsDelta) -> dict[str, Any]:
    """A chat delta for reasoning (under both names clients use) or a tool-call piece:
    the first piece of a call carries index, id, type and name; later ones arguments."""
    if isinstance(event, ReasoningDelta):
        return {"reasoning_content": event.text, "reasoning": event.text}
    if isinstance(event, ToolCallStarted):
        call = {
            "index": event.index,
            "id": event.id,
            "type": "function",
            "function": {"name": event.name, "arguments": ""},
        }
        return {"tool_calls": [call]}
    return {"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]}


class BodyRenderer:
    """One JSON body, sent when the request completes."""

    def __init__(self, received: RequestReceived) -> None:
        self._received = received
        self._texts: dict[int, list[str]] = {}
        self._tokens: dict[int, list[TokenText]] = {}
        self._finish: dict[int, str] = {}
        self._prompt_logprobs: dict[int, tuple[PromptToken, ...]] = {}
        self._reasoning: dict[int, list[str]] = {}
        self._calls: dict[int, dict[int, list[str]]] = {}  # choice → index → [id, name, args]
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            return error_output(event)
        if isinstance(event, PromptLogprobs):
            self._prompt_logprobs[event.choice_idx] = event.entries
        elif isinstance(event, ReasoningDelta):
            self._reasoning.setdefault(event.choice_idx, []).append(event.text)
        elif isinstance(event, ToolCallStarted):
            self._calls.setdefault(event.choice_idx, {})[event.index] = [event.id, event.name, ""]
        elif isinstance(event, ToolArgumentsDelta):
            self._calls[event.choice_idx][event.index][2] += event.text
        elif isinstance(event, RequestAccepted):
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
        kept = self._best_of_selection()
        choices = [self._choice(idx, kept[idx], is_chat) for idx in sorted(kept)]
        body = {
            "id": r.request_id,
            "object": "chat.completion" if is_chat else "text_completion",
            "created": r.created,
            "model": r.model,
            "choices": choices,
            "usage": usage_of(done),
        }
        if is_chat and 0 in self._prompt_logprobs:  # vLLM puts it on the response for chat
            body["prompt_logprobs"] = wire_logprobs.prompt(self._prompt_logprobs[0])
        return body

    def _best_of_selection(self) -> dict[int, int]:
        """Source choice per output index: with `best_of` > n, the n choices of each prompt
        with the highest cumulative logprob (ties: lower index), renumbered in order."""
        n = int(self._received.body.get("n") or 1)
        best_of = int(self._received.body.get("best_of") or n)
        if best_of <= n:
            return {idx: idx for idx in self._texts}
        kept: dict[int, int] = {}
        for start in range(0, len(self._texts), best_of):
            group = range(start, start + best_of)
            ranked = sorted(group, key=lambda i: (-self._score(i), i))[:n]
            for out_idx, src in enumerate(sorted(ranked), start=start // best_of * n):
                kept[out_idx] = src
        return kept

    def _message(self, idx: int, text: str) -> dict[str, Any]:
        calls = self._calls.get(idx, {})
        message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
        if idx in self._reasoning:
            reasoning = "".join(self._reasoning[idx])
            message.update(reasoning_content=reasoning, reasoning=reasoning)
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in (calls[i] for i in sorted(calls))
            ]
        return message

    def _score(self, idx: int) -> float:
        return sum(e.logprob for e in self._tokens.get(idx, []) if e.logprob is not None)

    def _choice(self, out_idx: int, idx: int, is_chat: bool) -> dict[str, Any]:
        text = "".join(self._texts[idx])
        finish = self._finish.get(idx)
        logprobs = None
        if wire_logprobs.is_requested(self._received):
            entries = self._tokens.get(idx, [])
            logprobs = (
                wire_logprobs.chat(entries) if is_chat else wire_logprobs.completion(entries, 0)
            )
        if is_chat:
            message = self._message(idx, text)
            return {
                "index": out_idx,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish,
            }
        choice = {"index": out_idx, "text": text, "logprobs": logprobs, "finish_reason": finish}
        if idx in self._prompt_logprobs:
            choice["prompt_logprobs"] = wire_logprobs.prompt(self._prompt_logprobs[idx])
        return choice


def _sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"
