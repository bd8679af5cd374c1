"""Each sampling parameter changes real output of the real default model."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import CAPITAL, Server

pytestmark = pytest.mark.slow
Q = [{"role": "user", "content": CAPITAL}]


def chat(server: Server, **body: Any) -> dict[str, Any]:
    return server.chat({"messages": Q, "temperature": 0, "max_tokens": 12, **body})


def complete(server: Server, prompt: Any, **body: Any) -> dict[str, Any]:
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
    """The plain greedy continuation repeats the prompt (twice on the AMD EPYC machine,
    three times on the Intel Xeon one: a near-tie that the CPUs' float arithmetic
    settles differently); each penalty repeats it less."""
    prompt = "I love you. I love you. I love you."
    plain = complete(server, prompt)["choices"][0]["text"]
    assert plain.count("love") >= 2
    for penalty in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0},
                    {"repetition_penalty": 1.8}):  # fmt: skip
        changed = complete(server, prompt, **penalty)["choices"][0]["text"]
        assert changed.count("love") < plain.count("love"), penalty


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


def test_logprobs_spell_the_content_when_the_model_ends_its_turn(server: Server) -> None:
    doc = chat(server, logprobs=True, max_tokens=200)
    assert doc["choices"][0]["finish_reason"] == "stop"  # it wrote its end-of-turn token
    entries = doc["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == content(doc)  # no <|im_end|> entry
    body = {"messages": Q, "temperature": 0, "max_tokens": 200, "logprobs": True, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as r:
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    streamed = [
        e for c in chunks for e in (c["choices"][0].get("logprobs") or {}).get("content") or []
    ]
    assert [e["token"] for e in streamed] == [e["token"] for e in entries]
    doc = complete(server, "Q: What is 2 + 2?\nA:", logprobs=1, max_tokens=200)  # ends
    choice = doc["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "".join(choice["logprobs"]["tokens"]) == choice["text"]


def test_logprobs_can_name_tokens_by_their_ids(server: Server) -> None:
    doc = chat(
        server,
        logprobs=True,
        top_logprobs=2,
        return_tokens_as_token_ids=True,
        return_token_ids=True,
    )
    entries = doc["choices"][0]["logprobs"]["content"]
    ids = doc["choices"][0]["token_ids"]
    assert [e["token"] for e in entries] == [f"token_id:{i}" for i in ids[: len(entries)]]
    assert all(t["token"].startswith("token_id:") for e in entries for t in e["top_logprobs"])


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


def test_batched_prompts_give_one_choice_per_prompt_in_order(server: Server) -> None:
    prompts = ["The capital of France is", "The capital of Italy is"]
    paris = token_id(server, " Paris")
    doc = complete(server, prompts, max_tokens=4, n=2, seed=3, temperature=0.0)
    assert [c["index"] for c in doc["choices"]] == [0, 1, 2, 3]
    alone = [complete(server, p, max_tokens=4)["choices"][0]["text"] for p in prompts]
    assert [c["text"] for c in doc["choices"]] == [alone[0], alone[0], alone[1], alone[1]]
    ids_prompt = complete(server, [[paris, paris], [paris]], max_tokens=2)
    assert ids_prompt["usage"]["prompt_tokens"] == 3 and len(ids_prompt["choices"]) == 2


def test_echo_prepends_the_prompt_with_its_logprobs(server: Server) -> None:
    prompt = "The capital of France is"
    plain = complete(server, prompt, max_tokens=4, logprobs=1)
    echoed = complete(server, prompt, max_tokens=4, logprobs=1, echo=True)
    text = echoed["choices"][0]["text"]
    assert text == prompt + plain["choices"][0]["text"]
    lp = echoed["choices"][0]["logprobs"]
    assert "".join(lp["tokens"]) == text
    assert lp["token_logprobs"][0] is None and all(x is not None for x in lp["token_logprobs"][1:])
    assert lp["text_offset"][len(lp["tokens"]) - 4] == len(prompt)


def test_prompt_logprobs_follow_vllm(server: Server) -> None:
    doc = complete(server, "The capital of France is", max_tokens=2, prompt_logprobs=2)
    entries = doc["choices"][0]["prompt_logprobs"]
    assert entries[0] is None and len(entries) == doc["usage"]["prompt_tokens"]
    for entry in entries[1:]:
        assert 2 <= len(entry) <= 3  # the top two plus the actual token when it is not in them
        assert all({"logprob", "rank", "decoded_token"} <= set(v) for v in entry.values())
    chat_doc = chat(server, prompt_logprobs=0, max_tokens=2)
    assert len(chat_doc["prompt_logprobs"]) == chat_doc["usage"]["prompt_tokens"]


def test_best_of_returns_the_most_likely_of_the_candidates(server: Server) -> None:
    body = {"temperature": 1.0, "seed": 7, "max_tokens": 8}
    best = complete(server, "Once upon a time", best_of=4, logprobs=0, **body)
    assert len(best["choices"]) == 1 and best["usage"]["completion_tokens"] <= 32
    chosen = sum(best["choices"][0]["logprobs"]["token_logprobs"])
    candidates = complete(server, "Once upon a time", n=4, logprobs=0, **body)
    sums = [sum(c["logprobs"]["token_logprobs"]) for c in candidates["choices"]]
    assert math.isclose(chosen, max(sums), rel_tol=1e-6)


def test_truncation_filters_and_temperature_change_real_output(server: Server) -> None:
    greedy = content(chat(server, max_tokens=16))
    hot = {"temperature": 1.8, "max_tokens": 16, "seed": 5}
    assert content(chat(server, **hot)) != greedy
    assert content(chat(server, **hot, top_k=1)) == greedy
    assert content(chat(server, **hot, top_p=1e-6)) == greedy
    assert content(chat(server, **hot, min_p=1.0)) == greedy
