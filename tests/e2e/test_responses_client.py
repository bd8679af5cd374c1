"""The user's view: the official `openai` client's Responses API against the real
server and model."""

from __future__ import annotations

import pydantic
import pytest

from tests.e2e.conftest import CAPITAL, Server
from tests.weather import WEATHER

pytestmark = pytest.mark.slow
QUESTION = CAPITAL


class City(pydantic.BaseModel):
    name: str
    country: str


def test_a_response_answers_paris_and_the_stream_agrees(server: Server) -> None:
    c = server.client()
    whole = c.responses.create(model=server.model, input=QUESTION, temperature=0)
    assert "Paris" in whole.output_text and whole.status in ("completed", "incomplete")
    with c.responses.stream(model=server.model, input=QUESTION, temperature=0) as stream:
        final = stream.get_final_response()
    assert final.output_text == whole.output_text


def test_parse_gives_the_pydantic_model(server: Server) -> None:
    parsed = server.client().responses.parse(
        model=server.model,
        input="Name a city in France, as JSON.",
        text_format=City,
        temperature=0,
        max_output_tokens=200,
    )
    assert isinstance(parsed.output_parsed, City)


def test_a_required_tool_gives_a_function_call(server: Server) -> None:
    tool = {"type": "function", **WEATHER["function"]}  # type: ignore[dict-item]
    response = server.client().responses.create(
        model=server.model,
        input="What is the weather in Paris?",
        tools=[tool],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=False,  # exactly one call
        temperature=0,
        max_output_tokens=200,
    )
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and response.status == "completed"
