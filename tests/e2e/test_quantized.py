"""`--quantization int4` and `int8` served for real: the default model still answers,
and streaming (one-call decode path, batch 1) agrees with the non-streaming answer."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import CAPITAL, running_server

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": CAPITAL}]


@pytest.mark.parametrize("method", ["int4", "int8"])
def test_quantized_server_answers_and_streaming_agrees(
    method: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    log = tmp_path_factory.mktemp(method) / "requests.jsonl"
    with running_server(log, ATOM_QUANTIZATION=method) as server:
        client = server.client()
        whole = client.chat.completions.create(
            model=server.model, messages=QUESTION, temperature=0, max_tokens=40
        )
        answer = whole.choices[0].message.content
        assert answer is not None and "Paris" in answer
        pieces = client.chat.completions.create(
            model=server.model, messages=QUESTION, temperature=0, max_tokens=40, stream=True
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
        assert streamed == answer
