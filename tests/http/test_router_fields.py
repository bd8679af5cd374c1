"""The fields sglang-router (0.3.2) writes into every request it forwards: accepted at
the values that mean what ATOM does, a 400 naming the field at any other value."""

from __future__ import annotations

from typing import Any

import pytest

from atom.http.errors import parse
from atom.http.schemas import ChatCompletionRequest, CompletionRequest
from atom.vocabulary.errors import InvalidRequest

# What the router sent on for `{"model", "messages", "max_tokens": 5}` and for
# `{"model", "prompt", "max_tokens": 5}` (captured from a worker that echoed its bodies).
ROUTED_CHAT = {
    "messages": [{"role": "user", "content": "hi"}],
    "model": "SmolLM2-135M-Instruct",
    "logprobs": False,
    "max_completion_tokens": 5,
    "stream": False,
    "no_stop_trim": False,
    "ignore_eos": False,
    "continue_final_message": False,
    "skip_special_tokens": True,
    "separate_reasoning": True,
    "stream_reasoning": True,
    "return_hidden_states": False,
}
ROUTED_COMPLETION = {
    "model": "SmolLM2-135M-Instruct",
    "prompt": "hi",
    "max_tokens": 5,
    "stream": False,
    "echo": False,
    "no_stop_trim": False,
    "ignore_eos": False,
    "skip_special_tokens": True,
    "return_hidden_states": False,
}


def test_the_bodies_the_router_forwards_are_accepted() -> None:
    assert parse(ChatCompletionRequest, ROUTED_CHAT).max_completion_tokens == 5
    assert parse(CompletionRequest, ROUTED_COMPLETION).prompt == "hi"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("no_stop_trim", True),
        ("separate_reasoning", False),
        ("stream_reasoning", False),
        ("return_hidden_states", True),
    ],
)
def test_other_values_are_a_400_naming_the_field(name: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(ChatCompletionRequest, {**ROUTED_CHAT, name: value})
    assert refused.value.param == name and "not supported yet" in refused.value.message
