"""OpenAI's Responses API wire format as a projection of a request's events.

The answer's blocks (atom/projections/answer.py) become output items: reasoning → a `reasoning`
item, text → a `message` item with one `output_text` part, each tool call → a
`function_call` item. A length stop makes the response `incomplete` with
`incomplete_details.reason: max_output_tokens`. Item ids derive from the response
id and the item's position, so a replay gives the same bytes.
"""

from __future__ import annotations

from typing import Any

from atom.projections.answer import Answer, Block, is_content
from atom.projections.wire import SSE_PING, Output, dumps, error_output
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
from atom.vocabulary.plan import ResponseShape

_ID_PREFIX = {"text": "msg", "thinking": "rs", "tool_use": "fc"}  # an output item's id, by kind


class _Response:
    """The Response object of one request, as the answer stands."""

    def __init__(self, received: RequestReceived, shape: ResponseShape) -> None:
        self.received = received
        self.shape = shape
        self.answer = Answer()

    def item_id(self, index: int) -> str:
        kind = _ID_PREFIX[self.answer.blocks[index].kind]
        return f"{kind}_{self.received.request_id.removeprefix('resp_')}_{index}"

    def item(self, index: int, *, is_done: bool) -> dict[str, Any]:
        block = self.answer.blocks[index]
        item_id, status = self.item_id(index), "completed" if is_done else "in_progress"
        if block.kind == "tool_use":
            return {"id": item_id, "type": "function_call", "status": status,
                    "call_id": block.id, "name": block.name,
                    "arguments": block.text if is_done else ""}  # fmt: skip
        if block.kind == "thinking":
            content = [_part(block)] if is_done else []
            return {"id": item_id, "type": "reasoning", "summary": [], "content": content}
        content = [_part(block)] if is_done else []
        return {"id": item_id, "type": "message", "status": status, "role": "assistant",
                "content": content}  # fmt: skip

    def body(
        self,
        done: RequestCompleted | None,
        failed: RequestFailed | None,
        *,
        status: str = "in_progress",  # while neither `done` nor `failed`
    ) -> dict[str, Any]:
        finished = self.answer.finished
        is_cut = finished is not None and finished.finish_reason is FinishReason.LENGTH
        cut = {"reason": "max_output_tokens"}
        if failed is not None:
            status = "failed"
        elif done is not None:
            status = "incomplete" if is_cut else "completed"
        error = None if failed is None else {"code": failed.error_type, "message": failed.message}
        return {
            "id": self.received.request_id,
            "object": "response",
            "created_at": self.received.created,
            "status": status,
            "error": error,
            "incomplete_details": cut if status == "incomplete" else None,
            "model": self.received.model,
            "output": [self.item(i, is_done=True) for i in range(len(self.answer.blocks))]
            if done is not None else [],
            **self.shape.request_fields,
            "usage": None if done is None else _usage(done),
        }  # fmt: skip


def _part(block: Block) -> dict[str, Any]:
    if block.kind == "thinking":
        return {"type": "reasoning_text", "text": block.text}
    return {"type": "output_text", "text": block.text, "annotations": [], "logprobs": []}


def _usage(done: RequestCompleted) -> dict[str, Any]:
    return {
        "input_tokens": done.prompt_tokens,
        "input_tokens_details": {"cached_tokens": done.cached_tokens or 0},
        "output_tokens": done.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": done.reasoning_tokens or 0},
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }


class ResponsesBodyRenderer:
    """One JSON Response object, sent when the request completes."""

    def __init__(self, received: RequestReceived, shape: ResponseShape) -> None:
        self._response = _Response(received, shape)
        self.has_started = False

    def snapshot(self, status: str, failed: RequestFailed | None = None) -> dict[str, Any]:
        """The Response object before it completed: `queued`, `in_progress`, `cancelled`,
        or `failed` with the error."""
        return self._response.body(None, failed, status=status)

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            return error_output(event)
        self._response.answer.record(event)
        if isinstance(event, RequestCompleted):
            self.has_started = True
            return Output(body=dumps(self._response.body(event, None)), is_final=True)
        return None


class ResponsesStreamRenderer:
    """Server-sent events with `event:` names and a `sequence_number` each, in OpenAI's
    order: response.created, response.in_progress, then per item output_item.added,
    (content_part.added,) deltas, their .done events, output_item.done, and finally
    response.completed / response.incomplete (response.failed on an engine error)."""

    def __init__(self, received: RequestReceived, shape: ResponseShape) -> None:
        self._response = _Response(received, shape)
        self._seq = 0
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed) and not self.has_started:
            return error_output(event)
        frames = self._frames(event)
        if frames is None:
            return None
        self.has_started = True
        is_final = isinstance(event, RequestCompleted | RequestFailed)
        return Output(body=frames, content_type="text/event-stream", is_final=is_final)

    def _frames(self, event: Event) -> bytes | None:
        response = self._response
        if isinstance(event, KeepAliveSent):
            return SSE_PING
        if isinstance(event, RequestAccepted):
            start = response.body(None, None)
            return self._sse("response.created", response=start) + self._sse(
                "response.in_progress", response=start
            )
        if is_content(event):
            return self._content(event)
        if isinstance(event, ChoiceFinished):
            response.answer.finished = event
            last = len(response.answer.blocks) - 1
            return self._item_done(last) if last >= 0 else b""
        if isinstance(event, RequestCompleted):
            body = response.body(event, None)
            return self._sse(f"response.{body['status']}", response=body)
        if isinstance(event, RequestFailed):
            failed = response.body(None, event)
            return self._sse("response.failed", response=failed)
        return None

    def _content(self, event: Event) -> bytes:
        closed, opened = self._response.answer.add(event)
        index = len(self._response.answer.blocks) - 1
        out = self._item_done(index - 1) if closed is not None else b""
        if opened is not None:
            out += self._item_added(index)
            if opened.kind == "tool_use":
                return out  # the arguments follow as their own deltas
        return out + self._delta(index, event)

    def _item_added(self, index: int) -> bytes:
        item = self._response.item(index, is_done=False)
        out = self._sse("response.output_item.added", output_index=index, item=item)
        block = self._response.answer.blocks[index]
        if block.kind != "tool_use":
            part = _part(Block(block.kind))
            out += self._sse("response.content_part.added", **self._at(index), part=part)
        return out

    def _delta(self, index: int, event: Event) -> bytes:
        if isinstance(event, ToolArgumentsDelta):
            return self._sse(
                "response.function_call_arguments.delta",
                item_id=self._response.item_id(index),
                output_index=index,
                delta=event.text,
            )
        assert isinstance(event, TextDelta | ReasoningDelta)
        if isinstance(event, ReasoningDelta):
            return self._sse("response.reasoning_text.delta", **self._at(index), delta=event.text)
        return self._sse(
            "response.output_text.delta", **self._at(index), delta=event.text, logprobs=[]
        )

    def _item_done(self, index: int) -> bytes:
        block = self._response.answer.blocks[index]
        item = self._response.item(index, is_done=True)
        out = b""
        if block.kind == "tool_use":
            out += self._sse(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=block.text,
            )
        elif block.kind == "thinking":
            out += self._sse("response.reasoning_text.done", **self._at(index), text=block.text)
            out += self._sse("response.content_part.done", **self._at(index), part=_part(block))
        else:
            out += self._sse(
                "response.output_text.done", **self._at(index), text=block.text, logprobs=[]
            )
            out += self._sse("response.content_part.done", **self._at(index), part=_part(block))
        return out + self._sse("response.output_item.done", output_index=index, item=item)

    def _at(self, index: int) -> dict[str, Any]:
        return {"item_id": self._response.item_id(index), "output_index": index, "content_index": 0}

    def _sse(self, kind: str, **fields: Any) -> bytes:
        obj = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + dumps(obj) + b"\n\n"
