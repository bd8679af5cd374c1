"""The fields sglang-router (0.3.2) writes into every request it forwards: accepted at
the values that mean what ATOM does, a 400 naming the field at any other value; on the
Responses API, vLLM's sampling fields it writes are served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from atom.http.app import create_app
from atom.http.errors import parse
from atom.http.schemas import ChatCompletionRequest, CompletionRequest
from atom.log.codec import read_log
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.events import RequestReceived
from tests.conftest import fake_loader, serving, wait_ready

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


# What the router sent on for `{"model", "input": "hi", "max_output_tokens": 5}`, with
# the sampling fields set here to values that show they reach the sampler.
ROUTED_RESPONSES = {
    "input": "hi",
    "max_output_tokens": 5,
    "model": "SmolLM2-135M-Instruct",
    "store": True,
    "stream": None,
    "temperature": 1.0,
    "top_p": 1.0,
    "priority": 0,
    "top_k": 5,
    "min_p": 0.1,
    "repetition_penalty": 1.2,
}


async def test_a_routed_responses_body_is_served_with_its_sampling_fields(
    tokenizer: Any, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.jsonl"
    app = create_app(Settings(request_log=str(log_path)), load=fake_loader(tokenizer))
    async with serving(app) as url:
        await wait_ready(app)
        async with httpx.AsyncClient() as client:
            r = await client.post(f"{url}/v1/responses", json=ROUTED_RESPONSES)
            bad = await client.post(f"{url}/v1/responses", json={**ROUTED_RESPONSES, "top_k": -2})
        await trio.sleep(0.2)
    assert r.status_code == 200 and r.json()["status"] in ("completed", "incomplete")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_k"
    received = [e.event for e in read_log(log_path) if isinstance(e.event, RequestReceived)]
    assert received[0].plan is not None
    params = received[0].plan.params
    assert (params.top_k, params.min_p, params.repetition_penalty) == (5, 0.1, 1.2)
