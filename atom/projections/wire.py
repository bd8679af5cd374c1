"""The OpenAI wire format as a projection of a request's events.

The live RequestActor and `atom replay` feed the same events through the same
renderer, so a replayed response is byte-identical to the one that was sent.
A renderer turns each event into the bytes to send now (or nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from atom.projections import wire_logprobs
from atom.vocabulary.errors import error_body
from atom.vocabulary.events import (
    ChoiceFinished,
    Event,
    KeepAliveSent,
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
from atom.vocabulary.plan import Endpoint, ResponseShape

SSE_DONE = b"data: [DONE]\n\n"
SSE_PING = b": ping\n\n"  # an SSE comment: clients skip it, proxies see bytes flow


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """Bytes to send. The first Output of a response fixes its status and content type."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    is_final: bool = False
    retry_after_s: int | None = None  # an error's Retry-After header


# One encoder for every body and chunk: `json.dumps` with arguments builds a new one a
# call. The standard library's, not orjson's or msgspec's: they write some floats in
# other text (1e-05 as 0.00001, a logprob of a sure token), and replay must give the
# bytes a client got (docs/performance.md, "The host path").
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


TEXT_MARKER = "\x00atom-text\x00"  # stands for a delta's text in its rendered chunk


def dumps(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode()


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


class StreamRenderer:
    """Server-sent events: a chunk per delta, a usage chunk if asked, then [DONE]."""

    def __init__(self, received: RequestReceived, shape: ResponseShape) -> None:
        self._received = received
        self._shape = shape
        self._is_chat = shape.endpoint is Endpoint.CHAT
        self._text_offsets = [0] * shape.total_choices  # completions' text_offset, per choice
        self._prompts: tuple[tuple[int, ...], ...] = ()  # with return_token_ids
        self._prompt_ids_sent: set[int] = set()  # choices whose prompt ids went out
        self.has_started = False
        # A plain text delta's chunk around its text, per choice (`_text_chunk`)
        self._text_frames: dict[int, tuple[bytes, bytes] | None] = {}
        self._plain_text = not (shape.logprobs or shape.return_token_ids)

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
        if isinstance(event, KeepAliveSent):
            return SSE_PING
        if isinstance(event, RequestAccepted):
            self._prompts = event.prompts
            if not self._is_chat:
                return b""
            role = {"role": "assistant", "content": ""}
            return b"".join(self._chunk(i, role, None) for i in range(event.num_choices))
        if isinstance(event, TextDelta):
            if self._plain_text:
                return self._text_chunk(event.choice_idx, event.text)
            delta = self._text_delta(event.text)
            logprobs = self._delta_logprobs(event)
            return self._chunk(event.choice_idx, delta, None, logprobs, event.token_ids)
        if isinstance(event, ReasoningDelta | ToolCallStarted | ToolArgumentsDelta):
            return self._chunk(event.choice_idx, parsed_delta(event), None)
        if isinstance(event, ChoiceFinished):
            delta = {} if self._is_chat else ""
            return self._chunk(event.choice_idx, delta, event.finish_reason.value)
        if isinstance(event, RequestCompleted):
            usage = self._envelope([], usage_of(event)) if self._shape.include_usage else None
            return (_sse(usage) if usage else b"") + SSE_DONE
        return None

    def _text_chunk(self, idx: int, text: str) -> bytes:
        """A text delta's chunk with no logprobs or token ids: the choice's chunk rendered
        once around a marker, the text's JSON string put in its place (the same bytes as
        rendering the whole chunk, which it falls back to if the marker is not unique)."""
        if idx not in self._text_frames:
            marker = dumps(TEXT_MARKER)
            whole = self._chunk(idx, self._text_delta(TEXT_MARKER), None)
            parts = whole.split(marker)
            self._text_frames[idx] = (parts[0], parts[1]) if len(parts) == 2 else None
        frame = self._text_frames[idx]
        if frame is None:
            return self._chunk(idx, self._text_delta(text), None)
        return frame[0] + dumps(text) + frame[1]

    def _text_delta(self, text: str) -> Any:
        """A choice's new text as its chunk carries it: chat's delta, or completions' text."""
        return {"content": text} if self._is_chat else text

    def _delta_logprobs(self, event: TextDelta) -> dict[str, Any] | None:
        if not self._shape.logprobs:
            return None
        entries = event.logprobs or ()
        if self._is_chat:
            return wire_logprobs.chat(entries)
        offset = self._text_offsets[event.choice_idx]
        self._text_offsets[event.choice_idx] = offset + sum(len(e.token) for e in entries)
        return wire_logprobs.completion(entries, offset)

    def _chunk(
        self,
        idx: int,
        delta: Any,
        finish_reason: str | None,
        logprobs: Any = None,
        token_ids: tuple[int, ...] | None = None,  # a content chunk's, with return_token_ids
    ) -> bytes:
        key = "delta" if self._is_chat else "text"
        choice = {"index": idx, key: delta, "logprobs": logprobs, "finish_reason": finish_reason}
        if self._shape.return_token_ids and token_ids is not None:
            choice["token_ids"] = list(token_ids)
        if self._shape.return_token_ids and idx not in self._prompt_ids_sent:
            self._prompt_ids_sent.add(idx)  # with the choice's first chunk, as vLLM
            choice["prompt_token_ids"] = list(prompt_of(self._prompts, self._shape, idx))
        return _sse(self._envelope([choice], None))

    def _envelope(self, choices: list[Any], usage: dict[str, Any] | None) -> dict[str, Any]:
        r = self._received
        obj = "chat.completion.chunk" if self._is_chat else "text_completion"
        out = {"id": r.request_id, "object": obj, "created": r.created, "model": r.model}
        out["choices"] = choices
        if self._shape.include_usage:
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


@dataclass(slots=True)
class _ToolCall:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)

    def as_wire(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": "function", "function": function}


@dataclass(slots=True)
class _Choice:
    """Everything one choice has produced so far, for the body sent at the end."""

    texts: list[str] = field(default_factory=list)
    tokens: list[TokenText] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_logprobs: tuple[PromptToken, ...] | None = None
    reasoning: list[str] | None = None  # None: no reasoning text came
    calls: list[_ToolCall] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # with return_token_ids

    @property
    def score(self) -> float:
        """Cumulative logprob, which ranks best_of candidates."""
        return sum(e.logprob for e in self.tokens if e.logprob is not None)


class BodyRenderer:
    """One JSON body, sent when the request completes."""

    def __init__(self, received: RequestReceived, shape: ResponseShape) -> None:
        self._received = received
        self._shape = shape
        self._choices = [_Choice() for _ in range(shape.total_choices)]
        self._prompts: tuple[tuple[int, ...], ...] = ()
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            return error_output(event)
        if isinstance(event, RequestCompleted):
            self.has_started = True
            return Output(body=dumps(self._body(event)), is_final=True)
        if isinstance(event, RequestAccepted):
            self._prompts = event.prompts
        if isinstance(event, TextDelta | PromptLogprobs | ReasoningDelta | ChoiceFinished):
            self._record(self._choices[event.choice_idx], event)
        elif isinstance(event, ToolCallStarted):
            self._choices[event.choice_idx].calls.append(_ToolCall(event.id, event.name))
        elif isinstance(event, ToolArgumentsDelta):
            self._choices[event.choice_idx].calls[event.index].arguments.append(event.text)
        return None

    @staticmethod
    def _record(
        choice: _Choice, event: TextDelta | PromptLogprobs | ReasoningDelta | ChoiceFinished
    ) -> None:
        if isinstance(event, TextDelta):
            choice.texts.append(event.text)
            choice.tokens.extend(event.logprobs or ())
            choice.token_ids.extend(event.token_ids)
        elif isinstance(event, PromptLogprobs):
            choice.prompt_logprobs = event.entries
        elif isinstance(event, ReasoningDelta):
            choice.reasoning = [*(choice.reasoning or []), event.text]
        else:
            choice.finish_reason = event.finish_reason.value

    def _body(self, done: RequestCompleted) -> dict[str, Any]:
        r = self._received
        is_chat = self._shape.endpoint is Endpoint.CHAT
        kept = self._best_of_selection()
        choices = [self._choice(out_idx, src) for out_idx, src in enumerate(kept)]
        body: dict[str, Any] = {
            "id": r.request_id,
            "object": "chat.completion" if is_chat else "text_completion",
            "created": r.created,
            "model": r.model,
            "choices": choices,
            "usage": usage_of(done),
        }
        first = self._choices[0].prompt_logprobs if self._choices else None
        if is_chat and first is not None:  # vLLM puts it on the response for chat
            body["prompt_logprobs"] = wire_logprobs.prompt(first)
        if is_chat and self._shape.return_token_ids:  # vLLM: on the response for chat
            body["prompt_token_ids"] = list(self._prompts[0]) if self._prompts else []
        return body

    def _best_of_selection(self) -> list[int]:
        """The source choice of each returned one: with best_of > n, the n choices of each
        prompt with the highest cumulative logprob (ties: lower index), in their order."""
        n, best_of = self._shape.n, self._shape.best_of
        if best_of <= n:
            return list(range(len(self._choices)))
        kept: list[int] = []
        for start in range(0, len(self._choices), best_of):
            group = range(start, start + best_of)
            kept += sorted(sorted(group, key=lambda i: (-self._choices[i].score, i))[:n])
        return kept

    def _choice(self, out_idx: int, src: int) -> dict[str, Any]:
        choice = self._choices[src]
        is_chat = self._shape.endpoint is Endpoint.CHAT
        logprobs = None
        if self._shape.logprobs:
            logprobs = (
                wire_logprobs.chat(choice.tokens)
                if is_chat
                else wire_logprobs.completion(choice.tokens, 0)
            )
        text = "".join(choice.texts)
        key, value = ("message", _message(choice, text)) if is_chat else ("text", text)
        out: dict[str, Any] = {"index": out_idx, key: value, "logprobs": logprobs}
        out["finish_reason"] = choice.finish_reason
        if not is_chat and choice.prompt_logprobs is not None:
            out["prompt_logprobs"] = wire_logprobs.prompt(choice.prompt_logprobs)
        if self._shape.return_token_ids:
            if not is_chat:
                out["prompt_token_ids"] = list(prompt_of(self._prompts, self._shape, src))
            out["token_ids"] = choice.token_ids
        return out


def _message(choice: _Choice, text: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text or (None if choice.calls else ""),
    }
    if choice.reasoning is not None:
        reasoning = "".join(choice.reasoning)
        message.update(reasoning_content=reasoning, reasoning=reasoning)
    if choice.calls:
        message["tool_calls"] = [call.as_wire() for call in choice.calls]
    return message


def prompt_of(
    prompts: tuple[tuple[int, ...], ...], shape: ResponseShape, choice_idx: int
) -> tuple[int, ...]:
    """The prompt token ids of a choice."""
    idx = shape.prompt_index(choice_idx)
    return prompts[idx] if idx < len(prompts) else ()


def _sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"
