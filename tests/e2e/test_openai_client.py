"""The user's view: the official `openai` client against the real server and model."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import CAPITAL, Server

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": CAPITAL}]


def test_chat_answers_paris_and_streaming_agrees(server: Server) -> None:
    client = server.client()
    whole = client.chat.completions.create(model=server.model, messages=QUESTION, temperature=0)
    answer = whole.choices[0].message.content
    assert answer is not None and "Paris" in answer
    assert whole.choices[0].finish_reason == "stop"
    usage = whole.usage
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    extra = usage.model_extra or {}
    assert extra["latency_s"] >= extra["ttft_s"] > 0 and extra["tpot_s"] > 0
    stream = client.chat.completions.create(
        model=server.model,
        messages=QUESTION,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == answer
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == usage.completion_tokens


def test_stream_ends_with_done(server: Server) -> None:
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 4, "stream": True}
    raw = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).text
    assert raw.endswith("data: [DONE]\n\n")


def test_completions_stream_and_not(server: Server) -> None:
    client = server.client()
    kwargs = {"model": server.model, "prompt": "The capital of France is", "temperature": 0}
    whole = client.completions.create(max_tokens=8, **kwargs)  # type: ignore[call-overload]
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 8
    parts = client.completions.create(max_tokens=8, stream=True, **kwargs)  # type: ignore[call-overload]
    assert "".join(c.choices[0].text for c in parts) == whole.choices[0].text


def test_n_choices_seed_and_stop(server: Server) -> None:
    client = server.client()
    kwargs = {"model": server.model, "messages": QUESTION, "max_tokens": 12}
    two = client.chat.completions.create(n=2, temperature=1.0, seed=11, **kwargs)
    assert [c.index for c in two.choices] == [0, 1]
    again = client.chat.completions.create(n=2, temperature=1.0, seed=11, **kwargs)
    assert [c.message.content for c in again.choices] == [c.message.content for c in two.choices]
    stopped = client.chat.completions.create(temperature=0, stop=[" Paris"], **kwargs)
    assert stopped.choices[0].message.content == "The capital of France is"
    assert stopped.choices[0].finish_reason == "stop"


def test_models_health_tokenize_detokenize(server: Server) -> None:
    models = server.client().models.list().data
    assert [m.id for m in models] == [server.model, "all-MiniLM-L6-v2", "whisper-base"]
    card = models[0].model_extra or {}
    assert card["max_model_len"] == 8192 and models[0].owned_by and models[0].created
    assert httpx.get(f"{server.url}/health").status_code == 200
    tok = httpx.post(f"{server.url}/tokenize", json={"model": server.model, "prompt": "Hello"})
    assert tok.json()["count"] == len(tok.json()["tokens"]) and tok.json()["max_model_len"] == 8192
    chat_tok = httpx.post(f"{server.url}/tokenize", json={"messages": QUESTION}).json()
    assert chat_tok["count"] > tok.json()["count"]
    text = httpx.post(f"{server.url}/detokenize", json={"tokens": tok.json()["tokens"]})
    assert text.json()["prompt"].endswith("Hello")
    info = httpx.get(f"{server.url}/server_info").json()["models"]
    assert info[0]["device"] == "cpu" and info[0]["cpu_kernels"].split()[0] in {"on", "off"}
    if info[0]["cpu_kernels"] != "off":  # fast by default: the GGUF's blocks as they ship
        assert info[0]["quantization"].startswith("auto (down_proj Q4_1,")
        assert info[0]["quantization"].endswith("lm_head Q8_0, o_proj Q4_1, qkv_proj Q4_1)")
        assert info[0]["kv_cache_dtype"] == "float16"  # auto, with quantized layers
    assert info[1]["kind"] == "embed" and info[1]["pooling"] == "mean_tokens"
    assert info[2]["kind"] == "transcribe" and info[2]["windows_at_once"] == "8"


def test_metrics_are_vllm_shaped(server: Server) -> None:
    server.client().completions.create(model=server.model, prompt="Hi", max_tokens=3)
    text = httpx.get(f"{server.url}/metrics").text
    for name in (
        "atom:num_requests_running",
        "atom:num_requests_waiting",
        "atom:prompt_tokens_total",
        "atom:generation_tokens_total",
        'atom:request_success_total{model_name="SmolLM2-135M-Instruct",finished_reason="length"}',
        "atom:time_to_first_token_seconds_bucket",
        "atom:inter_token_latency_seconds_count",
        "atom:e2e_request_latency_seconds_sum",
        'atom:num_requests_running{model_name="all-MiniLM-L6-v2"} 0',  # each model its own
    ):
        assert name in text
    running = [line for line in text.splitlines() if line.startswith("atom:num_requests_running")]
    assert running[0].endswith(" 0")
