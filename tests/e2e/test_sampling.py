"""Each sampling parameter changes real output of the real default model."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.slow
Q = [{"role": "user", "content": "What is the capital of France?"}]


def chat(server: Server, **body: Any) -> dict[str, Any]:
    body = {"messages": Q, "temperature": 0, "max_tokens": 12, **body}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def complete(server: Server, prompt: str, **body: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "temperature": 0, "max_tokens": 12, **body}
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def token_id(server: Server, text: str) -> int:
    r = httpx.post(f"{server.url}/tokenize", json={"prompt": text, "add_special_tokens": False})
    [only] = r.json()["tokens"]
    return int(only)


def content(doc: dict[str, Any]) -> str:
    return str(doc["choices"][0]["message"]["content"])


def test_logit_bias_plus_100_forces_a_token(server: Server) -> None:
    forced = token_id(server, " banana")
    doc = chat(server, logit_bias={str(forced): 100}, max_tokens=3)
    assert content(doc) == " banana banana banana"


def test_penalties_change_a_repetitive_continuation(server: Server) -> None:
    prompt = "I love you. I love you. I love you."
    plain = complete(server, prompt)["choices"][0]["text"]
    for penalty in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0},
                    {"repetition_penalty": 1.8}):  # fmt: skip
        changed = complete(server, prompt, **penalty)["choices"][0]["text"]
        assert changed.count("love") < plain.count("love") == 3, penalty


def test_min_tokens_keeps_generating_past_eos(server: Server) -> None:
    short = chat(server, max_tokens=40)
    assert short["choices"][0]["finish_reason"] == "stop"
    assert short["usage"]["completion_tokens"] < 20
    longer = chat(server, max_tokens=40, min_tokens=20)
    assert longer["usage"]["completion_tokens"] >= 20


def test_allowed_token_ids_restrict_every_token(server: Server) -> None:
    allowed = [token_id(server, " yes"), token_id(server, " no")]
    doc = complete(server, "Answer:", allowed_token_ids=allowed, max_tokens=6, logprobs=0)
    assert set(doc["choices"][0]["logprobs"]["tokens"]) <= {" yes", " no"}
    assert len(doc["choices"][0]["logprobs"]["tokens"]) == 6


def test_stop_token_ids_bad_words_and_include_stop(server: Server) -> None:
    paris = token_id(server, " Paris")
    stopped = chat(server, stop_token_ids=[paris])
    assert content(stopped) == "The capital of France is"
    assert stopped["choices"][0]["finish_reason"] == "stop"
    kept = chat(server, stop=[" Paris"], include_stop_str_in_output=True)
    assert content(kept) == "The capital of France is Paris"
    banned = chat(server, bad_words=["Paris"])
    assert "Paris" not in content(banned)


def test_special_tokens_can_be_kept(server: Server) -> None:
    doc = chat(server, skip_special_tokens=False, include_stop_str_in_output=True)
    assert content(doc).endswith("<|im_end|>")


def test_truncate_prompt_tokens_keeps_the_tail(server: Server) -> None:
    doc = complete(server, "one two three four five six seven eight", truncate_prompt_tokens=3)
    assert doc["usage"]["prompt_tokens"] == 3


def test_chat_logprobs_shape(server: Server) -> None:
    doc = chat(server, logprobs=True, top_logprobs=3, max_tokens=5)
    entries = doc["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == content(doc)
    for e in entries:
        tops = [t["logprob"] for t in e["top_logprobs"]]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert e["top_logprobs"][0]["token"] == e["token"]  # greedy takes the top one
        assert e["bytes"] == list(e["token"].encode())
        assert sum(math.exp(x) for x in tops) <= 1.0 + 1e-6


def test_completion_logprobs_shape_streaming_agrees(server: Server) -> None:
    doc = complete(server, "The capital of France is", logprobs=2, max_tokens=6)
    lp = doc["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == 6
    assert all(len(t) == 2 for t in lp["top_logprobs"])
    assert lp["text_offset"][0] == 0 and "".join(lp["tokens"]) == doc["choices"][0]["text"]
    body = {"prompt": "The capital of France is", "temperature": 0, "max_tokens": 6,
            "logprobs": 2, "stream": True}  # fmt: skip
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=120) as r:
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: {")]
    import json

    streamed = [json.loads(ln[6:])["choices"][0]["logprobs"] for ln in lines]
    offsets = [o for s in streamed if s for o in s["text_offset"]]
    assert offsets == lp["text_offset"]


def test_seeded_request_is_the_same_alone_and_in_a_busy_batch(server: Server) -> None:
    import concurrent.futures

    seeded = {"temperature": 1.0, "seed": 1234, "max_tokens": 24}
    alone = content(chat(server, **seeded))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        noise = [pool.submit(chat, server, temperature=1.0, max_tokens=24) for _ in range(6)]
        busy = pool.submit(chat, server, **seeded)
        together = content(busy.result())
        for f in noise:
            f.result()
    assert together == alone
    other = content(chat(server, **{**seeded, "seed": 99}))
    assert other != alone
