"""The user's view: the official `anthropic` client against the real server and model."""

from __future__ import annotations

import anthropic
import pytest

from tests.e2e.conftest import CAPITAL, Server
from tests.weather import ANTHROPIC_WEATHER

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": CAPITAL}]
TOOL = ANTHROPIC_WEATHER


def client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)


def test_a_message_answers_paris_and_the_stream_agrees(server: Server) -> None:
    c = client(server)
    kwargs = {
        "model": server.model,
        "max_tokens": 64,
        "messages": QUESTION,
        "extra_body": {"temperature": 0},  # this SDK has no temperature argument any more
    }
    whole = c.messages.create(**kwargs)  # type: ignore[arg-type]
    [block] = whole.content
    assert block.type == "text" and "Paris" in block.text
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.usage.output_tokens > 0
    with c.messages.stream(**kwargs) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.content[0].text == block.text  # type: ignore[union-attr]
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_a_forced_tool_is_a_tool_use_block_whole_and_streamed(server: Server) -> None:
    c = client(server)
    kwargs = {
        "model": server.model,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [TOOL],
        "extra_body": {"temperature": 0},
    }
    named = c.messages.create(tool_choice={"type": "tool", "name": "get_weather"}, **kwargs)  # type: ignore[arg-type]
    [call] = [b for b in named.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input["city"], str)  # type: ignore[index]
    assert named.stop_reason == "tool_use"
    one = {"type": "any", "disable_parallel_tool_use": True}  # exactly one call
    with c.messages.stream(tool_choice=one, **kwargs) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    [streamed] = [b for b in final.content if b.type == "tool_use"]
    assert streamed.name == "get_weather" and isinstance(streamed.input["city"], str)  # type: ignore[union-attr,index]
    assert final.stop_reason == "tool_use"


def test_count_tokens_and_a_bad_body(server: Server) -> None:
    c = client(server)
    counted = c.messages.count_tokens(model=server.model, messages=QUESTION)  # type: ignore[arg-type]
    assert counted.input_tokens > 5
    with pytest.raises(anthropic.BadRequestError) as refused:
        c.messages.create(model=server.model, max_tokens=0, messages=QUESTION)  # type: ignore[arg-type]
    assert refused.value.status_code == 400
    assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
