"""Beam search (vLLM's `use_beam_search`) through the official client and the real
default model; its equality with transformers' beams is tests/model/test_beam_search.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.conftest import CAPITAL, Server

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": CAPITAL}]


def test_completions_return_the_n_best_beams_best_first(server: Server) -> None:
    """With the end token ignored, every beam runs to max_tokens, so the ranking is by
    the sum of the tokens' log-probabilities: best first, and no two beams alike."""
    answer = server.client().completions.create(
        model=server.model,
        prompt="The capital of France is",
        n=3,
        max_tokens=8,
        logprobs=1,
        extra_body={"use_beam_search": True, "ignore_eos": True},
    )
    assert [c.index for c in answer.choices] == [0, 1, 2]
    texts = [c.text for c in answer.choices]
    assert len(set(texts)) == 3
    sums = []
    for choice in answer.choices:
        assert choice.finish_reason == "length" and choice.logprobs is not None
        logprobs = choice.logprobs.token_logprobs or []
        assert len(logprobs) == 8 and "".join(choice.logprobs.tokens or []) == choice.text
        sums.append(sum(lp for lp in logprobs if lp is not None))
    assert sums == sorted(sums, reverse=True)
    assert answer.usage is not None and answer.usage.completion_tokens == 24


def test_chat_beams_end_on_the_turn_end_and_streaming_agrees(server: Server) -> None:
    client = server.client()
    body: dict[str, Any] = {"use_beam_search": True, "length_penalty": 1.0}
    whole = client.chat.completions.create(
        model=server.model, messages=QUESTION, n=2, max_tokens=24, extra_body=body
    )
    contents = [c.message.content or "" for c in whole.choices]
    assert "Paris" in contents[0] and contents[0] != contents[1]
    assert [c.finish_reason for c in whole.choices] == ["stop", "stop"]
    stream = client.chat.completions.create(
        model=server.model, messages=QUESTION, n=2, max_tokens=24, extra_body=body, stream=True
    )
    streamed = ["", ""]
    for chunk in stream:
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
    assert streamed == contents


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"n": 17}, "n", "beam width"),
        ({"n": 2, "best_of": 4}, "best_of", "best_of must be n"),
        ({"stop": ["Paris"]}, "stop", "stop strings"),
        ({"response_format": {"type": "json_object"}}, "use_beam_search", "structured output"),
        ({"early_stopping": "sometimes"}, "early_stopping", ""),
    ],
)
def test_what_beams_cannot_carry_is_a_400_naming_it(
    server: Server, extra: dict[str, Any], param: str, words: str
) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 4, "use_beam_search": True, **extra}
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"]
