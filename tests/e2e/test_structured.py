"""Structured output with the real default model: the constraint holds on real output."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.slow
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "role": {"type": "string", "enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "role", "address"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city", "unit"],
        },
    },
}
ASK = [{"role": "user", "content": "Describe a person who lives in Paris, as JSON."}]


def chat(server: Server, **body: Any) -> dict[str, Any]:
    return server.chat({"messages": ASK, "temperature": 0, "max_tokens": 120, **body})


def text(doc: dict[str, Any]) -> str:
    return str(doc["choices"][0]["message"]["content"])


def test_json_object_and_json_schema(server: Server) -> None:
    # a question the default (quantized) model answers in a closed object within 120 tokens
    question = [{"role": "user", "content": "What is the capital of Italy? Answer in JSON."}]
    obj = json.loads(text(chat(server, messages=question, response_format={"type": "json_object"})))
    assert isinstance(obj, dict)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    doc = chat(server, response_format=fmt)
    jsonschema.validate(json.loads(text(doc)), PERSON)
    assert doc["choices"][0]["finish_reason"] == "stop"


def test_regex_choice_and_grammar(server: Server) -> None:
    date = text(chat(server, structured_outputs={"regex": r"\d{4}-\d{2}-\d{2}"}))
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
    picked = text(chat(server, structured_outputs={"choice": ["Paris", "Rome", "Berlin"]}))
    assert picked in {"Paris", "Rome", "Berlin"}
    ebnf = 'root ::= "The answer is " ("yes" | "no") "."'
    assert text(chat(server, structured_outputs={"grammar": ebnf})) in {
        "The answer is yes.",
        "The answer is no.",
    }


def test_cut_short_is_length(server: Server) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    doc = chat(server, response_format=fmt, max_tokens=5)
    assert doc["choices"][0]["finish_reason"] == "length"


def test_tool_choice_required_and_named(server: Server) -> None:
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    req = chat(server, messages=ask, tools=[WEATHER], tool_choice="required")
    [call] = req["choices"][0]["message"]["tool_calls"][:1]
    assert req["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(
        json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"]
    )
    named = {"type": "function", "function": {"name": "get_weather"}}
    doc = chat(server, messages=ask, tools=[WEATHER], tool_choice=named)
    [call] = doc["choices"][0]["message"]["tool_calls"]
    assert doc["choices"][0]["finish_reason"] == "stop"
    args = json.loads(call["function"]["arguments"])
    assert set(args) == {"city", "unit"}
    body = {
        "messages": ask,
        "tools": [WEATHER],
        "tool_choice": named,
        "temperature": 0,
        "max_tokens": 120,
        "stream": True,
    }
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as r:
        chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    pieces = [
        tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert pieces[0]["function"]["name"] == "get_weather" and pieces[0]["id"].startswith("call_")
    assert "".join(p["function"]["arguments"] for p in pieces) == call["function"]["arguments"]


def test_a_structural_tag_holds_wherever_its_trigger_appears(server: Server) -> None:
    """Free text where each " the" must open `the city of "Paris".` (a JSON string from an
    enum): the model writes " the" unprompted, so the tag is exercised on real output,
    whole and streamed alike (greedy)."""
    city = {"type": "string", "enum": ["Paris", "Rome"]}
    tag = {"begin": " the city of ", "schema": city, "end": "."}
    fmt = {"type": "structural_tag", "structures": [tag], "triggers": [" the"]}
    ask = [{"role": "user", "content": "Tell me about the capital of France."}]
    doc = chat(server, messages=ask, response_format=fmt, max_tokens=60)
    answer = text(doc)
    pieces = answer.split(" the")[1:]
    assert pieces, answer
    whole = [f' city of "{c}".' for c in ("Paris", "Rome")]
    for idx, after in enumerate(pieces):
        if any(after.startswith(tag) for tag in whole):
            continue
        # only the last tag may be cut short, by max_tokens
        assert idx == len(pieces) - 1 and doc["choices"][0]["finish_reason"] == "length"
        assert any(tag.startswith(after) for tag in whole), answer
    body = {"messages": ask, "response_format": fmt, "temperature": 0, "max_tokens": 60}
    with httpx.stream(
        "POST", f"{server.url}/v1/chat/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert streamed == answer
    vllm_form = {"structural_tag": json.dumps({"structures": [tag], "triggers": [" the"]})}
    assert text(chat(server, messages=ask, structured_outputs=vllm_form, max_tokens=60)) == answer


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"structured_outputs": {"regex": "("}}, "structured_outputs"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "properties": {"a": {"type": "wat"}}},
                    },
                }
            },
            "response_format",
        ),
        ({"guided_json": {"type": "object"}}, "guided_json"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
        (
            {
                "response_format": {
                    "type": "structural_tag",
                    "structures": [{"begin": "<f=a>", "schema": {}, "end": "</f>"}],
                    "triggers": ["<g="],
                }
            },
            "response_format",
        ),
        ({"response_format": {"type": "structural_tag"}}, "response_format"),
        (
            {"response_format": {"type": "structural_tag", "format": {"type": "any_text"}}},
            "response_format.format",
        ),
        (
            {"structured_outputs": {"structural_tag": "{not json"}},
            "structured_outputs.structural_tag",
        ),
    ],
)
def test_bad_constraints_are_400(server: Server, body: dict[str, Any], param: str) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": ASK, **body}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert r.json()["error"]["message"]
