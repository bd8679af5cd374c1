"""A streamed text delta's chunk (atom/projections/wire.py, `StreamRenderer`): rendered
around the choice's frame, byte for byte the JSON a whole render gives, for any text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from atom.projections.wire import TEXT_MARKER, StreamRenderer
from atom.vocabulary.events import RequestReceived, TextDelta
from atom.vocabulary.plan import Endpoint, ResponseShape

TEXTS = ["a", ' say "hi"\\', "é🙂 ünï", "line\nnext\ttab\x01", TEXT_MARKER, f"x{TEXT_MARKER}y", ""]


def expected(endpoint: Endpoint, idx: int, text: str, include_usage: bool) -> bytes:
    """The chunk as documented: OpenAI's field order, compact, UTF-8 as it is."""
    is_chat = endpoint is Endpoint.CHAT
    choice = {
        "index": idx,
        ("delta" if is_chat else "text"): {"content": text} if is_chat else text,
        "logprobs": None,
        "finish_reason": None,
    }
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk" if is_chat else "text_completion",
        "created": 5,
        "model": "m",
        "choices": [choice],
    }
    if include_usage:
        chunk["usage"] = None
    body = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
    return b"data: " + body.encode() + b"\n\n"


@pytest.mark.parametrize("endpoint", [Endpoint.CHAT, Endpoint.COMPLETIONS])
@pytest.mark.parametrize("include_usage", [False, True])
def test_text_chunks_are_the_whole_render_for_any_text(
    endpoint: Endpoint, include_usage: bool
) -> None:
    shape = ResponseShape(endpoint=endpoint, stream=True, include_usage=include_usage, n=2)
    received = RequestReceived(request_id="chatcmpl-1", endpoint=endpoint, model="m", created=5)
    renderer = StreamRenderer(received, shape)
    for text in TEXTS:
        for idx in (0, 1):
            output = renderer.feed(TextDelta(request_id="r", choice_idx=idx, text=text))
            assert output is not None
            assert output.body == expected(endpoint, idx, text, include_usage)


def test_a_request_id_holding_the_marker_renders_whole() -> None:
    """The frame is cut at the marker: a chunk holding it twice is rendered whole."""
    shape = ResponseShape(endpoint=Endpoint.CHAT, stream=True)
    odd = RequestReceived(
        request_id=f"id{TEXT_MARKER}", endpoint=Endpoint.CHAT, model="m", created=5
    )
    output = StreamRenderer(odd, shape).feed(TextDelta(request_id="r", choice_idx=0, text="ok"))
    assert output is not None
    body = json.loads(output.body.removeprefix(b"data: "))
    assert body["id"] == f"id{TEXT_MARKER}" and body["choices"][0]["delta"] == {"content": "ok"}
